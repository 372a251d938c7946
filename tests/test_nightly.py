"""What an unattended nightly job relies on: a failed run never looks like a good
one, outputs/latest moves only to finished runs, a full disk stops a run cleanly,
infra errors are retried in place, and every outcome has its own exit code."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import pytest
from helpers import ScriptedBackend, last_user, write_jsonl

import evalpipe.store as store_module
from evalpipe import runner
from evalpipe.config import parse_config
from evalpipe.errors import InputError, ModelUnavailableError, StorageError
from evalpipe.records import Generation
from evalpipe.store import RunStore


def right(prompt: str) -> str:
    return f"The answer is {int(last_user(prompt).split()[2]) + 1}."


def config(tmp_path: Path, n: int = 6, formats=("hermes",)):
    qs = [{"id": f"q{i}", "suite": "arithmetic", "question": f"What is {i} plus 1?",
           "answer": i + 1} for i in range(n)]
    write_jsonl(tmp_path / "q.jsonl", qs)
    return parse_config({"name": "nightly", "questions": [str(tmp_path / "q.jsonl")],
                         "models": [{"id": "scripted"}], "formats": list(formats),
                         "toolsets": ["calculator"], "retrieval": ["none"], "max_turns": 2,
                         "generation": {"batch_size": 4}},
                        source=str(tmp_path / "nightly.yaml"))


class Scripted:
    """execute_run with one scripted backend for every model: `backend` may be replaced
    between runs, and `load` (which fails to load a model, say)."""

    def __init__(self):
        self.backend = ScriptedBackend(right)
        self.load = lambda model: self.backend

    def run(self, *args, **kwargs) -> Path:
        return runner.execute_run(*args, backends=self.load, **kwargs)


@pytest.fixture
def backend() -> Scripted:
    return Scripted()


def manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())


def runs(out: Path) -> list[Path]:
    return sorted(p for p in out.iterdir() if p.is_dir() and not p.is_symlink()
                  and not p.name.startswith("."))


def test_a_finished_run_says_so_and_becomes_latest(tmp_path, backend):
    run_dir = backend.run(config(tmp_path), tmp_path / "o", use_cache=False)
    assert manifest(run_dir)["status"] == "finished"
    assert (tmp_path / "o" / "latest").resolve() == run_dir.resolve()


def test_bad_input_leaves_no_run_directory(tmp_path, backend):
    cfg = config(tmp_path)
    (tmp_path / "q.jsonl").write_text('{"id": "a", "suite": "x", "question": "?"}\n')
    with pytest.raises(InputError):
        backend.run(cfg, tmp_path / "o", use_cache=False)
    assert not (tmp_path / "o").exists() or runs(tmp_path / "o") == []


def test_a_model_that_cannot_load_fails_the_run_and_latest_stays(tmp_path, backend, monkeypatch):
    good = backend.run(config(tmp_path), tmp_path / "o", use_cache=False)

    def unavailable(model):
        raise ModelUnavailableError("model 'nope/nope' is not reachable")

    backend.load = unavailable
    monkeypatch.setattr(runner, "new_run_id", lambda name, h: "second-run")
    with pytest.raises(ModelUnavailableError):
        backend.run(config(tmp_path), tmp_path / "o", use_cache=False)
    failed = tmp_path / "o" / "second-run"
    assert manifest(failed)["status"] == "failed"
    assert "nope/nope" in manifest(failed)["error"]
    assert not (failed / "samples.jsonl").exists()
    assert (tmp_path / "o" / "latest").resolve() == good.resolve()


def test_a_full_disk_stops_cleanly_keeps_what_was_written_and_resumes(tmp_path, backend,
                                                                      monkeypatch):
    cfg = config(tmp_path, n=40, formats=("hermes", "json"))  # a write per cell at least
    real_fsync = os.fsync
    calls = {"n": 0}

    def full_disk(fd):  # the second cell's write: the data went out, the disk is full
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(store_module.os, "fsync", full_disk)
    monkeypatch.setattr(runner, "new_run_id", lambda name, h: "full-disk")
    with pytest.raises(StorageError) as err:
        backend.run(cfg, tmp_path / "o", use_cache=False)
    message = str(err.value)
    assert "\n" not in message and "No space left on device" in message
    run_dir = tmp_path / "o" / "full-disk"
    kept = RunStore(run_dir).read_samples()
    assert len(kept) == 40  # the first cell, whole, and no torn half of the second
    assert (run_dir / "samples.jsonl").read_text().endswith("\n")
    assert manifest(run_dir)["status"] == "failed"
    assert not (tmp_path / "o" / "latest").exists()

    monkeypatch.setattr(store_module.os, "fsync", real_fsync)  # space is back
    backend.run(cfg, tmp_path / "o", resume=run_dir, use_cache=False)
    samples = RunStore(run_dir).read_samples()
    assert sorted((s["cell_id"], s["question_id"]) for s in samples) == sorted(
        (c.id, f"q{i}") for c in cfg.cells() for i in range(40))
    assert manifest(run_dir)["status"] == "finished"


def test_an_unwritable_output_folder_is_one_clear_line(tmp_path, backend):
    blocker = tmp_path / "o"
    blocker.write_text("a file where the output folder should be")
    with pytest.raises(StorageError) as err:
        backend.run(config(tmp_path), blocker, use_cache=False)
    assert "\n" not in str(err.value) and str(blocker) in str(err.value)


def test_retry_infra_replaces_only_infra_errors_in_place(tmp_path, backend):
    down = {"q1", "q4"}

    def flaky(prompt):
        if last_user(prompt).split()[2] in ("1", "4"):
            return Generation("", finish_reason="error", error="cannot connect: backend down")
        return right(prompt)

    def wrong_for_q2(prompt):
        return "I do not know." if " 2 " in last_user(prompt) else right(prompt)

    backend.backend = ScriptedBackend(lambda p: flaky(p) if " 2 " not in last_user(p)
                                         else wrong_for_q2(p))
    run_dir = backend.run(config(tmp_path), tmp_path / "o", use_cache=False)
    first = RunStore(run_dir).read_samples()
    assert {s["question_id"] for s in first if s["stop_reason"] == "infra_error"} == down

    backend.backend = ScriptedBackend(right)  # the server is back; q2 would now be right
    backend.run(config(tmp_path), tmp_path / "o", resume=run_dir, use_cache=False,
                       retry_infra=True)
    after = RunStore(run_dir).read_samples()
    assert [s["question_id"] for s in after] == [s["question_id"] for s in first]
    for a, b in zip(first, after):
        if a["question_id"] in down:
            assert b["stop_reason"] == "answered" and b["run_id"] == a["run_id"]
        else:
            assert a == b  # a model failure (q2) is not retried
    retry = manifest(run_dir)["retries"][-1]
    assert retry["retried"] == 2 and retry["still_infra"] == 0
    assert retry["first_causes"] == {"cannot connect: backend down": 2}
    assert not (run_dir / "samples.retry.jsonl").exists()
    scores = json.loads((run_dir / "scores.json").read_text())
    assert scores["groups"][0]["n_infra"] == 0


def test_retry_infra_needs_resume(tmp_path, backend):
    with pytest.raises(InputError, match="--resume"):
        backend.run(config(tmp_path), tmp_path / "o", use_cache=False, retry_infra=True)


def test_a_stopped_retry_keeps_what_it_re_ran(tmp_path):
    store = RunStore(tmp_path)
    store.append_samples([{"cell_id": "c", "question_id": q, "stop_reason": "answered"}
                          for q in ("a", "b", "c")])
    store.append_retries([{"cell_id": "c", "question_id": "b", "stop_reason": "again"}])
    with open(store.retry_path, "a") as f:
        f.write('{"cell_id": "c", "question_id": "c", "sto')  # killed mid-write
    assert store.fold_retries() == 1
    assert [s["stop_reason"] for s in store.read_samples()] == ["answered", "again", "answered"]
    assert not store.retry_path.exists()


def test_report_and_compare_refuse_an_unfinished_run_unless_asked(tmp_path, backend):
    from click.testing import CliRunner

    from evalpipe.cli import main

    good = backend.run(config(tmp_path), tmp_path / "o", use_cache=False)
    partial = tmp_path / "partial"
    shutil.copytree(good, partial)
    data = manifest(partial)
    data.update(status="interrupted", error="SIGTERM: stopped")
    (partial / "manifest.json").write_text(json.dumps(data))
    cli = CliRunner()
    res = cli.invoke(main, ["report", str(partial)])
    assert res.exit_code == 2
    assert "run is interrupted, not finished" in res.output and "--allow-partial" in res.output
    assert cli.invoke(main, ["report", str(partial), "--allow-partial"]).exit_code == 0
    assert cli.invoke(main, ["compare", str(good), str(partial)]).exit_code == 2
    assert cli.invoke(main, ["compare", str(good), str(partial), "--allow-partial"]).exit_code == 0
    assert cli.invoke(main, ["report", str(good)]).exit_code == 0


@pytest.mark.parametrize("env", [{"HF_HUB_OFFLINE": "1"},
                                 {"HF_ENDPOINT": "http://127.0.0.1:9"}])  # nothing listens
def test_an_unknown_model_offline_fails_in_one_line_without_retrying(monkeypatch, tmp_path, env):
    import transformers

    from evalpipe.backends import models

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty Hub cache
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(models, "_probe", [])

    def never(*args, **kwargs):
        raise AssertionError("transformers was asked to fetch from the Hub")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", never)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", never)
    with pytest.raises(ModelUnavailableError) as err:
        models.resolve_model("some-org/not-cached-model")
    message = str(err.value)
    assert "\n" not in message and "some-org/not-cached-model" in message
    assert "HF_HUB_OFFLINE is set" in message or "not reachable" in message


def test_cli_an_unknown_model_offline_exits_2_in_one_line_and_marks_the_run_failed(tmp_path):
    """A model id nothing can resolve is bad input (exit 2, as a misspelt key), so a
    script can tell a typo from a crash (exit 1)."""
    import subprocess
    import sys

    import yaml

    config(tmp_path)  # writes q.jsonl
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"name": "offline", "questions": [str(tmp_path / "q.jsonl")],
                                   "models": [{"id": "some-org/not-cached-model"}],
                                   "formats": ["hermes"], "toolsets": ["none"],
                                   "retrieval": ["none"]}))
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"),
               EVALPIPE_GENERATION_CACHE=str(tmp_path / "gen.sqlite"))
    res = subprocess.run([sys.executable, "-m", "evalpipe", "run", "--config", str(cfg),
                          "--out", str(tmp_path / "o")], capture_output=True, text=True, env=env,
                         check=False)
    assert res.returncode == 2, res.stderr
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "HF_HUB_OFFLINE is set" in errors[0]
    assert "Retrying" not in res.stderr
    (run_dir,) = runs(tmp_path / "o")
    assert manifest(run_dir)["status"] == "failed"
    assert not (tmp_path / "o" / "latest").exists()
