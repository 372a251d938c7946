"""Signals and time limits, asserted on what happened, never on the clock: a second
SIGTERM exits while the server still holds the request open, a reply that trickles
one byte at a time still meets timeout_s, SIGHUP is a SIGTERM, a tool that times out
does not keep the process alive, and the embedded model stops between decode steps.
Each subprocess wait has a generous limit, only so that a regression hangs no CI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, Hang, Json, Trickle, chat, question_of, write_config

HANG_GUARD_S = 240  # never reached when things work; the hang a regression would be


def start(config: Path, out: Path, tmp_path: Path, **env: str) -> subprocess.Popen:
    environ = dict(os.environ, EVALPIPE_CACHE=str(tmp_path / "cache"), **env)
    return subprocess.Popen([sys.executable, "-m", "evalpipe", "run", "--config", str(config),
                             "--out", str(out), "--no-cache"], env=environ, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


class Lines:
    """The process's stderr, line by line, with an event for a line that holds `text`."""

    def __init__(self, proc: subprocess.Popen, text: str):
        self.lines: list[str] = []
        self.seen = threading.Event()
        self.thread = threading.Thread(target=self._read, args=(proc, text), daemon=True)
        self.thread.start()

    def _read(self, proc, text):
        for line in proc.stderr:
            self.lines.append(line)
            if text in line:
                self.seen.set()


def questions_only(reply):
    """`reply` to the run's questions; the served-model probe before them is answered,
    so what the server holds is a request of the agent loop."""
    return lambda path, body: reply if "plus" in question_of(body) else Json(chat("1 2 3"))


def manifest(out: Path) -> dict:
    (run_dir,) = [p for p in out.iterdir() if p.name != "latest"]
    return json.loads((run_dir / "manifest.json").read_text())


def test_a_second_sigterm_exits_while_the_server_still_holds_the_request(tmp_path):
    with FakeOpenAI(respond=questions_only(Hang())) as server:
        config = write_config(tmp_path, server.url, n=4, timeout_s=600, concurrency=4)
        proc = start(config, tmp_path / "o", tmp_path)
        stderr = Lines(proc, "no new conversations")
        try:
            assert server.held.wait(HANG_GUARD_S), "no request reached the server"
            proc.send_signal(signal.SIGTERM)
            assert stderr.seen.wait(HANG_GUARD_S), "the first SIGTERM was not handled"
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=HANG_GUARD_S)
        finally:
            proc.kill()
        assert proc.returncode == 143, "".join(stderr.lines)
        assert server.open_requests >= 1 and not server.closing.is_set()  # still held open
    stderr.thread.join(HANG_GUARD_S)
    assert "SIGTERM again: stopped at once" in "".join(stderr.lines)
    data = manifest(tmp_path / "o")
    assert data["status"] == "interrupted" and "again" in data["error"]


def test_a_reply_that_trickles_one_byte_at_a_time_meets_timeout_s(tmp_path):
    with FakeOpenAI(respond=questions_only(Trickle())) as server:
        config = write_config(tmp_path, server.url, n=2, timeout_s=2, stream="on")
        proc = start(config, tmp_path / "o", tmp_path)
        try:
            _, err = proc.communicate(timeout=HANG_GUARD_S)
        finally:
            proc.kill()
        assert proc.returncode == 0, err
        assert server.held.is_set()  # the body did trickle
    run_dir = (tmp_path / "o" / "latest").resolve()
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert [s["stop_reason"] for s in samples] == ["infra_error"] * 2
    assert all("reply not finished within timeout_s=2" in s["error"] for s in samples)


def test_sighup_is_handled_like_sigterm(tmp_path):
    with FakeOpenAI(respond=questions_only(Hang())) as server:
        config = write_config(tmp_path, server.url, n=2, timeout_s=3)
        proc = start(config, tmp_path / "o", tmp_path)
        try:
            assert server.held.wait(HANG_GUARD_S)
            proc.send_signal(signal.SIGHUP)
            _, err = proc.communicate(timeout=HANG_GUARD_S)
        finally:
            proc.kill()
    assert proc.returncode == 129, err
    assert "SIGHUP: no new conversations" in err
    data = manifest(tmp_path / "o")
    assert data["status"] == "interrupted" and data["error"].startswith("SIGHUP: stopped")


STUCK_TOOL = '''
import threading


def stuck(a: int) -> int:
    """Never returns."""
    threading.Event().wait()
    return a
'''


def test_a_tool_that_times_out_does_not_keep_the_process_alive(tmp_path):
    (tmp_path / "stucktool.py").write_text(STUCK_TOOL)

    def respond(path, body):
        if any(m.get("role") == "tool" for m in body["messages"]):
            return Json(chat("The answer is 1."))
        return Json(chat("", [{"id": "c1", "type": "function",
                               "function": {"name": "stuck", "arguments": '{"a": 1}'}}]))

    with FakeOpenAI(respond=respond) as server:
        config = write_config(tmp_path, server.url, n=1)
        data = json.loads(json.dumps(__import__("yaml").safe_load(config.read_text())))
        data.update(custom_tools=["stucktool:stuck"], tool_limits={"timeout_s": 1})
        config.write_text(json.dumps(data))
        proc = start(config, tmp_path / "o", tmp_path,
                     PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
        try:
            _, err = proc.communicate(timeout=HANG_GUARD_S)  # exits with the tool still stuck
        finally:
            proc.kill()
    assert proc.returncode == 0, err
    run_dir = (tmp_path / "o" / "latest").resolve()
    (sample,) = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    (event,) = sample["turns"][0]["tool_events"]
    assert event["name"] == "stuck" and event["error"] == "timeout"


def test_sigterm_stops_the_embedded_model_between_decode_steps(tmp_path, tiny_model_dir,
                                                             monkeypatch, one_torch_thread):
    """The first SIGTERM during a cell whose conversations are all in flight: the decode
    loop takes no step after the one the signal came in (it used to finish the cell)."""
    import yaml
    from helpers import tiny_arithmetic_config

    from evalpipe import api
    from evalpipe.backends.local import batching
    from evalpipe.errors import Interrupted

    config = tiny_arithmetic_config(tmp_path, tiny_model_dir,
                                    generation={"max_new_tokens": 64, "batch_size": 4})
    data = yaml.safe_load(config.read_text())
    data["toolsets"] = ["none"]
    config.write_text(yaml.safe_dump(data))
    steps = {"n": 0, "after": 0, "signalled": False}
    real_step = batching.DecodeSession.step

    def step(self):
        steps["n"] += 1
        if steps["signalled"]:
            steps["after"] += 1
        elif steps["n"] == 3:  # decoding is under way: the signal comes in
            steps["signalled"] = True
            os.kill(os.getpid(), signal.SIGTERM)
        return real_step(self)

    monkeypatch.setattr(batching.DecodeSession, "step", step)
    monkeypatch.setenv("EVALPIPE_GENERATION_CACHE", str(tmp_path / "gen.sqlite"))
    with pytest.raises(Interrupted) as err:
        api.run(str(config), out=tmp_path / "o", use_cache=False)
    assert err.value.exit_code == 143
    assert steps["signalled"] and steps["after"] == 0
    data = manifest(tmp_path / "o")
    assert data["status"] == "interrupted"
    run_dir = next(p for p in (tmp_path / "o").iterdir() if p.name != "latest")
    written = (run_dir / "samples.jsonl").read_text().splitlines() \
        if (run_dir / "samples.jsonl").exists() else []
    assert len(written) < 6  # the unfinished conversations run again on resume
