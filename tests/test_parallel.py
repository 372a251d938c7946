"""Data parallelism helpers: rank discovery, sharding, part files, merging."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

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
    assert done_pairs(tmp_path) == {("c", "q1"), ("c", "q2"), ("c", "q3")}
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


def test_wait_for_parts_returns_the_missing_ranks_on_timeout(tmp_path):
    mark_done(tmp_path, 0)
    start = time.monotonic()
    assert wait_for_parts(tmp_path, 3, timeout=0.3, poll_s=0.05) == [1, 2]
    assert time.monotonic() - start >= 0.3
    threading.Timer(0.2, lambda: [mark_done(tmp_path, r) for r in (1, 2)]).start()
    assert wait_for_parts(tmp_path, 3, timeout=5, poll_s=0.05) == []


def test_ranks_agree_on_the_run_id_through_the_rendezvous_file(tmp_path, monkeypatch):
    monkeypatch.delenv(parallel.RUN_ID_ENV, raising=False)
    monkeypatch.setenv("MASTER_PORT", "29555")
    got = {}

    def follower():
        got[1] = shared_run_id(tmp_path, "abc", lambda: "never", rank=1, world=2, timeout=5,
                               poll_s=0.05)

    thread = threading.Thread(target=follower)
    thread.start()
    time.sleep(0.2)
    got[0] = shared_run_id(tmp_path, "abc", lambda: "run-123", rank=0, world=2)
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


def test_parts_append_repair_and_done_tokens(tmp_path):
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
