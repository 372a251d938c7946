"""The process a custom tool runs in (started by tools/custom.py).

It is run as a script, so it imports nothing of evalpipe and nothing of what the
run has loaded (torch, the model): only the standard library and the tools' own
modules. It reads requests on stdin and answers on stdout, one at a time:

- each message is a frame: a 4-byte big-endian length, then a JSON object in
  ASCII (a lone surrogate crosses as an escape, for the run to judge);
- the run's first frame is {"path": [...], "preload": [spec, ...]}: the import
  path, and the tools to import before the worker says {"ready": pid};
- {"op": "describe", "spec": "package.module:function"} answers the tool's name,
  description and JSON schema, from its type hints and docstring, or why not;
- {"op": "call", "spec": ..., "arguments": {...}, "max_chars": n} runs the tool,
  serialises its result and answers {"text", "json", "truncated"} or an error.

The tool's own prints go nowhere (stdout and stderr are /dev/null: the protocol
keeps private copies). After each call the worker's folder and environment are
put back as they were, so one call cannot change what the next one sees; a copy
of the worker that a tool forked never answers. Everything else the run's side
bounds: it kills a worker that gives no answer in time, and starts another.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import json
import os
import queue
import struct
import sys
import threading
import typing
from typing import Any

HEADER = struct.Struct(">I")  # the length of the JSON that follows
MAX_MESSAGE_CHARS = 500  # of an error message
_PY_TYPES = {int: "integer", float: "number", str: "string", bool: "boolean"}
EXPECTED_SPEC = ("'package.module:function' importable from the current folder or PYTHONPATH "
                 "(docs/questions.md, \"Custom tools\")")
EXPECTED_HINTS = "int, float, str or bool annotations"


def frame(message: dict[str, Any]) -> bytes:
    """One message as it crosses the pipe."""
    data = json.dumps(message, ensure_ascii=True).encode("ascii")
    return HEADER.pack(len(data)) + data


def describe_exception(exc: BaseException) -> str:
    """An exception as one bounded line (str() of an exception can itself fail)."""
    try:
        text = f"{type(exc).__name__}: {exc}"
    except BaseException:  # noqa: BLE001 -- the message is best effort
        text = type(exc).__name__
    return text if len(text) <= MAX_MESSAGE_CHARS else text[:MAX_MESSAGE_CHARS] + "..."


class Refused(Exception):
    """A spec that cannot be a tool: (message, expected)."""


_functions: dict[str, Any] = {}


def load(spec: str) -> Any:
    """The function a spec names, imported once."""
    if spec not in _functions:
        module_name, _, attr = spec.partition(":")
        try:
            _functions[spec] = getattr(importlib.import_module(module_name), attr)
        except BaseException as exc:  # noqa: BLE001 -- an import may raise anything
            raise Refused(f"cannot import tool {spec!r} ({describe_exception(exc)})",
                          EXPECTED_SPEC) from None
    return _functions[spec]


def describe(spec: str) -> dict[str, Any]:
    """The tool's name, description and JSON schema: int, float, str and bool hints
    (resolved, so `from __future__ import annotations` is fine); a parameter with a
    default is optional."""
    fn = load(spec)
    try:
        hints = typing.get_type_hints(fn)
        parameters = inspect.signature(fn).parameters
    except BaseException as exc:  # noqa: BLE001 -- a hint naming something undefined, ...
        raise Refused(f"tool {spec!r}: its type hints cannot be resolved "
                      f"({describe_exception(exc)})", EXPECTED_HINTS) from None
    props, required = {}, []
    for name, param in parameters.items():
        kind = _PY_TYPES.get(hints.get(name))  # type: ignore[arg-type]
        if kind is None:
            shown = hints.get(name, "none")
            raise Refused(f"tool {spec!r}: parameter {name!r} has no simple type hint "
                          f"(got {getattr(shown, '__name__', shown)})", EXPECTED_HINTS)
        props[name] = {"type": kind}
        if param.default is inspect.Parameter.empty:
            required.append(name)
    tool_name = getattr(fn, "__name__", None)
    if not isinstance(tool_name, str) or not tool_name:
        raise Refused(f"tool {spec!r} has no name", "a function defined with def")
    return {"name": tool_name, "description": inspect.getdoc(fn) or tool_name,
            "parameters": {"type": "object", "properties": props, "required": required,
                           "additionalProperties": False}}


def call(spec: str, arguments: dict[str, Any], max_chars: int) -> dict[str, Any]:
    """Run the tool and serialise its result here, where a result that takes forever
    to serialise costs the worker, not the run."""
    try:
        fn = load(spec)
    except Refused as exc:
        return {"error": "tool_exception", "message": str(exc.args[0])}
    try:
        result = fn(**arguments)
    except BaseException as exc:  # noqa: BLE001 -- SystemExit, KeyboardInterrupt too
        return {"error": "tool_exception", "message": describe_exception(exc)}
    try:
        if isinstance(result, str):
            text, is_json = str(result), False
        else:
            text, is_json = json.dumps(result, ensure_ascii=False, allow_nan=False), True
    except BaseException as exc:  # noqa: BLE001 -- NaN, a set, a cycle, a raising __str__
        return {"error": "bad_result",
                "message": f"the tool's result cannot be shown: {describe_exception(exc)}"}
    return {"text": text[:max_chars], "json": is_json, "truncated": len(text) > max_chars}


def handle(request: dict[str, Any]) -> dict[str, Any]:
    if request.get("op") == "describe":
        try:
            return {"tool": describe(request["spec"])}
        except Refused as exc:
            return {"refused": exc.args[0], "expected": exc.args[1]}
    return call(request["spec"], request["arguments"], request["max_chars"])


def _read_exact(fd: int, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def _read_requests(fd: int, requests: queue.Queue[dict[str, Any]]) -> None:
    """Requests, into the queue; when the run closes the pipe (it ended, or retired this
    worker) the worker ends at once, even in the middle of a call that never returns."""
    try:
        while True:
            (size,) = HEADER.unpack(_read_exact(fd, HEADER.size))
            requests.put(json.loads(_read_exact(fd, size)))
    except BaseException:  # noqa: BLE001 -- EOF, or a pipe a tool closed
        os._exit(0)


def _send(fd: int, message: dict[str, Any]) -> None:
    data = memoryview(frame(message))
    while data:
        data = data[os.write(fd, data):]


def _restore(folder: str, environ: dict[str, str]) -> None:
    """Undo what a call did to the process's folder and environment."""
    try:
        moved = os.getcwd() != folder
    except OSError:  # the folder it moved to was deleted
        moved = True
    if moved:
        os.chdir(folder)
    if dict(os.environ) != environ:
        os.environ.clear()
        os.environ.update(environ)


def main() -> None:
    # The protocol's own copies of stdin and stdout; fds 0 and 1 become /dev/null, so
    # nothing a tool prints or reads can reach the pipes.
    requests_fd, replies_fd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    pid = os.getpid()
    requests: queue.Queue[dict[str, Any]] = queue.Queue()
    threading.Thread(target=_read_requests, args=(requests_fd, requests), daemon=True).start()
    first = requests.get()
    sys.path[:] = first["path"]
    for spec in first["preload"]:
        with contextlib.suppress(Refused):  # each call of it says why
            load(spec)
    folder, environ = os.getcwd(), dict(os.environ)
    _send(replies_fd, {"ready": pid})
    while True:
        reply = handle(requests.get())
        if os.getpid() != pid:  # a copy a tool forked: the worker answers, not the copy
            os._exit(0)
        _restore(folder, environ)
        _send(replies_fd, reply)


if __name__ == "__main__":  # run with -P: evalpipe/tools/ is not on the import path
    main()
