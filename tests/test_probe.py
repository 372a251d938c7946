"""The latency probe on a tiny model: samples re-run alone, kept out of accuracy, shown
in the report's cost table as the unbatched time to first token."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from helpers import tiny_arithmetic_config

from evalpipe.probe import probe_questions


def evalpipe(*args, env):
    return subprocess.run([sys.executable, "-m", "evalpipe", *args], capture_output=True,
                          text=True, env=env, check=False)


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_probe_questions_are_spread_over_the_list():
    qs = list(range(10))
    assert probe_questions(qs, 3) == [0, 3, 6]
    assert probe_questions(qs, 20) == qs
    assert probe_questions(qs, 0) == []


def test_probe_samples_are_timed_alone_and_not_mixed_into_accuracy(tmp_path, tiny_model_dir):
    path = tiny_arithmetic_config(tmp_path, tiny_model_dir, latency_probe=2)
    env = dict(os.environ, EVALPIPE_GENERATION_CACHE=str(tmp_path / "gen.sqlite"))
    out = tmp_path / "o"
    ran = evalpipe("run", "--config", str(path), "--out", str(out), env=env)
    assert ran.returncode == 0, ran.stderr
    (run_dir,) = [p for p in out.iterdir() if p.name != "latest"]
    samples, probe = _lines(run_dir / "samples.jsonl"), _lines(run_dir / "probe.jsonl")
    assert len(samples) == 12 and not any(s.get("probe") for s in samples)
    assert len(probe) == 4 and all(p["probe"] for p in probe)
    assert sorted({(p["cell_id"], p["question_id"]) for p in probe}) == sorted(
        (c, q) for c in {s["cell_id"] for s in samples} for q in ("q0", "q3"))
    # Alone and cold: nothing came from the shared prefix, yet the replies are the batch's.
    batched = {(s["cell_id"], s["question_id"]): s for s in samples}
    for p in probe:
        assert all(t["prefix_tokens"] == 0 and not t["cached"] for t in p["turns"])
        twin = batched[(p["cell_id"], p["question_id"])]
        assert [t["raw"] for t in p["turns"]] == [t["raw"] for t in twin["turns"]]
    scores = json.loads((run_dir / "scores.json").read_text())
    assert len(scores["samples"]) == 12
    assert all(g["n"] == 6 for g in scores["groups"] if g["suite"] == "all")

    report = json.loads(evalpipe("report", str(run_dir), "--format", "json", env=env).stdout)
    rows = {r["cell_id"]: r for r in report["cost"]}
    tools = next(c for c in rows if "/calculator/" in c)
    assert rows[tools]["fields"]["probe_ttft_ms"]["n"] == 2
    assert rows[tools]["ratios"]["probe_ttft_ms"] is not None
    assert rows[tools]["fields"]["prompt_tokens"]["mean"] > 0
    md = evalpipe("report", str(run_dir), "--format", "md", env=env).stdout
    assert "time to first token ms (unbatched)" in md and "(under load)" in md

    # A second run is served from the cache, but the probe still generates (and times).
    again = evalpipe("run", "--config", str(path), "--out", str(out), env=env)
    assert again.returncode == 0, again.stderr
    (second,) = [p for p in out.iterdir() if p.name not in ("latest", run_dir.name)]
    assert all(t["cached"] for s in _lines(second / "samples.jsonl") for t in s["turns"])
    assert not any(t["cached"] for p in _lines(second / "probe.jsonl") for t in p["turns"])
