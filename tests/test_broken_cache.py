"""A broken generation cache never fails a run: corrupt, read-only, on a full disk or
locked by another process, it is reported in one warning line and the run goes on
without it (docs/runs.md). Through the real command line, against a fake server."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from disk import remount, tmpfs
from fake_openai import FakeOpenAI, write_config


def run(config: Path, out: Path, cache: Path, **env: str) -> subprocess.CompletedProcess:
    environ = dict(os.environ, EVALPIPE_GENERATION_CACHE=str(cache), **env)
    return subprocess.run([sys.executable, "-m", "evalpipe", "run", "--config", str(config),
                           "--out", str(out)], capture_output=True, text=True, env=environ,
                          check=False)


def assert_went_on_without_it(res: subprocess.CompletedProcess, out: Path, why: str) -> None:
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    warnings = [line for line in res.stderr.splitlines() if "generation cache" in line]
    assert len(warnings) == 1, res.stderr
    assert warnings[0].startswith("warning: generation cache ") and why in warnings[0]
    assert warnings[0].endswith("going on without it: every reply is generated")
    manifest = json.loads(((out / "latest") / "manifest.json").read_text())
    assert manifest["status"] == "finished" and why in manifest["cache"]["problem"]
    scores = json.loads(((out / "latest") / "scores.json").read_text())
    assert all(s["category"] == "correct" for s in scores["samples"])


@pytest.fixture
def server():
    with FakeOpenAI() as fake:
        yield fake


def test_a_corrupt_cache_file(tmp_path, server):
    cache = tmp_path / "gen.sqlite"
    cache.write_bytes(b"this is not a database\n" * 100)
    res = run(write_config(tmp_path, server.url), tmp_path / "o", cache)
    assert_went_on_without_it(res, tmp_path / "o", "file is not a database")
    assert cache.read_bytes() == b"this is not a database\n" * 100  # left as it was


def test_a_cache_in_a_folder_that_cannot_exist(tmp_path, server):
    (tmp_path / "file").write_text("a file where the cache's folder should be")
    res = run(write_config(tmp_path, server.url), tmp_path / "o", tmp_path / "file" / "g.sqlite")
    assert_went_on_without_it(res, tmp_path / "o", "cannot open it")


def test_a_cache_locked_by_another_process(tmp_path, server):
    cache = tmp_path / "gen.sqlite"
    holder = subprocess.Popen(
        [sys.executable, "-c", ("import sqlite3, sys\n"
                                f"db = sqlite3.connect({str(cache)!r}, isolation_level=None)\n"
                                "db.execute('CREATE TABLE t (x)')\n"
                                "db.execute('BEGIN EXCLUSIVE')\n"
                                "db.execute('INSERT INTO t VALUES (1)')\n"
                                "print('locked', flush=True); sys.stdin.read()")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        res = run(write_config(tmp_path, server.url), tmp_path / "o", cache,
                  EVALPIPE_CACHE_BUSY_S="1")
        assert_went_on_without_it(res, tmp_path / "o", "database is locked")
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)


def test_a_cache_on_a_read_only_disk(tmp_path, server):
    config = write_config(tmp_path, server.url)
    with tmpfs(tmp_path / "ro", "4m") as disk:
        assert run(config, tmp_path / "first", disk / "gen.sqlite").returncode == 0
        remount(disk, "ro")
        res = run(config, tmp_path / "o", disk / "gen.sqlite")
        assert_went_on_without_it(res, tmp_path / "o", "cannot open it")


def test_a_cache_on_a_full_disk(tmp_path, server):
    config = write_config(tmp_path, server.url, n=6)
    with tmpfs(tmp_path / "full", "64k") as disk:
        cache = disk / "gen.sqlite"
        db = sqlite3.connect(cache)  # an existing cache, then the disk fills up
        db.execute("PRAGMA journal_mode=WAL")
        db.close()
        fill(disk)
        res = run(config, tmp_path / "o", cache)
        assert_went_on_without_it(res, tmp_path / "o", "disk I/O error")  # at opening


def fill(disk: Path) -> None:
    fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
    with pytest.raises(OSError):
        while True:
            os.write(fd, b"\0" * 4096)
    os.close(fd)


def test_a_disk_that_fills_while_the_cache_is_open(tmp_path):
    from evalpipe.cache import GenerationCache
    from evalpipe.errors import DataWarning
    from evalpipe.records import Generation

    with tmpfs(tmp_path / "full", "256k") as disk:
        cache = GenerationCache(disk / "gen.sqlite")
        cache._put_many([("a", Generation("first"))])
        fill(disk)
        big = [(f"k{i}", Generation("x" * 20_000)) for i in range(20)]
        with pytest.warns(DataWarning, match="cannot write it .*(full|I/O)") as caught:
            cache._put_many(big)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # given up: nothing happens, and no second warning
            cache._put_many([("b", Generation("again"))])
        assert len(caught) == 1
        assert cache.problem is not None and cache._get_many(["a"]) == {}
        cache.close()
