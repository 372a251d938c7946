"""A full disk under --out, for real (a small tmpfs): the run stops in one line with exit
1, samples.jsonl keeps only whole records, the manifest says `failed`, and once there
is space `--resume` finishes the run. Skipped where a tmpfs cannot be mounted."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys

import pytest
from disk import remount, tmpfs
from fake_openai import FakeOpenAI, Json, chat, write_config
from helpers import ScriptedBackend

from evalpipe import runner
from evalpipe.errors import StorageError
from evalpipe.store import RunStore


def evalpipe(*args, env):
    return subprocess.run([sys.executable, "-m", "evalpipe", *map(str, args)],
                          capture_output=True, text=True, env=env, check=False)


def test_a_full_disk_leaves_whole_records_a_failed_manifest_and_resumes(tmp_path):
    env = dict(os.environ, EVALPIPE_CACHE=str(tmp_path / "cache"))
    # short replies: many small appends, one of which meets the end of the disk
    with FakeOpenAI(respond=lambda path, body: Json(chat("The answer is 1."))) as server, \
            tmpfs(tmp_path / "disk", "64k") as disk:
        config = write_config(tmp_path, server.url, n=40, toolsets=("none",))
        res = evalpipe("run", "--config", config, "--out", disk / "o", "--no-cache", env=env)
        assert res.returncode == 1, res.stderr
        errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "No space left on device" in errors[0], res.stderr
        assert "Traceback" not in res.stderr
        (run_dir,) = (disk / "o").iterdir()
        raw = (run_dir / "samples.jsonl").read_bytes()
        assert raw.endswith(b"\n")  # no half record
        written = [json.loads(line) for line in raw.splitlines()]
        assert 0 < len(written) < 40
        manifest = json.loads((run_dir / "manifest.json").read_text())
        assert manifest["status"] == "failed" and "No space left on device" in manifest["error"]
        assert not (run_dir / ".reserve").exists()  # the space kept for the end is given back

        remount(disk, "size=8m")  # space again
        res = evalpipe("run", "--resume", run_dir, "--no-cache", env=env)
        assert res.returncode == 0, res.stderr
        ids = [s["question_id"] for s in RunStore(run_dir).read_samples()]
        assert sorted(ids) == sorted(f"q{i}" for i in range(40))
        assert json.loads((run_dir / "manifest.json").read_text())["status"] == "finished"


def test_when_even_the_manifest_cannot_be_written_the_one_line_error_says_so(tmp_path,
                                                                              monkeypatch):
    from helpers import last_user, write_jsonl

    from evalpipe.config import parse_config

    write_jsonl(tmp_path / "q.jsonl", [{"id": f"q{i}", "suite": "s", "answer": 1,
                                        "question": f"What is {i} plus 1?"} for i in range(4)])
    config = parse_config({"name": "x", "questions": [str(tmp_path / "q.jsonl")],
                           "models": [{"id": "scripted"}], "toolsets": ["none"]},
                          source=str(tmp_path / "x.yaml"))

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    real_write_json = RunStore.write_json

    def full_after_start(self, name, data):
        if data.get("status") == "running":
            return real_write_json(self, name, data)
        raise StorageError(f"cannot write {self.path / name}: No space left on device; what "
                           "was written before is kept")

    monkeypatch.setattr(os, "posix_fallocate", no_space)  # not even the reserve fits
    monkeypatch.setattr(RunStore, "write_json", full_after_start)
    monkeypatch.setattr(RunStore, "append_samples", lambda self, samples: (_ for _ in ()).throw(
        StorageError(f"cannot write {self.samples_path}: No space left on device")))
    with pytest.raises(StorageError) as err:
        runner.execute_run(config, tmp_path / "o", use_cache=False, echo=lambda line: None,
                           backends=lambda m: ScriptedBackend(
                               lambda p: f"The answer is {last_user(p)}."))
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("cannot write ") and "samples.jsonl: No space left" in message
    assert message.endswith(" No space left on device): it still says running")
    assert "; the manifest could not be marked failed either (cannot write " in message
