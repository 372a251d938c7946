"""Custom tools: the user's own functions (`custom_tools: [package.module:function]`),
each call run in a worker process (tools/worker.py), never in the run's.

The run never imports a tool's module: a worker does, reads the schema from its type
hints and runs its calls. A worker serves one call at a time, so calls in flight
together run in workers of their own (started as needed, kept while idle). The tool
limit bounds the whole call: the function, the serialising of its result and its way
back; a worker that gives no answer in time is killed with everything it started,
and the next call starts a fresh one. So a tool that exits, is killed by a signal,
forks, changes folder or environment, hangs, floods its output, or returns what no
JSON can hold costs its call a tool event with an error, and the run goes on.

A worker is isolation from accidents, not a sandbox: the tool is still code the user
runs with the user's permissions (docs/questions.md, "Custom tools").
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from evalpipe.errors import InputError
from evalpipe.tools.registry import Reply, Tool, ToolFailure, ToolLimits, unicode_problem
from evalpipe.tools.worker import HEADER, frame

WORKER = Path(__file__).with_name("worker.py")
# Starting a worker imports the tools' modules; a call's own time limit starts after.
START_TIMEOUT_S = 60.0
MAX_IDLE = 8  # idle workers kept per pool (a reply runs at most 8 calls at once)
MAX_DESCRIPTION_BYTES = 1 << 20


class _Gone(Exception):
    """The worker ended, or closed its end of the pipe."""


class _NoProcess(_Gone):
    """No worker could be started (too many processes or open files, ...)."""


class _NoAnswer(Exception):
    """No answer before the deadline."""


class _BadAnswer(Exception):
    """An answer that is not one: too large, not JSON, not the shape asked for."""


class _Worker:
    """One worker process and its pipes; used by one call at a time."""

    def __init__(self, path: tuple[str, ...], preload: list[str]):
        env = dict(os.environ)
        env.setdefault("PYTHONHASHSEED", "0")  # a tool that iterates a set: same order each run
        # Its own session: a Ctrl-C at the terminal is the run's to handle, a tool's
        # os.killpg(0, ...) reaches only the worker, and a kill takes what it forked.
        self.proc = subprocess.Popen([sys.executable, "-P", str(WORKER)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     env=env, start_new_session=True, bufsize=0)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._to, self._from = self.proc.stdin.fileno(), self.proc.stdout.fileno()
        self._writable, self._readable = selectors.DefaultSelector(), selectors.DefaultSelector()
        for fd, selector, event in ((self._to, self._writable, selectors.EVENT_WRITE),
                                    (self._from, self._readable, selectors.EVENT_READ)):
            os.set_blocking(fd, False)
            selector.register(fd, event)
        self.start: dict[str, Any] | None = {"path": list(path), "preload": preload}

    def ask(self, request: dict[str, Any], timeout_s: float, limit: int) -> dict[str, Any]:
        """The worker's answer to one request, within timeout_s of sending it."""
        if self.start is not None:  # its first request: start, and say when ready
            late = f"the tool's process did not start within {START_TIMEOUT_S:g} s"
            deadline = time.monotonic() + START_TIMEOUT_S
            self._send(frame(self.start), deadline, late)
            if "ready" not in self._receive(deadline, 4096, late):
                raise _BadAnswer("the tool's process did not start")
            self.start = None
        deadline = time.monotonic() + timeout_s
        late = f"no result within {timeout_s} s"
        self._send(frame(request), deadline, late)
        return self._receive(deadline, limit, late)

    @staticmethod
    def _wait(selector: selectors.BaseSelector, deadline: float, late: str) -> None:
        while not selector.select(max(0.0, deadline - time.monotonic())):
            if time.monotonic() >= deadline:
                raise _NoAnswer(late)

    def _send(self, data: bytes, deadline: float, late: str) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self._to, view):]
            except BlockingIOError:  # the pipe is full: wait until it takes more
                self._wait(self._writable, deadline, late)
            except OSError:  # EPIPE: it ended
                raise _Gone(self.ended()) from None

    def _read(self, n: int, deadline: float, late: str) -> bytes:
        data = b""
        while len(data) < n:
            try:
                chunk = os.read(self._from, n - len(data))
            except BlockingIOError:  # nothing yet: wait for it
                self._wait(self._readable, deadline, late)
                continue
            if not chunk:
                raise _Gone(self.ended())
            data += chunk
            if len(data) < n and time.monotonic() >= deadline:  # a trickle is no answer
                raise _NoAnswer(late)
        return data

    def _receive(self, deadline: float, limit: int, late: str) -> dict[str, Any]:
        (size,) = HEADER.unpack(self._read(HEADER.size, deadline, late))
        if size > limit:
            raise _BadAnswer(f"the tool's answer is {size} bytes; limit {limit}")
        try:
            answer = json.loads(self._read(size, deadline, late).decode("ascii"))
        except (ValueError, RecursionError):
            raise _BadAnswer("the tool's process answered something that is not JSON") from None
        if not isinstance(answer, dict):
            raise _BadAnswer("the tool's process answered something that is not a message")
        return answer

    def ended(self) -> str:
        """How the process ended, once it closed its pipe."""
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return "it closed its pipe"
        if code < 0:
            with contextlib.suppress(ValueError):
                return f"killed by {signal.Signals(-code).name}"
        return f"exit code {code}"

    def kill(self) -> None:
        """Kill the worker and whatever it started in its session, and reap it."""
        with contextlib.suppress(OSError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._writable.close()
        self._readable.close()
        for pipe in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                pipe.close()  # type: ignore[union-attr]


def _kill_all(live: set[_Worker], owner: int) -> None:
    if os.getpid() == owner:  # a forked copy of the run does not own the workers
        for worker in list(live):
            worker.kill()
        live.clear()


class WorkerPool:
    """The workers of one import path: tools described once, calls run each in an idle
    worker or a new one. Its workers are killed when the pool is no longer used (its
    tools are gone) or the run's process exits; a worker whose run died ends by itself
    (its request pipe closes)."""

    def __init__(self, path: tuple[str, ...]):
        self.path = path
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self._live: set[_Worker] = set()
        self._tools: dict[str, dict[str, Any]] = {}  # spec -> name, description, parameters
        weakref.finalize(self, _kill_all, self._live, os.getpid())

    def _take(self) -> _Worker:
        with self._lock:
            if self._idle:
                return self._idle.pop()  # the one used last: one worker for calls in turn
            worker = _Worker(self.path, list(self._tools))
            self._live.add(worker)
            return worker

    def _give_back(self, worker: _Worker) -> None:
        with self._lock:
            if len(self._idle) < MAX_IDLE:
                self._idle.append(worker)
                return
        self._retire(worker)

    def _retire(self, worker: _Worker) -> None:
        worker.kill()
        with self._lock:
            self._live.discard(worker)

    def _ask(self, request: dict[str, Any], timeout_s: float, limit: int) -> dict[str, Any]:
        try:
            worker = self._take()
        except OSError as exc:  # no process to be had (EMFILE, EAGAIN, ...)
            raise _NoProcess(f"no process could be started for the tool ({exc})") from None
        try:
            answer = worker.ask(request, timeout_s, limit)
        except BaseException:
            self._retire(worker)
            raise
        self._give_back(worker)
        return answer

    def describe(self, spec: str) -> dict[str, Any]:
        """The tool's name, description and parameter schema; InputError-ready
        (message, expected) in a ValueError when the spec cannot be a tool."""
        if spec not in self._tools:
            try:
                answer = self._ask({"op": "describe", "spec": spec}, START_TIMEOUT_S,
                                   MAX_DESCRIPTION_BYTES)
            except (_Gone, _NoAnswer, _BadAnswer) as exc:
                raise ValueError(f"cannot import tool {spec!r} (its process: {exc})",
                                 "a module that imports without ending the process") from None
            if "refused" in answer:
                raise ValueError(str(answer["refused"]), str(answer.get("expected")))
            self._tools[spec] = _checked_description(spec, answer.get("tool"))
        return self._tools[spec]

    def call(self, spec: str, arguments: dict[str, Any], limits: ToolLimits) -> Reply:
        """One call in a worker; ToolFailure for every way it can fail."""
        request = {"op": "call", "spec": spec, "arguments": arguments,
                   "max_chars": limits.max_result_chars}
        # Room for the result as escaped ASCII (12 bytes for a character beyond the BMP).
        limit = 12 * limits.max_result_chars + 65536
        try:
            answer = self._ask(request, limits.timeout_s, limit)
        except _NoAnswer as exc:
            raise ToolFailure("timeout", str(exc)) from None
        except _NoProcess as exc:
            raise ToolFailure("tool_exception", str(exc)) from None
        except _Gone as exc:
            raise ToolFailure("tool_exception",
                              f"the tool's process ended during the call ({exc})") from None
        except _BadAnswer as exc:
            raise ToolFailure("bad_result", str(exc)) from None
        if answer.get("error") in ("tool_exception", "bad_result"):
            raise ToolFailure(answer["error"], str(answer.get("message")))
        text, is_json, truncated = answer.get("text"), answer.get("json"), answer.get("truncated")
        if not (isinstance(text, str) and isinstance(is_json, bool)
                and isinstance(truncated, bool)):
            raise ToolFailure("bad_result", "the tool's process answered something that is "
                                            "not a result")
        return Reply(text, is_json, truncated)


def _checked_description(spec: str, tool: Any) -> dict[str, Any]:
    """What the worker read from the function, checked: it reaches every prompt."""
    if not (isinstance(tool, dict) and isinstance(tool.get("name"), str) and tool["name"]
            and isinstance(tool.get("description"), str)
            and isinstance(tool.get("parameters"), dict)):
        raise ValueError(f"tool {spec!r}: its process described it wrongly",
                         "a plain function")
    for what in ("name", "description"):
        problem = unicode_problem(tool[what])
        if problem:
            raise ValueError(f"tool {spec!r}: its {what} is not valid Unicode ({problem})",
                             "a name and docstring in valid Unicode")
    return tool


_pools: weakref.WeakValueDictionary[tuple[str, ...], WorkerPool] = weakref.WeakValueDictionary()
_pools_lock = threading.Lock()


def pool() -> WorkerPool:
    """The worker pool of the current import path (each of its entries made absolute,
    so that the workers find the same modules whatever folder they are in)."""
    path = tuple(os.path.abspath(p) for p in sys.path)
    with _pools_lock:
        found = _pools.get(path)
        if found is None:
            found = _pools[path] = WorkerPool(path)
        return found


def tool_from_callable(spec: str, *, file: str | None = None, line: int | None = None,
                       field: str = "custom_tools") -> Tool:
    """A user tool from 'package.module:function', described by a worker: the schema
    from its type hints (int, float, str, bool), the description from its docstring.
    Errors name `field` (and the config's file and line when given)."""
    workers = pool()
    try:
        described = workers.describe(spec)
    except ValueError as exc:
        message, expected = exc.args
        raise InputError(message, file=file, line=line, field=field,
                         expected=expected) from None
    return Tool(described["name"], described["description"], described["parameters"],
                remote=functools.partial(workers.call, spec))
