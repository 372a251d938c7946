"""Custom tools run in worker processes. Each hostile tool below runs through the real
command line (`python -m evalpipe run`, a fake OpenAI server as the model, relative
paths from the run's folder): the call it misbehaves in ends as a tool event with an
error, the next call of the same tool works, and the run finishes with exit 0, status
finished and every sample once. Each subprocess wait has a generous limit, only so that
a regression hangs no CI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fake_openai import FakeOpenAI, Json, chat, question_of
from helpers import REPO, write_jsonl

HANG_GUARD_S = 120  # never reached when things work
TIMEOUT_S = 4  # the tool limit of these runs: what a hanging call costs

# Each tool misbehaves the first time it is called in a run, and answers "ok <a>" after
# (a file marks the first call: the worker it misbehaved in may be gone).
HOSTILE_TOOLS = '''
import json
import os
import signal
import sys
import threading
from pathlib import Path

MARKS = Path(__file__).parent / "marks"


def first(name):
    MARKS.mkdir(exist_ok=True)
    try:
        (MARKS / name).touch(exist_ok=False)
    except FileExistsError:
        return False
    return True


def exits(a: int) -> str:
    """Ends its process with status 0."""
    if first("exits"):
        os._exit(0)
    return f"ok {a}"


def raises_system_exit(a: int) -> str:
    """sys.exit(3)."""
    if first("raises_system_exit"):
        sys.exit(3)
    return f"ok {a}"


def kills_itself(a: int) -> str:
    """SIGKILL to its own process."""
    if first("kills_itself"):
        os.kill(os.getpid(), signal.SIGKILL)
    return f"ok {a}"


def kills_its_group(a: int) -> str:
    """SIGTERM to its whole process group."""
    if first("kills_its_group"):
        os.killpg(0, signal.SIGTERM)
    return f"ok {a}"


def stops_itself(a: int) -> str:
    """SIGSTOP to its own process: it never answers."""
    if first("stops_itself"):
        os.kill(os.getpid(), signal.SIGSTOP)
    return f"ok {a}"


def hangs(a: int) -> str:
    """Blocks forever."""
    if first("hangs"):
        threading.Event().wait()
    return f"ok {a}"


def floods(a: int) -> str:
    """20 MB to stdout and stderr, then blocks forever."""
    if first("floods"):
        for _ in range(320):
            sys.stdout.write("x" * 65536)
            sys.stderr.write("y" * 65536)
        sys.stdout.flush()
        threading.Event().wait()
    return f"ok {a}"


class _Blocking(dict):
    def items(self):  # json.dumps reads a dict subclass through items()
        threading.Event().wait()
        return super().items()


def blocks_serialising(a: int) -> dict:
    """A result whose serialisation never ends."""
    if first("blocks_serialising"):
        return _Blocking(a=a)
    return f"ok {a}"


def lone_surrogate(a: int) -> str:
    """A result that is not valid Unicode."""
    if first("lone_surrogate"):
        return {"text": "half a pair: \\ud800"}
    return f"ok {a}"


def surrogate_error(a: int) -> str:
    """An exception whose message is not valid Unicode."""
    if first("surrogate_error"):
        raise ValueError("half a pair: \\udcff")
    return f"ok {a}"


def forks(a: int) -> str:
    """Forks; both copies return."""
    os.fork()
    return f"ok {a}"


def changes_folder(a: int) -> str:
    """Moves to another folder and stays there."""
    before = os.getcwd()
    os.chdir(Path(__file__).parent / "elsewhere")
    return f"ok {a} in {before}"


def changes_environment(a: int) -> str:
    """Sets a variable and keeps it set."""
    before = os.environ.get("HOSTILE_SEEN", "unset")
    os.environ["HOSTILE_SEEN"] = "set"
    os.environ.pop("PATH", None)
    return f"ok {a} {before}"
'''

# tool -> (error kind, words of the message) of the call it misbehaves in
FAILING = {
    "exits": ("tool_exception", "the tool's process ended during the call (exit code 0)"),
    "raises_system_exit": ("tool_exception", "SystemExit: 3"),
    "kills_itself": ("tool_exception", "ended during the call (killed by SIGKILL)"),
    "kills_its_group": ("tool_exception", "ended during the call (killed by SIGTERM)"),
    "stops_itself": ("timeout", f"no result within {TIMEOUT_S}"),
    "hangs": ("timeout", f"no result within {TIMEOUT_S}"),
    "floods": ("timeout", f"no result within {TIMEOUT_S}"),
    "blocks_serialising": ("timeout", f"no result within {TIMEOUT_S}"),
    "lone_surrogate": ("bad_result", "not valid Unicode (a lone surrogate U+D800"),
    "surrogate_error": ("tool_exception", "ValueError: half a pair: \\udcff"),
}


def run_command(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    # Its own session: a tool that signals its process group in the run's process (as
    # before workers) must not reach the test.
    env = dict(os.environ, EVALPIPE_CACHE=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-m", "evalpipe", *args], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=HANG_GUARD_S)
    finally:
        proc.kill()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def calling(tool: str):
    """The model: each question calls `tool`, then answers from its result."""

    def respond(path, body):
        if any(m.get("role") == "tool" for m in body["messages"]):
            return Json(chat("Done."))
        if not question_of(body).startswith("Call "):  # the served-model probe
            return Json(chat("1 2 3"))
        a = int(question_of(body).split()[-1])
        return Json(chat("", [{"id": "c1", "type": "function", "function": {
            "name": tool, "arguments": json.dumps({"a": a})}}]))

    return respond


def write_run(tmp_path: Path, tool: str | None, url: str, n: int = 2, **model) -> Path:
    (tmp_path / "hostile_tools.py").write_text(HOSTILE_TOOLS)
    (tmp_path / "elsewhere").mkdir(exist_ok=True)
    write_jsonl(tmp_path / "configs" / "q.jsonl",
                [{"id": f"q{i}", "suite": "tools", "question": f"Call {tool} {i}",
                  "answer": "ok"} for i in range(n)])
    config = {"name": "hostile", "questions": ["q.jsonl"],  # relative to the config
              "models": [{"id": "fake", "backend": "openai", "base_url": url, "stream": "off",
                          "max_retries": 0, "timeout_s": 60, **model}],
              "formats": ["openai"], "toolsets": ["calculator"], "retrieval": ["none"],
              "max_turns": 2, "custom_tools": [f"hostile_tools:{tool}"] if tool else [],
              "tool_limits": {"timeout_s": TIMEOUT_S}}
    path = tmp_path / "configs" / "hostile.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def finished_run(tmp_path: Path, res: subprocess.CompletedProcess, n: int = 2) -> list[dict]:
    """The samples of a run that finished: exit 0, status finished, each question once,
    the command's output its own."""
    assert res.returncode == 0, res.stderr[-3000:]
    assert len(res.stdout) + len(res.stderr) < 100_000  # nothing a tool printed
    (run_dir,) = [p for p in (tmp_path / "out").iterdir() if p.name != "latest"]
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "finished"
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert sorted(s["question_id"] for s in samples) == [f"q{i}" for i in range(n)]
    assert all(s["stop_reason"] == "answered" for s in samples)
    return samples


def events_of(samples: list[dict]) -> list[dict]:
    return [e for s in sorted(samples, key=lambda s: s["question_id"])
            for t in s["turns"] for e in t.get("tool_events", [])]


@pytest.mark.parametrize("tool", list(FAILING))
def test_a_misbehaving_tool_costs_its_call_and_nothing_more(tmp_path, tool):
    with FakeOpenAI(respond=calling(tool)) as server:
        config = write_run(tmp_path, tool, server.url)
        res = run_command(tmp_path, "run", "--config", "configs/hostile.yaml", "--out", "out",
                          "--no-cache")
    events = events_of(finished_run(tmp_path, res))
    kind, words = FAILING[tool]
    failed = [e for e in events if e["error"]]
    assert len(failed) == 1, events
    assert failed[0]["error"] == kind and words in failed[0]["error_message"], failed[0]
    (worked,) = [e for e in events if not e["error"]]  # the next call: a fresh worker
    assert worked["result"] == f"ok {worked['arguments']['a']}"
    assert config.exists()


@pytest.mark.parametrize("tool", ["forks", "changes_folder", "changes_environment"])
def test_a_tool_that_forks_or_changes_folder_or_environment_changes_nothing_after_it(
        tmp_path, tool):
    """Forking: the copy never answers and the run sees each call once. A folder or an
    environment a call changed is put back before the next call, and the run's relative
    paths do not move."""
    n = 3
    with FakeOpenAI(respond=calling(tool)) as server:
        write_run(tmp_path, tool, server.url, n=n)
        res = run_command(tmp_path, "run", "--config", "configs/hostile.yaml", "--out", "out",
                          "--no-cache")
    events = events_of(finished_run(tmp_path, res, n=n))
    results = {"forks": [f"ok {i}" for i in range(n)],
               "changes_folder": [f"ok {i} in {tmp_path}" for i in range(n)],
               "changes_environment": [f"ok {i} unset" for i in range(n)]}[tool]
    assert [(e["error"], e["result"]) for e in events] == [(None, r) for r in results]


# `evalpipe run ...` that SIGKILLs itself once its first samples are written.
_KILL_AFTER_FIRST_WRITE = """
import os, signal, sys
from evalpipe.cli import main
from evalpipe.store import RunStore

append = RunStore.append_samples

def append_then_kill(self, samples):
    append(self, samples)
    os.kill(os.getpid(), signal.SIGKILL)

RunStore.append_samples = append_then_kill
main(sys.argv[1:], prog_name="evalpipe")
"""


def test_a_run_whose_tool_returns_a_lone_surrogate_resumes(tmp_path):
    """The result is a bad_result (it stopped the run, and --resume the same way); a run
    killed after its first write resumes to the end."""
    (tmp_path / "always_surrogate.py").write_text(
        'def lone_surrogate(a: int) -> str:\n    """Half a pair."""\n    return "\\ud800"\n')
    with FakeOpenAI(respond=calling("lone_surrogate")) as server:
        config = write_run(tmp_path, "lone_surrogate", server.url, n=3, concurrency=1)
        data = yaml.safe_load(config.read_text())
        data["custom_tools"] = ["always_surrogate:lone_surrogate"]
        config.write_text(yaml.safe_dump(data))
        env = dict(os.environ, EVALPIPE_CACHE=str(tmp_path / "cache"),
                   PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
        killed = subprocess.run([sys.executable, "-c", _KILL_AFTER_FIRST_WRITE, "run",
                                 "--config", str(config), "--out", "out", "--no-cache"],
                                cwd=tmp_path, env=env, capture_output=True, text=True,
                                timeout=HANG_GUARD_S, check=False)
        assert killed.returncode == -9, killed.stderr[-3000:]
        (run_dir,) = [p for p in (tmp_path / "out").iterdir() if p.name != "latest"]
        written = (run_dir / "samples.jsonl").read_text().splitlines()
        assert 0 < len(written) < 3
        res = run_command(tmp_path, "run", "--resume", str(run_dir), "--no-cache")
    assert f"resuming: {len(written)} samples already written" in res.stdout
    events = events_of(finished_run(tmp_path, res, n=3))
    assert [e["error"] for e in events] == ["bad_result"] * 3
    assert all("lone surrogate U+D800" in e["error_message"] for e in events)


def test_a_tool_module_that_ends_the_process_at_import_is_a_config_error(tmp_path):
    """The module is imported in a worker: the command says which entry and exits 2 (it
    exited 0 with nothing said, before the run began)."""
    (tmp_path / "exits_on_import.py").write_text(
        'import os\nos._exit(0)\n\ndef f(a: int) -> int:\n    return a\n')
    (tmp_path / "surrogate_doc.py").write_text(
        'def f(a: int) -> int:\n    """Half a pair: \\udcff."""\n    return a\n')
    write_jsonl(tmp_path / "q.jsonl", [{"id": "q0", "suite": "s", "question": "?",
                                        "answer": "a"}])
    for module, words in (("exits_on_import", "its process: exit code 0"),
                          ("surrogate_doc", "its description is not valid Unicode")):
        (tmp_path / "c.yaml").write_text(
            f"questions: [q.jsonl]\nmodels: [m]\ncustom_tools:\n  - {module}:f\n")
        res = run_command(tmp_path, "validate", "--config", "c.yaml")
        assert res.returncode == 2, (module, res.stdout, res.stderr)
        assert "c.yaml:4: field 'custom_tools[0]'" in res.stderr and words in res.stderr


# -- the library: what runs where ------------------------------------------------------------

PLAIN_TOOLS = '''
import os
import socket
import sys
import threading
from pathlib import Path


def loaded(prefixes: str) -> str:
    """Which of these top-level modules the tool's process has imported."""
    return ",".join(sorted({m.split(".")[0] for m in sys.modules} & set(prefixes.split(","))))


def meet(port: int) -> str:
    """Waits until the test lets every caller go."""
    with socket.create_connection(("127.0.0.1", port)) as conn:
        return conn.recv(16).decode()


def leaves_a_child(folder: str) -> str:
    """Starts a process that never ends, then hangs."""
    pid = os.fork()
    if pid == 0:
        threading.Event().wait()
    Path(folder, "pids").write_text(f"{os.getpid()} {pid}")
    threading.Event().wait()
    return "never"


def long_text(n: int) -> str:
    """n characters."""
    return "x" * n
'''


@pytest.fixture()
def plain_tools(tmp_path, monkeypatch):
    (tmp_path / "plain_tools_for_test.py").write_text(PLAIN_TOOLS)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "plain_tools_for_test"


def one_call(toolset, name: str, **arguments):
    from evalpipe.records import ToolCall

    (event,) = toolset.execute([ToolCall(name, arguments, id="c")])
    return event


def test_the_run_never_imports_a_tool_and_its_worker_never_imports_the_run(plain_tools):
    from evalpipe.tools import Toolset
    from evalpipe.tools.builtin import tool_from_callable

    tool = tool_from_callable(f"{plain_tools}:loaded")
    assert tool.parameters["properties"] == {"prefixes": {"type": "string"}}
    assert plain_tools not in sys.modules  # described by the worker, not imported here
    event = one_call(Toolset({"loaded": tool}), "loaded",
                     prefixes=f"evalpipe,torch,transformers,jsonschema,{plain_tools}")
    assert event.error is None and event.result == plain_tools


def test_calls_in_flight_together_run_in_workers_of_their_own(plain_tools):
    """Four calls of one reply, each waiting until all four have connected: one worker
    serving them in turn would never get past the first."""
    import socket
    import threading

    from evalpipe.records import ToolCall
    from evalpipe.tools import ToolLimits, Toolset
    from evalpipe.tools.builtin import tool_from_callable

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    server.settimeout(HANG_GUARD_S)  # a bound only for a failed test

    def rendezvous():
        conns = [server.accept()[0] for _ in range(4)]
        for conn in conns:
            conn.sendall(b"met")
            conn.close()

    thread = threading.Thread(target=rendezvous, daemon=True)
    thread.start()
    toolset = Toolset({"meet": tool_from_callable(f"{plain_tools}:meet")},
                      ToolLimits(timeout_s=HANG_GUARD_S))
    events = toolset.execute([ToolCall("meet", {"port": port}, id=f"c{i}") for i in range(4)])
    thread.join(HANG_GUARD_S)
    server.close()
    assert [(e.call_id, e.error, e.result) for e in events] == [
        (f"c{i}", None, "met") for i in range(4)]


def gone(pid: int) -> bool:
    """Waits (a bound only for a failed test) until the process has ended; True if it did."""
    import select

    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], HANG_GUARD_S)[0])
    finally:
        os.close(fd)


def test_a_call_that_times_out_ends_its_worker_and_what_it_started(plain_tools, tmp_path):
    from evalpipe.tools import ToolLimits, Toolset
    from evalpipe.tools.builtin import tool_from_callable

    toolset = Toolset({"leaves_a_child": tool_from_callable(f"{plain_tools}:leaves_a_child")},
                      ToolLimits(timeout_s=TIMEOUT_S))
    event = one_call(toolset, "leaves_a_child", folder=str(tmp_path))
    assert event.error == "timeout"
    worker, child = map(int, (tmp_path / "pids").read_text().split())
    assert worker != os.getpid()
    assert gone(worker) and gone(child)


def test_a_long_result_is_cut_in_the_worker(plain_tools):
    from evalpipe.tools import ToolLimits, Toolset
    from evalpipe.tools.builtin import tool_from_callable

    toolset = Toolset({"long_text": tool_from_callable(f"{plain_tools}:long_text")},
                      ToolLimits(max_result_chars=100))
    event = one_call(toolset, "long_text", n=50_000_000)
    assert event.error is None and event.truncated
    assert event.result == "x" * 100 + " [truncated]"


def test_a_change_of_folder_in_the_run_process_moves_nothing_it_writes(tmp_path, monkeypatch):
    """The run's paths are absolute from the start: a change of folder in the run's own
    process (here the model's reply handler, in-process) after the run began moves
    neither what it writes nor where (it failed: "cannot write out/.../samples.jsonl")."""
    from evalpipe import api

    monkeypatch.chdir(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    moved = []

    def respond(path, body):
        if question_of(body).startswith("Call ") and not moved:
            moved.append(os.getcwd())
            os.chdir(tmp_path / "elsewhere")
        return Json(chat("The answer is ok."))

    monkeypatch.setenv("EVALPIPE_CACHE", str(tmp_path / "cache"))
    with FakeOpenAI(respond=respond) as server:
        write_run(tmp_path, None, server.url, n=3, concurrency=1)
        result = api.run("configs/hostile.yaml", out="out", use_cache=False)
    assert moved == [str(tmp_path)] and os.getcwd() == str(tmp_path / "elsewhere")
    assert result.run_dir.parent == tmp_path / "out"
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert manifest["status"] == "finished"
    assert manifest["config"]["questions"] == ["configs/q.jsonl"]  # as written: the hash
    samples = (result.run_dir / "samples.jsonl").read_text().splitlines()
    assert len(samples) == 3 and (tmp_path / "out" / "latest").resolve() == result.run_dir


def test_a_tool_that_gets_no_process_is_a_tool_error(plain_tools, tmp_path, monkeypatch):
    import functools

    from evalpipe.tools import ToolLimits, Toolset, custom
    from evalpipe.tools.registry import Tool

    pool = custom.WorkerPool(tuple(sys.path))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python-here"))
    tool = Tool("long_text", "n characters.", {"type": "object"},
                remote=functools.partial(pool.call, f"{plain_tools}:long_text"))
    event = one_call(Toolset({"long_text": tool}, ToolLimits()), "long_text", n=3)
    assert event.error == "tool_exception"
    assert "no process could be started for the tool" in event.error_message


WAITS_TOOL = '''
import os
import threading


def waits(fifo: str) -> str:
    """Says its process id through a FIFO, then never returns."""
    with open(fifo, "w") as f:
        f.write(str(os.getpid()))
    threading.Event().wait()
    return "never"
'''


def read_fifo(path: Path) -> str:
    """What a writer of the FIFO writes, waiting for it (a bound only for a failed test)."""
    import select

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        assert select.select([fd], [], [], HANG_GUARD_S)[0], "nothing was written"
        return os.read(fd, 64).decode()
    finally:
        os.close(fd)


def test_a_run_killed_during_a_call_leaves_no_worker_behind(tmp_path):
    """The worker is in a session of its own, so nothing signals it: it ends when the
    run's end of its request pipe closes."""
    (tmp_path / "waits_tool.py").write_text(WAITS_TOOL)
    fifo = tmp_path / "pid.fifo"
    os.mkfifo(fifo)

    def respond(path, body):
        if not question_of(body).startswith("Call "):
            return Json(chat("1 2 3"))
        return Json(chat("", [{"id": "c1", "type": "function", "function": {
            "name": "waits", "arguments": json.dumps({"fifo": str(fifo)})}}]))

    with FakeOpenAI(respond=respond) as server:
        config = write_run(tmp_path, None, server.url, n=1)
        data = yaml.safe_load(config.read_text())
        data.update(custom_tools=["waits_tool:waits"], tool_limits={"timeout_s": 3600})
        config.write_text(yaml.safe_dump(data))
        env = dict(os.environ, EVALPIPE_CACHE=str(tmp_path / "cache"),
                   PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
        proc = subprocess.Popen([sys.executable, "-m", "evalpipe", "run", "--config",
                                 str(config), "--out", "out", "--no-cache"], cwd=tmp_path,
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            worker = int(read_fifo(fifo))  # once the tool is running
            assert worker != proc.pid
            proc.kill()
            proc.wait(HANG_GUARD_S)
        finally:
            proc.kill()
    assert gone(worker)
