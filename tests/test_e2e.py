"""End to end on the real embedded default model: `evalpipe run` from the
command line, and two runs of one config giving identical samples."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import REPO
from test_runs import strip_timings

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def e2e_config(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("e2e")
    config = yaml.safe_load((REPO / "configs" / "default.yaml").read_text())
    # The embedded default model only: the default job's other model, the 0.5B, is a
    # 478 MB fetch (tests/test_qwen.py runs it where the cache holds it).
    config.update(name="e2e", limit=1, generation={"max_new_tokens": 48, "batch_size": 8},
                  max_turns=3, models=[m for m in config["models"] if m["id"] == "smollm2-135m"])
    config["questions"] = [str(REPO / p) for p in config["questions"]]
    config["corpus"] = str(REPO / config["corpus"])
    path = tmp / "e2e.yaml"
    path.write_text(yaml.safe_dump(config, allow_unicode=True))
    return path


def run_cli(config: Path, out: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, EVALPIPE_GENERATION_CACHE=str(out / "gen.sqlite"))
    return subprocess.run([sys.executable, "-m", "evalpipe.cli", "run", "--config", str(config),
                           "--out", str(out), "--no-cache"], capture_output=True, text=True,
                          env=env, cwd=REPO)


def test_default_model_end_to_end_twice_identical(e2e_config, tmp_path, default_backend):
    first = run_cli(e2e_config, tmp_path / "a")
    assert first.returncode == 0, first.stderr[-3000:]
    assert "| cell | n | exact match |" in first.stdout
    run_a = (tmp_path / "a" / "latest").resolve()
    for name in ("manifest.json", "questions.jsonl", "samples.jsonl", "scores.json", "table.md"):
        assert (run_a / name).is_file(), name
    manifest = json.loads((run_a / "manifest.json").read_text())
    assert manifest["versions"]["torch"] and manifest["config_hash"] and manifest["git_commit"]
    assert len(manifest["cells"]) == 4
    samples = [json.loads(line) for line in (run_a / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 4 * 4  # 4 cells x one question from each of 4 suites
    for s in samples:
        assert s["stop_reason"] in {"answered", "turn_limit", "length"}
        assert s["turns"] and s["turns"][0]["prompt_tokens"] > 0
        assert s["messages"][0]["role"] == "system" and s["messages"][1]["role"] == "user"
    rag = [s for s in samples if s["cell_id"].endswith("bm25-prepend")]
    # A query that shares no term with the corpus (a bare sum) retrieves nothing.
    assert all(len(s["retrieved"]) <= 3 for s in rag)
    assert any(len(s["retrieved"]) == 3 for s in rag)
    assert all(c["source"] == "prepend" for s in rag for c in s["retrieved"])
    scores = json.loads((run_a / "scores.json").read_text())
    assert {g["cell_id"] for g in scores["groups"]} == set(manifest["cells"])

    second = run_cli(e2e_config, tmp_path / "b")
    assert second.returncode == 0, second.stderr[-3000:]
    run_b = (tmp_path / "b" / "latest").resolve()
    again = [json.loads(line) for line in (run_b / "samples.jsonl").read_text().splitlines()]
    assert [strip_timings(s) for s in again] == [strip_timings(s) for s in samples]
