"""A real llama.cpp server dies under a run through the OpenAI backend: the samples
in flight become infra errors with their cause, the run still finishes, and once
the server is back `--retry-infra` completes them to the scores of a run that was
never interrupted. Skipped without llama-cpp-python (.ci/setup-llamacpp.sh)."""

from __future__ import annotations

import json
import threading

import pytest

lcs = pytest.importorskip("test_llamacpp_server")  # the server the HTTP tests start

from evalpipe.config import parse_config
from evalpipe.runner import execute_run
from evalpipe.store import RunStore

QUESTIONS = lcs.RUN_QUESTIONS + [
    {"id": "c2", "suite": "control", "question": "Name a colour.", "answer": "red",
     "gold_calls": []},
    {"id": "a3", "suite": "arithmetic", "question": "What is 9 minus 4?", "answer": 5,
     "gold_calls": [{"id": "s1", "name": "subtract", "arguments": {"a": 9, "b": 4}}]},
    {"id": "c3", "suite": "control", "question": "Is water wet?", "answer": "yes",
     "gold_calls": []},
]


def start_server(log, port=None):
    if port is not None:  # the same address again, as a restarted service would have
        real, lcs._free_port = lcs._free_port, lambda: port
        try:
            srv = lcs.Server(log)
        finally:
            lcs._free_port = real
    else:
        srv = lcs.Server(log)
    srv.wait_ready()
    return srv


def verdicts(run_dir):
    scores = json.loads((run_dir / "scores.json").read_text())
    return ({(r["cell_id"], r["question_id"]): (r["exact"], r["category"])
             for r in scores["samples"]},
            [(g["cell_id"], g["suite"], g["n"], g["n_infra"]) for g in scores["groups"]])


def test_a_server_killed_mid_run_is_retried_to_the_same_scores(tmp_path, monkeypatch):
    monkeypatch.setenv("EVALPIPE_CACHE", str(tmp_path / "cache"))
    (tmp_path / "q.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    srv = start_server(tmp_path / "server1.log")
    try:
        model = {"id": lcs.MODEL, "backend": "openai", "base_url": srv.url, "concurrency": 2,
                 "extra_body": lcs.GREEDY, "max_retries": 1, "backoff_s": 0.05,
                 "max_backoff_s": 0.1, "timeout_s": 60}
        config = parse_config({"name": "server-kill", "questions": [str(tmp_path / "q.jsonl")],
                               "models": [model], "formats": ["hermes"],
                               "toolsets": ["calculator"], "max_turns": 3,
                               "generation": {"max_new_tokens": 48}},
                              source=str(tmp_path / "server-kill.yaml"))
        whole = execute_run(config, tmp_path / "whole", use_cache=False, echo=lambda s: None)

        real_append = RunStore.append_samples
        killed = threading.Event()

        def kill_after_first_write(self, samples):
            real_append(self, samples)
            if not killed.is_set():  # the first samples are in: the server dies under the rest
                killed.set()
                srv.proc.kill()
                srv.proc.wait()

        monkeypatch.setattr(RunStore, "append_samples", kill_after_first_write)
        run_dir = execute_run(config, tmp_path / "cut", use_cache=False, echo=lambda s: None)
        monkeypatch.setattr(RunStore, "append_samples", real_append)
    finally:
        srv.stop()
    assert killed.is_set()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "finished"  # the run finished, with infra errors in it
    first = RunStore(run_dir).read_samples()
    infra = [s for s in first if s["stop_reason"] == "infra_error"]
    assert infra and len(infra) < len(first)
    for s in infra:  # the cause is recorded
        assert srv.url in s["error"]
        assert "cannot connect" in s["error"] or "connection lost" in s["error"], s["error"]
    print(f"\nserver killed after the first write: {len(infra)} of {len(first)} samples "
          "became infra errors")

    again = start_server(tmp_path / "server2.log", port=srv.port)
    try:
        execute_run(config, tmp_path / "cut", resume=run_dir, use_cache=False,
                    retry_infra=True, echo=lambda s: None)
    finally:
        again.stop()
    retry = json.loads((run_dir / "manifest.json").read_text())["retries"][-1]
    assert retry["retried"] == len(infra) and retry["still_infra"] == 0
    assert sum(retry["first_causes"].values()) == len(infra)
    after = RunStore(run_dir).read_samples()
    kept = {s["question_id"]: s for s in first if s["stop_reason"] != "infra_error"}
    assert [s["question_id"] for s in after] == [s["question_id"] for s in first]
    assert all(s == kept[s["question_id"]] for s in after if s["question_id"] in kept)
    assert verdicts(run_dir) == verdicts(whole)
    print(f"retried {retry['retried']}; final verdicts equal those of the uninterrupted run")
