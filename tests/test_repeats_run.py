"""`repeats: N` in whole runs on a tiny model built in the test: one seed per repeat,
recorded and re-runnable, repeats in the cache key and in resume, greedy runs once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from helpers import write_jsonl

from evalpipe.config import load_config
from evalpipe.runner import execute_run
from evalpipe.store import RunStore


def _config(tmp_path: Path, model_dir: Path, **gen) -> Path:
    questions = [{"id": f"q{i}", "suite": "arithmetic", "lang": "en",
                  "question": f"What is {i} times {i + 7}?", "answer": i * (i + 7)}
                 for i in range(4)]
    write_jsonl(tmp_path / "q.jsonl", questions)
    config = {"name": "rep", "questions": [str(tmp_path / "q.jsonl")],
              "models": [{"id": str(model_dir)}], "toolsets": ["none"], "retrieval": ["none"],
              "max_turns": 1, "generation": {"max_new_tokens": 8, "batch_size": 4, **gen}}
    path = tmp_path / "rep.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _run(config_path: Path, out: Path, *sets: str, cache: bool = False, log=None) -> Path:
    config = load_config(config_path, sets=list(sets))
    return execute_run(config, out, use_cache=cache,
                       echo=(log.append if log is not None else lambda s: None))


def _replies(run_dir: Path) -> dict[tuple[str, int], str]:
    return {(s["question_id"], s["repeat"]): s["turns"][0]["raw"]
            for s in RunStore(run_dir).read_samples()}


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EVALPIPE_GENERATION_CACHE", str(tmp_path / "gen.sqlite"))


def test_each_repeat_samples_with_its_own_recorded_seed(tmp_path, tiny_model_dir,
                                                        private_cache):
    cfg = _config(tmp_path, tiny_model_dir, temperature=1.0, seed=5)
    run = _run(cfg, tmp_path / "a", "repeats=3", cache=True)
    samples = RunStore(run).read_samples()
    seeds = load_config(cfg, sets=["repeats=3"]).repeat_seeds()
    assert seeds[0] == 5 and len(set(seeds)) == 3
    assert sorted((s["question_id"], s["repeat"]) for s in samples) == [
        (f"q{i}", r) for i in range(4) for r in range(3)]
    assert {(s["repeat"], s["seed"]) for s in samples} == set(enumerate(seeds))
    replies = _replies(run)
    assert any(len({replies[(f"q{i}", r)] for r in range(3)}) > 1 for i in range(4))
    manifest = json.loads((run / "manifest.json").read_text())
    # Turn 0 has the same prompt in every repeat: only the seed in the key keeps the
    # cache from serving repeat 0's reply to repeats 1 and 2.
    assert manifest["cache"]["hits"] == 0 and manifest["repeats"]["seeds"] == seeds
    scores = json.loads((run / "scores.json").read_text())
    (group,) = [g for g in scores["groups"] if g["suite"] == "all"]
    assert group["repeats"]["repeats"] == 3 and group["n"] == 12

    # A repeat runs again exactly from its recorded seed, alone.
    again = _run(cfg, tmp_path / "b", f"generation.seed={seeds[2]}")
    assert {q: t for (q, r), t in _replies(again).items()} == {
        q: t for (q, r), t in replies.items() if r == 2}


def test_resume_runs_only_the_missing_repeats(tmp_path, tiny_model_dir, private_cache):
    cfg = _config(tmp_path, tiny_model_dir, temperature=1.0)
    run = _run(cfg, tmp_path / "a", "repeats=3")
    full = _replies(run)
    store = RunStore(run)
    kept = [s for s in store.read_samples() if not (s["repeat"] == 2 and s["question_id"] in
                                                   ("q1", "q3"))]
    store.samples_path.write_text("".join(json.dumps(s) + "\n" for s in kept))
    config = load_config(cfg, sets=["repeats=3"])
    log: list[str] = []
    execute_run(config, tmp_path / "a", resume=run, use_cache=False, echo=log.append)
    assert any("resuming: 10 samples already written" in line for line in log)
    assert _replies(run) == full


def test_greedy_repeats_run_once_and_say_so(tmp_path, tiny_model_dir, private_cache):
    cfg = _config(tmp_path, tiny_model_dir, temperature=0.0)
    log: list[str] = []
    run = _run(cfg, tmp_path / "a", "repeats=4", log=log)
    assert any("greedy" in line and "runs once" in line for line in log)
    samples = RunStore(run).read_samples()
    assert len(samples) == 4 and {s["repeat"] for s in samples} == {0}
    assert {s["seed"] for s in samples} == {None}
