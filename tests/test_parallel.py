"""Data parallelism helpers: rank discovery, sharding, part files, merging."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest
from helpers import FakeClock

from evalpipe import parallel
from evalpipe.errors import InputError
from evalpipe.parallel import (
    done_pairs,
    mark_done,
    merge_parts,
    part_path,
    rank_world,
    shard,
    shared_run_id,
    wait_for_parts,
)


def test_rank_world_reads_the_launcher_environment():
    assert rank_world({}) == (0, 1)
    assert rank_world({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}) == (3, 4)
    assert rank_world({"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}) == (1, 2)
    with pytest.raises(InputError):
        rank_world({"RANK": "4", "WORLD_SIZE": "4"})
    with pytest.raises(InputError):
        rank_world({"RANK": "x", "WORLD_SIZE": "2"})


@pytest.mark.parametrize("n,world", [(0, 3), (1, 3), (10, 1), (10, 3), (17, 4), (5, 8)])
def test_shards_cover_every_item_once_and_are_deterministic(n, world):
    items = [f"q{i}" for i in range(n)]
    parts = [shard(items, r, world) for r in range(world)]
    assert sorted(x for p in parts for x in p) == sorted(items)
    assert sum(len(p) for p in parts) == n
    assert max(map(len, parts)) - min(map(len, parts)) <= 1  # balanced
    assert parts == [shard(items, r, world) for r in range(world)]
    if n >= world:
        assert parts[1 % world][0] == items[1 % world]  # round-robin
    with pytest.raises(ValueError):
        shard(items, world, world)


def _sample(cell, q, rank=0):
    return {"cell_id": cell, "question_id": q, "rank": rank, "final_answer": f"{cell}:{q}"}


def _write_run(tmp_path, qids, cells):
    (tmp_path / "questions.jsonl").write_text(
        "".join(json.dumps({"id": q, "suite": "s", "question": q, "answer": 1}) + "\n"
                for q in qids))
    (tmp_path / "manifest.json").write_text(json.dumps({"run_id": "r", "cells": {
        c: {} for c in cells}}))


def _write_part(run_dir, rank, records, torn=""):
    part_path(run_dir, rank).write_text(
        "".join(json.dumps(r) + "\n" for r in records) + torn)


def test_merge_gives_cell_then_question_order(tmp_path):
    qids = [f"q{i}" for i in range(7)]
    cells = ["m/hermes/calc/no-rag", "m/-/none/no-rag"]
    _write_run(tmp_path, qids, cells)
    world = 3
    for rank in range(world):
        # each rank runs every cell on its shard, cell by cell
        _write_part(tmp_path, rank, [_sample(c, q, rank) for c in cells
                                     for q in shard(qids, rank, world)])
        mark_done(tmp_path, rank)
    assert wait_for_parts(tmp_path, world, timeout=1) == []
    assert merge_parts(tmp_path, world) == len(qids) * len(cells)
    merged = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert [(s["cell_id"], s["question_id"]) for s in merged] == [
        (c, q) for c in cells for q in qids]
    assert not list(tmp_path.glob("samples.part*")) and not list(tmp_path.glob("part*.done"))


def test_merge_order_is_the_same_whatever_the_world_size(tmp_path):
    qids = [f"q{i:02d}" for i in range(11)]
    cells = ["b", "a"]  # grid order, not alphabetical
    outputs = []
    for world in (1, 2, 5):
        run = tmp_path / f"w{world}"
        run.mkdir()
        _write_run(run, qids, cells)
        for rank in range(world):
            _write_part(run, rank, [_sample(c, q) for c in cells
                                    for q in reversed(shard(qids, rank, world))])
        merge_parts(run, world)
        outputs.append((run / "samples.jsonl").read_text())
    assert outputs[0] == outputs[1] == outputs[2]


def test_explicit_cell_order_wins_over_the_manifest(tmp_path):
    _write_run(tmp_path, ["q1", "q2"], ["a", "b"])
    _write_part(tmp_path, 0, [_sample("a", "q1"), _sample("b", "q1")])
    _write_part(tmp_path, 1, [_sample("a", "q2"), _sample("b", "q2")])
    merge_parts(tmp_path, 2, cell_order=["b", "a"])
    merged = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert [(s["cell_id"], s["question_id"]) for s in merged] == [
        ("b", "q1"), ("b", "q2"), ("a", "q1"), ("a", "q2")]


def test_merge_keeps_earlier_samples_drops_torn_lines_and_duplicates(tmp_path):
    _write_run(tmp_path, ["q1", "q2", "q3"], ["c"])
    (tmp_path / "samples.jsonl").write_text(json.dumps(_sample("c", "q2", rank=9)) + "\n")
    _write_part(tmp_path, 0, [_sample("c", "q1"), _sample("c", "q2")],
                torn='{"cell_id": "c", "quest')  # rank 0 was killed mid-write
    _write_part(tmp_path, 1, [_sample("c", "q3", 1)])
    assert done_pairs(tmp_path) == {("c", "q1", 0), ("c", "q2", 0), ("c", "q3", 0)}
    assert merge_parts(tmp_path, 2) == 3
    merged = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert [s["question_id"] for s in merged] == ["q1", "q2", "q3"]
    assert merged[1]["rank"] == 9  # samples.jsonl came first: its record wins


def test_merge_with_a_missing_part_keeps_what_exists(tmp_path):
    _write_run(tmp_path, ["q1", "q2"], ["c"])
    _write_part(tmp_path, 1, [_sample("c", "q2", 1)])
    assert merge_parts(tmp_path, 2) == 1


def test_a_corrupt_line_in_the_middle_is_an_error(tmp_path):
    _write_run(tmp_path, ["q1"], ["c"])
    part_path(tmp_path, 0).write_text('{"bad\n' + json.dumps(_sample("c", "q1")) + "\n")
    with pytest.raises(InputError, match="corrupt"):
        merge_parts(tmp_path, 1)


def test_wait_for_parts_returns_the_missing_ranks_on_timeout(tmp_path, monkeypatch):
    clock = FakeClock()  # time passes only as the waiting loop sleeps
    monkeypatch.setattr(parallel, "time", clock)
    mark_done(tmp_path, 0)
    assert wait_for_parts(tmp_path, 3, timeout=0.3, poll_s=0.05) == [1, 2]
    waited = sum(clock.sleeps)
    assert 0.3 - 1e-9 <= waited <= 0.3 + 0.05 + 1e-9  # it polled until the timeout, no longer
    # The other ranks finish while rank 0 waits.
    clock.on_sleep = lambda s: [mark_done(tmp_path, r) for r in (1, 2)]
    clock.sleeps.clear()
    assert wait_for_parts(tmp_path, 3, timeout=5, poll_s=0.05) == []
    assert clock.sleeps == [0.05]


def test_ranks_agree_on_the_run_id_through_the_rendezvous_file(tmp_path, monkeypatch):
    monkeypatch.delenv(parallel.RUN_ID_ENV, raising=False)
    monkeypatch.setenv("MASTER_PORT", "29555")
    # Rank 1 looks for the id first, finds nothing and waits; rank 0 publishes while it waits.
    waiting, published = threading.Event(), threading.Event()

    def rank_1_waits(seconds: float) -> None:
        waiting.set()
        published.wait(60)  # the bound only ends a failed test

    monkeypatch.setattr(parallel, "time", FakeClock(on_sleep=rank_1_waits))
    got = {}

    def follower():
        got[1] = shared_run_id(tmp_path, "abc", lambda: "never", rank=1, world=2, timeout=5,
                               poll_s=0.05)

    thread = threading.Thread(target=follower)
    thread.start()
    assert waiting.wait(60)
    got[0] = shared_run_id(tmp_path, "abc", lambda: "run-123", rank=0, world=2)
    published.set()
    thread.join()
    assert got == {0: "run-123", 1: "run-123"}
    assert shared_run_id(tmp_path, "abc", lambda: "solo", rank=0, world=1) == "solo"
    monkeypatch.setenv(parallel.RUN_ID_ENV, "given")
    assert shared_run_id(tmp_path, "abc", lambda: "x", rank=1, world=2) == "given"


def test_launch_keys_differ_between_launches_and_configs():
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": "2",
           "LOCAL_WORLD_SIZE": "2"}
    assert parallel.launch_key("a", env) == parallel.launch_key("a", env)
    assert parallel.launch_key("a", env) != parallel.launch_key("b", env)
    assert parallel.launch_key("a", env) != parallel.launch_key("a", dict(env, MASTER_PORT="1"))


def test_python_dash_m_evalpipe_runs_the_cli():
    proc = subprocess.run([sys.executable, "-m", "evalpipe", "--help"], capture_output=True,
                          text=True, timeout=120, check=False,
                          cwd=os.path.dirname(os.path.dirname(__file__)))
    assert proc.returncode == 0 and "Usage: evalpipe" in proc.stdout and " run " in proc.stdout


def test_parts_append_repair_and_done_tokens(tmp_path, monkeypatch):
    monkeypatch.setattr(parallel, "time", FakeClock())  # the waits below pass no real time
    _write_run(tmp_path, ["q1", "q2", "q3"], ["c"])
    parallel.append_part(tmp_path, 0, [_sample("c", "q1")])
    with open(part_path(tmp_path, 0), "a") as f:
        f.write('{"cell_id": "c", "qu')  # killed mid-write
    parallel.repair_part(tmp_path, 0)
    parallel.append_part(tmp_path, 0, [_sample("c", "q3")])
    assert [r["question_id"] for r in parallel.read_records(part_path(tmp_path, 0))] == [
        "q1", "q3"]
    mark_done(tmp_path, 0, token="old-launch")  # a marker left by an earlier launch
    assert wait_for_parts(tmp_path, 1, timeout=0.1, poll_s=0.02, token="this-launch") == [0]
    mark_done(tmp_path, 0, count=2, token="this-launch")
    assert wait_for_parts(tmp_path, 1, timeout=0.1, token="this-launch") == []


def test_a_launch_never_appends_to_an_earlier_launchs_run_directory(tmp_path):
    """A reused EVALPIPE_RUN_ID names an existing directory: every rank refuses it, except
    a helper rank finding the manifest its own launch's rank 0 has just written."""
    from evalpipe.parallel import Shard

    run_dir = tmp_path / "run"
    for share in (Shard(), Shard(0, 2, "this"), Shard(1, 2, "this")):
        share.refuse_an_earlier_run(run_dir)  # nothing there yet
    run_dir.mkdir()
    (run_dir / "manifest.json").write_text(json.dumps({"run_id": "run", "config": {},
                                                       "launch": "this"}))
    Shard(1, 2, "this").refuse_an_earlier_run(run_dir)
    for share in (Shard(), Shard(0, 2, "this"), Shard(0, 2, "later"), Shard(1, 2, "later")):
        with pytest.raises(InputError, match="exists already") as err:
            share.refuse_an_earlier_run(run_dir)
        assert err.value.field == parallel.RUN_ID_ENV and "--resume" in str(err.value)


# -- two processes through the runner ---------------------------------------------------------

RUN_CODE = """
import json, sys
from pathlib import Path
from evalpipe.config import parse_config
from evalpipe.runner import execute_run
cfg = parse_config(json.loads(Path(sys.argv[1]).read_text()), source=sys.argv[1])
print(execute_run(cfg, Path(sys.argv[2]), use_cache=False, echo=print))
"""


@pytest.fixture
def echo_server():
    """A stub Chat Completions server: 'times' questions call multiply (hermes text),
    tool results get 'The answer is 42.', anything else is echoed."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            users = [m["content"] for m in body["messages"] if m["role"] == "user"]
            if users[-1].startswith("<tool_response>"):
                text = "The answer is 42."
            elif "times" in users[-1]:
                text = '<tool_call>{"name": "multiply", "arguments": {"a": 6, "b": 7}}</tool_call>'
            else:
                text = f"echo {users[-1]}"
            raw = json.dumps({"choices": [{"index": 0, "finish_reason": "stop", "message": {
                "role": "assistant", "content": text}}], "usage": {
                "prompt_tokens": 5, "completion_tokens": 3}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_two_ranks_write_the_same_run_as_one_process(tmp_path, echo_server):
    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps({
        "id": f"q{i}", "suite": "arithmetic" if i % 2 else "control", "answer": 42,
        "question": f"What is 6 times 7? ({i})" if i % 3 else f"Say {i}"}) + "\n"
        for i in range(11)))
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "name": "par", "questions": [str(questions)], "formats": ["hermes"],
        "toolsets": ["none", "calculator"],
        "models": [{"id": "stub", "backend": "openai", "base_url": echo_server,
                    "stream": "off"}]}))
    env = {k: v for k, v in os.environ.items() if k not in (
        "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", parallel.RUN_ID_ENV)}
    env.update(EVALPIPE_CACHE=str(tmp_path / "cache"), MASTER_ADDR="127.0.0.1",
               MASTER_PORT="29517")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    single = subprocess.run([sys.executable, "-c", RUN_CODE, str(config), str(tmp_path / "one")],
                            env=env, cwd=repo, capture_output=True, text=True, timeout=300,
                            check=False)
    assert single.returncode == 0, single.stderr[-2000:]
    procs = [subprocess.Popen([sys.executable, "-c", RUN_CODE, str(config), str(tmp_path / "two")],
                              env=dict(env, RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r),
                                       LOCAL_WORLD_SIZE="2"),
                              cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(2)]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]

    def run_dir(root):
        [found] = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")
                   and p.name != "latest"]
        return found

    one, two = run_dir(tmp_path / "one"), run_dir(tmp_path / "two")
    a = [json.loads(x) for x in (one / "samples.jsonl").read_text().splitlines()]
    b = [json.loads(x) for x in (two / "samples.jsonl").read_text().splitlines()]
    assert len(a) == len(b) == 22
    assert [(s["cell_id"], s["question_id"], s["final_answer"]) for s in a] == [
        (s["cell_id"], s["question_id"], s["final_answer"]) for s in b]
    assert not list(two.glob("samples.part*")) and not list(two.glob("part*.done"))
    assert (two / "scores.json").is_file()


def test_merge_keeps_every_repeat_in_cell_repeat_question_order(tmp_path):
    _write_run(tmp_path, ["q1", "q2"], ["c"])
    rep = [{**_sample("c", q, rank), "repeat": r} for r in (1, 0) for q, rank in
           (("q2", 1), ("q1", 0))]
    _write_part(tmp_path, 0, [s for s in rep if s["rank"] == 0])
    _write_part(tmp_path, 1, [s for s in rep if s["rank"] == 1] + [rep[0]])  # a duplicate
    assert done_pairs(tmp_path) == {("c", q, r) for q in ("q1", "q2") for r in (0, 1)}
    assert merge_parts(tmp_path, 2) == 4
    merged = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert [(s["repeat"], s["question_id"]) for s in merged] == [
        (0, "q1"), (0, "q2"), (1, "q1"), (1, "q2")]
