"""The run store: whole records, torn last lines, a single writer."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from evalpipe.errors import InputError
from evalpipe.store import RunLockedError, RunStore


def test_torn_last_line_is_dropped_and_cut_on_repair(tmp_path):
    store = RunStore(tmp_path)
    store.append_samples([{"cell_id": "m", "question_id": "a"},
                          {"cell_id": "m", "question_id": "b"}])
    with open(store.samples_path, "a") as f:
        f.write('{"cell_id": "m", "question_id": "c", "turns": [')  # killed mid-write
    assert [r["question_id"] for r in store.read_samples()] == ["a", "b"]
    store.read_samples(repair=True)
    store.append_samples([{"cell_id": "m", "question_id": "c"}])
    assert [r["question_id"] for r in store.read_samples()] == ["a", "b", "c"]


def test_corruption_before_the_last_line_is_an_error(tmp_path):
    store = RunStore(tmp_path)
    store.samples_path.write_text('{"cell_id": "m", "question_id": "a"}\nnot json\n'
                                  '{"cell_id": "m", "question_id": "b"}\n')
    with pytest.raises(InputError) as err:
        store.read_samples()
    assert err.value.line == 2


def test_a_second_writer_is_refused(tmp_path):
    script = ("import sys, time; from evalpipe.store import RunStore; "
              f"s = RunStore({str(tmp_path)!r}); s.lock(); print('locked', flush=True); "
              # The holder sleeps only to keep its lock until the test kills it; nothing
              # waits on time.
              "time.sleep(30)")
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(RunLockedError, match="refusing a second writer"):
            RunStore(tmp_path).lock()
    finally:
        holder.kill()
        holder.wait()
    with RunStore(tmp_path):  # free again once the holder is gone
        pass


def test_json_files_are_replaced_whole(tmp_path):
    store = RunStore(tmp_path)
    store.write_json("scores.json", {"a": 1})
    assert json.loads((tmp_path / "scores.json").read_text()) == {"a": 1}
    assert not list(tmp_path.glob(".*.tmp"))


def test_run_ids_differ_below_one_second_and_sort_by_start(monkeypatch):
    import time as _time

    from evalpipe.store import new_run_id

    clock = iter([1_700_000_000.001, 1_700_000_000.002, 1_700_000_000.5])
    monkeypatch.setattr(_time, "time", lambda: next(clock))
    ids = [new_run_id("default", "abcdef123") for _ in range(3)]
    assert len(set(ids)) == 3 and ids == sorted(ids)
    assert all(i.endswith("-default-abcdef") for i in ids)
