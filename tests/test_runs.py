"""Whole runs on a tiny model built in the test: crash-resume with a real SIGKILL,
the generation cache, a second writer, re-scoring."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import write_jsonl

TIMING = {"prefill_ms", "decode_ms", "wall_ms", "ms", "cached", "cost",
          "prompt_text"}  # which sample carries a prompt block depends on where a run resumed


def strip_timings(value):
    """A sample without its timings: what must be identical between runs."""
    if isinstance(value, dict):
        return {k: strip_timings(v) for k, v in value.items()
                if k not in TIMING | {"run_id"} and not k.endswith("_ms")}
    if isinstance(value, list):
        return [strip_timings(v) for v in value]
    return value


def make_config(tmp_path: Path, model_dir: Path, n: int = 100, **extra) -> Path:
    questions = [{"id": f"q{i:03d}", "suite": "arithmetic", "lang": "en",
                  "question": f"What is {i} times {i + 7}?", "answer": i * (i + 7),
                  "gold_calls": [{"id": "s1", "name": "multiply",
                                  "arguments": {"a": i, "b": i + 7}}]} for i in range(n)]
    write_jsonl(tmp_path / "q.jsonl", questions)
    config = {"name": "tiny", "questions": [str(tmp_path / "q.jsonl")],
              "models": [{"id": str(model_dir)}], "formats": ["hermes"],
              "toolsets": ["calculator"], "retrieval": ["none"], "max_turns": 2,
              "generation": {"max_new_tokens": 6, "batch_size": 4}, **extra}
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def evalpipe(*args, env=None, **kw):
    return subprocess.run([sys.executable, "-m", "evalpipe", *args], capture_output=True,
                          text=True, env=env, **kw)


@pytest.fixture
def isolated_env(tmp_path):
    """A private generation cache, so runs here never see each other's replies."""
    env = dict(os.environ, EVALPIPE_GENERATION_CACHE=str(tmp_path / "gen.sqlite"))
    return env


# `evalpipe run ...` that sends itself a signal once its first samples are written: the
# signal lands mid-run on any machine, however fast or loaded.
_SIGNAL_AFTER_FIRST_WRITE = """
import os, sys
from evalpipe.cli import main
from evalpipe.store import RunStore

append = RunStore.append_samples

def append_then_signal(self, samples):
    append(self, samples)
    RunStore.append_samples = append
    os.kill(os.getpid(), int(sys.argv[1]))

RunStore.append_samples = append_then_signal
main(sys.argv[2:], prog_name="evalpipe")
"""


def run_signalled(signum: int, *args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _SIGNAL_AFTER_FIRST_WRITE, str(int(signum)),
                           "run", *args], capture_output=True, text=True, env=env, check=False)


def samples_of(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]


def test_killed_run_resumes_without_loss_or_duplicates(tmp_path, tiny_model_dir, isolated_env):
    config = make_config(tmp_path, tiny_model_dir)
    full = evalpipe("run", "--config", str(config), "--out", str(tmp_path / "a"), "--no-cache",
                    env=isolated_env)
    assert full.returncode == 0, full.stderr
    (run_a,) = [p for p in (tmp_path / "a").iterdir() if p.name != "latest"]

    out_b = tmp_path / "b"
    killed = run_signalled(signal.SIGKILL, "--config", str(config), "--out", str(out_b),
                           "--no-cache", env=isolated_env)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    (samples,) = [p for p in out_b.glob("*/samples.jsonl") if p.parent.name != "latest"]
    with open(samples, "a") as f:  # as if the kill had cut a write short
        f.write('{"question_id": "torn')
    written = len(samples_of_tolerant(samples))
    assert 0 < written < 100

    resumed = evalpipe("run", "--resume", str(samples.parent), "--no-cache", env=isolated_env)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming: {written} samples already written" in resumed.stdout
    a, b = samples_of(run_a), samples_of(samples.parent)
    ids = [s["question_id"] for s in b]
    assert len(ids) == len(set(ids)) == 100
    by_id = {s["question_id"]: strip_timings(s) for s in b}
    assert [by_id[s["question_id"]] for s in a] == [strip_timings(s) for s in a]
    score_a = json.loads((run_a / "scores.json").read_text())["groups"]
    score_b = json.loads((samples.parent / "scores.json").read_text())["groups"]
    assert strip_timings(score_a) == strip_timings(score_b)


# `evalpipe run ...` in a process whose C kernel builds all run out of time, as they may
# on a loaded machine: the build's compiler call raises what subprocess.run raises when
# its timeout passes (native.compile_kernel), so the engine falls back to torch's products.
_KERNEL_BUILDS_TIME_OUT = """
import subprocess, sys
from evalpipe.backends.local import native
from evalpipe.cli import main

real_run = subprocess.run

def run(args, *rest, **kw):
    if "-shared" in args:
        raise subprocess.TimeoutExpired(args, kw.get("timeout"))
    return real_run(args, *rest, **kw)

native.subprocess = type(sys)("subprocess_timing_out")
native.subprocess.__dict__.update(vars(subprocess), run=run)
main(sys.argv[1:], prog_name="evalpipe")
"""


def test_a_run_resumed_where_the_kernels_cannot_be_built_is_the_same_run(
        tmp_path, tiny_model_dir, isolated_env):
    """A run killed on a machine that built its kernels and resumed in a process whose
    kernel builds time out (a loaded machine, a cold kernel cache) resumes: how this
    machine multiplies is not what the cell is, and every sample keeps one fingerprint."""
    if native_compiler() is None:
        pytest.skip("no C compiler on this machine: no kernel is built in either process")
    config = make_config(tmp_path, tiny_model_dir, n=24)
    killed = run_signalled(signal.SIGKILL, "--config", str(config), "--out",
                           str(tmp_path / "o"), "--no-cache", env=isolated_env)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    if "the panel_linear kernel did not build" in killed.stderr:  # cold cache, slow build
        pytest.skip("the killed run's linear kernel did not build either: both processes "
                    "multiply alike, so this run cannot tell a fingerprint that flips")
    (run,) = [p for p in (tmp_path / "o").iterdir() if p.name != "latest"]
    written = len(samples_of_tolerant(run / "samples.jsonl"))
    assert 0 < written < 24

    cold = dict(isolated_env, EVALPIPE_CACHE=str(tmp_path / "cold-cache"))  # nothing built
    resumed = subprocess.run([sys.executable, "-c", _KERNEL_BUILDS_TIME_OUT, "run", "--resume",
                              str(run), "--no-cache"], capture_output=True, text=True,
                             env=cold, check=False)
    assert "did not build" in resumed.stderr and "TimeoutExpired" in resumed.stderr
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming: {written} samples already written" in resumed.stdout
    samples = samples_of(run)
    assert sorted(s["question_id"] for s in samples) == [f"q{i:03d}" for i in range(24)]
    manifest = json.loads((run / "manifest.json").read_text())
    (cell,) = manifest["cells"].values()
    assert {s["cell_fingerprint"] for s in samples} == {cell["fingerprint"]}


def native_compiler():
    from evalpipe.backends.local import native

    return native.compiler()


def samples_of_tolerant(path: Path) -> list[dict]:
    from evalpipe.store import RunStore

    return RunStore(path.parent).read_samples()


def test_rerun_is_served_from_the_cache_and_identical(tmp_path, tiny_model_dir, isolated_env):
    config = make_config(tmp_path, tiny_model_dir, n=12)
    first = evalpipe("run", "--config", str(config), "--out", str(tmp_path / "o"),
                     env=isolated_env)
    assert first.returncode == 0, first.stderr
    assert "0 replies reused" in first.stdout
    second = evalpipe("run", "--config", str(config), "--out", str(tmp_path / "o"),
                      env=isolated_env)
    assert second.returncode == 0, second.stderr
    generated = int(second.stdout.split("replies reused, ")[1].split()[0])
    assert generated == 0 and "generation cache:" in second.stdout
    runs = sorted(p for p in (tmp_path / "o").iterdir() if p.name != "latest")
    assert len(runs) == 2
    a, b = (samples_of(r) for r in runs)
    assert [strip_timings(s) for s in a] == [strip_timings(s) for s in b]
    assert all(t["cached"] for s in b for t in s["turns"])
    assert (tmp_path / "o" / "latest").resolve() == runs[1].resolve()


def test_score_command_recomputes_from_the_run_alone(tmp_path, tiny_model_dir, isolated_env):
    config = make_config(tmp_path, tiny_model_dir, n=5)
    assert evalpipe("run", "--config", str(config), "--out", str(tmp_path / "o"),
                    env=isolated_env).returncode == 0
    run = (tmp_path / "o" / "latest").resolve()
    before = json.loads((run / "scores.json").read_text())
    (run / "scores.json").unlink()
    (tmp_path / "q.jsonl").unlink()  # the run's own question snapshot is enough
    rescored = evalpipe("score", str(run), env=isolated_env)
    assert rescored.returncode == 0, rescored.stderr
    assert json.loads((run / "scores.json").read_text())["groups"] == before["groups"]
    assert "exact match" in rescored.stdout


def test_bad_input_exits_2_and_names_the_place(tmp_path, isolated_env):
    (tmp_path / "q.jsonl").write_text('{"id": "a", "suite": "x", "question": "?"}\n')
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"questions": [str(tmp_path / "q.jsonl")]}))
    result = evalpipe("run", "--config", str(cfg), "--out", str(tmp_path / "o"), env=isolated_env)
    assert result.returncode == 2
    assert "q.jsonl:1: field 'answer': missing required field" in result.stderr
    missing = evalpipe("run", "--config", str(tmp_path / "nope.yaml"), env=isolated_env)
    assert missing.returncode == 2 and "config file not found" in missing.stderr


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_stops_the_run_cleanly_and_resume_finishes_it(tmp_path, tiny_model_dir,
                                                              isolated_env, signum, code):
    config = make_config(tmp_path, tiny_model_dir)
    out = tmp_path / "o"
    proc = run_signalled(signum, "--config", str(config), "--out", str(out), "--no-cache",
                         env=isolated_env)
    stderr = proc.stderr
    assert proc.returncode == code, stderr
    (samples,) = out.glob("*/samples.jsonl")
    run_dir = samples.parent
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    assert "--resume" in stderr
    raw = samples.read_text()
    assert raw.endswith("\n")  # flushed whole: no torn line
    written = len(raw.splitlines())
    assert 0 < written < 100
    assert not (out / "latest").exists()  # an unfinished run is never "the latest"

    resumed = evalpipe("run", "--resume", str(run_dir), "--no-cache", env=isolated_env)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming: {written} samples already written" in resumed.stdout
    ids = [s["question_id"] for s in samples_of(run_dir)]
    assert len(ids) == len(set(ids)) == 100
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "finished"
    assert (out / "latest").resolve() == run_dir.resolve()
