"""Tools the model may call: schemas, validation before execution, limits.

Model output is untrusted. A call runs only after its name is found among the
tools offered and its arguments validate against the tool's JSON schema; every
failure (unknown tool, bad arguments, an exception, a timeout, a result JSON
cannot hold or that is not valid Unicode) becomes a ToolEvent with an error that
is shown to the model, never an exception that stops the run; an over-long
result is cut to the limit.

Where a call runs: evalpipe's own tools (tools/builtin.py: bounded, pure
functions of their checked arguments) in this process, under a thread that
bounds their time; the user's own tools in a worker process (tools/custom.py),
which gives back the result as text. Both kinds of result are checked here, by
the same rules.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from evalpipe.records import ToolCall, ToolEvent

MAX_ARGUMENT_CHARS = 10_000  # a 10 MB "argument" is refused before validation
MAX_MESSAGE_CHARS = 500  # of an error message shown to the model


def _is_integer(checker: Any, value: Any) -> bool:
    # One type rule from parse to tool: 10.0 is not an integer (JSON Schema says it is,
    # and then fib(10.0) fails inside the tool), and neither is true.
    return isinstance(value, int) and not isinstance(value, bool)


# Draft 2020-12, with "integer" meaning a JSON integer as written.
Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer))


def _describe(exc: BaseException) -> str:
    """An exception as one bounded line (str() of an exception can itself fail)."""
    try:
        text = f"{type(exc).__name__}: {exc}"
    except Exception:  # noqa: BLE001 -- the message is best effort
        text = type(exc).__name__
    return text if len(text) <= MAX_MESSAGE_CHARS else text[:MAX_MESSAGE_CHARS] + "..."


def _bounded(message: str) -> str:
    """A message as the model and the run's files can hold it: a lone surrogate written
    as its escape, and at most MAX_MESSAGE_CHARS characters."""
    text = message.encode("utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= MAX_MESSAGE_CHARS else text[:MAX_MESSAGE_CHARS] + "..."


def unicode_problem(text: str) -> str | None:
    """Why text is not valid Unicode (a lone surrogate, which no UTF-8 file or prompt
    can hold); None when it is."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"a lone surrogate U+{ord(text[exc.start]):04X} at character {exc.start}"
    return None


def result_json(result: Any) -> str:
    """A tool result as the JSON text the model is shown. Raises ValueError for what
    JSON cannot hold (NaN, an int over 4,300 digits, a set, a cycle, deep nesting) and
    for text that is not valid Unicode."""
    try:
        text = json.dumps(result, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        raise ValueError(_describe(exc)) from None
    problem = unicode_problem(text)
    if problem:
        raise ValueError(f"not valid Unicode ({problem})")
    return text


@dataclass
class Reply:
    """A tool's result as text: the string it returned, or the JSON of what it returned
    (`is_json`); cut to the limit where `truncated`."""

    text: str
    is_json: bool
    truncated: bool = False


class ToolFailure(Exception):
    """A call that gave no result: (error kind, message), as the ToolEvent records them."""

    def __init__(self, kind: str, message: str):
        super().__init__(kind, message)
        self.kind, self.message = kind, message


@dataclass
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema of the arguments object
    fn: Callable[..., Any] | None = None  # run in this process: evalpipe's own tools
    parallel_safe: bool = True  # pure tools may run concurrently
    # run elsewhere, the result back as text: the user's own tools (tools/custom.py)
    remote: Callable[[dict[str, Any], ToolLimits], Reply] | None = None

    @property
    def schema_only(self) -> bool:
        """Offered, never run (tools/schema_only.py)."""
        return self.fn is None and self.remote is None

    def schema(self) -> dict[str, Any]:
        """OpenAI-style function definition, the form chat templates expect."""
        return {"type": "function", "function": {
            "name": self.name, "description": self.description, "parameters": self.parameters}}


@dataclass
class ToolLimits:
    timeout_s: float = 5.0
    max_result_chars: int = 4000


@dataclass
class Toolset:
    """The tools offered in one cell, with their limits."""

    tools: dict[str, Tool] = field(default_factory=dict)
    limits: ToolLimits = field(default_factory=ToolLimits)
    stub_result: Any = None  # what a schema-only tool's call returns

    def __post_init__(self):
        self._validators = {
            name: Validator(tool.parameters)
            for name, tool in self.tools.items()
        }

    def with_tools(self, *tools: Tool) -> Toolset:
        return Toolset({**self.tools, **{t.name: t for t in tools}}, self.limits,
                       self.stub_result)

    @property
    def names(self) -> list[str]:
        return list(self.tools)

    def schemas(self) -> list[dict[str, Any]]:
        return [tool.schema() for tool in self.tools.values()]

    def check(self, call: ToolCall) -> tuple[str, str] | None:
        """Why a call may not run, as (error kind, message); None when it may."""
        tool = self.tools.get(call.name)
        if tool is None:
            offered = ", ".join(self.tools) or "none"
            return "unknown_tool", f"unknown tool {call.name!r}; offered: {offered}"
        if not isinstance(call.arguments, dict):
            return "invalid_arguments", "arguments must be a JSON object"
        try:
            size = len(result_json(call.arguments))
            errors = sorted(self._validators[call.name].iter_errors(call.arguments),
                            key=lambda e: [str(p) for p in e.path])
        except Exception as exc:  # noqa: BLE001 -- arguments no schema can check
            return "invalid_arguments", f"arguments cannot be checked: {_describe(exc)}"
        if size > MAX_ARGUMENT_CHARS:
            return ("invalid_arguments",
                    f"arguments are {size} characters; limit {MAX_ARGUMENT_CHARS}")
        if errors:
            first = errors[0]
            where = ".".join(str(p) for p in first.path) or "arguments"
            message = f"{where}: {first.message}"
            if len(message) > MAX_MESSAGE_CHARS:
                message = message[:MAX_MESSAGE_CHARS] + "..."
            return "invalid_arguments", message
        return None

    def execute(self, calls: list[ToolCall]) -> list[ToolEvent]:
        """Run the calls of one reply; results come back in call order."""
        if len(calls) > 1 and all(c.name in self.tools and self.tools[c.name].parallel_safe
                                  for c in calls):
            with ThreadPoolExecutor(max_workers=min(8, len(calls))) as pool:
                return list(pool.map(self._execute_one, calls))
        return [self._execute_one(c) for c in calls]

    def _execute_one(self, call: ToolCall) -> ToolEvent:
        event = ToolEvent(call_id=call.id, name=call.name, arguments=call.arguments)
        problem = self.check(call)
        if problem:
            event.error, event.error_message = problem
            return event
        tool = self.tools[call.name]
        if tool.schema_only:  # validated, never run
            event.result = self.stub_result
            return event
        start = time.perf_counter()
        try:
            event.result, event.truncated = self._run(tool, call.arguments)
        except ToolFailure as failure:
            event.error, event.error_message = failure.kind, _bounded(failure.message)
        finally:
            event.ms = (time.perf_counter() - start) * 1000
        return event

    def _run(self, tool: Tool, arguments: dict[str, Any]) -> tuple[Any, bool]:
        """The result the model is shown and whether it was cut; ToolFailure when there
        is none."""
        limit = self.limits.max_result_chars
        if tool.remote is not None:
            reply = tool.remote(arguments, self.limits)
            value: Any = _UNREAD
        else:
            assert tool.fn is not None
            try:
                value = run_bounded(tool.fn, arguments, self.limits.timeout_s)
            except ToolTimeout:
                raise ToolFailure("timeout", f"no result within {self.limits.timeout_s} s"
                                  ) from None
            except Exception as exc:  # noqa: BLE001 -- a tool's own failure is reported
                raise ToolFailure("tool_exception", _describe(exc)) from None
            try:
                reply = Reply(value, False) if isinstance(value, str) else \
                    Reply(result_json(value), True)
            except ValueError as exc:  # a 7,999-digit product, NaN, a set: not a result
                raise ToolFailure("bad_result", f"the tool's result cannot be shown: {exc}"
                                  ) from None
        cut = reply.truncated or len(reply.text) > limit
        text = reply.text[:limit]
        problem = unicode_problem(text)
        if problem:
            raise ToolFailure("bad_result", f"the tool's result is not valid Unicode ({problem})")
        if cut:
            return text + " [truncated]", True
        if not reply.is_json:
            return text, False
        if value is _UNREAD:  # the JSON a worker sent: read back, and checked once more
            try:
                value = json.loads(reply.text)
                result_json(value)
            except (ValueError, RecursionError) as exc:
                raise ToolFailure("bad_result", f"the tool's result cannot be shown: "
                                                f"{_describe(exc)}") from None
        return value, False


_UNREAD = object()  # a result not yet read from its JSON text


class ToolTimeout(Exception):
    """A tool gave no result within its time limit (a TimeoutError the tool itself
    raises is the tool's own exception)."""


def run_bounded(fn: Callable[..., Any], arguments: dict[str, Any], timeout_s: float) -> Any:
    """fn(**arguments), waited for at most timeout_s (ToolTimeout after that). It runs in a
    daemon thread: Python cannot stop a thread, so a tool that times out runs on until it
    returns or the process exits, but it never delays that exit (a pool thread would be
    joined at exit, and kept the process alive as long as the tool ran)."""
    done = threading.Event()
    outcome: dict[str, Any] = {}

    def call() -> None:
        try:
            outcome["result"] = fn(**arguments)
        except BaseException as exc:  # noqa: BLE001 -- re-raised in the caller's thread
            outcome["error"] = exc
        finally:
            done.set()

    threading.Thread(target=call, name=f"tool {getattr(fn, '__name__', 'call')}",
                     daemon=True).start()
    if not done.wait(timeout_s):
        raise ToolTimeout(f"no result within {timeout_s} s")
    if "error" in outcome:
        error = outcome["error"]
        if not isinstance(error, Exception):  # SystemExit, KeyboardInterrupt from a tool
            raise RuntimeError(f"the tool raised {type(error).__name__}") from None
        raise error
    return outcome["result"]


def result_text(event: ToolEvent) -> str:
    """What the model is shown for one tool call."""
    if event.error:
        return json.dumps({"error": event.error_message or event.error}, ensure_ascii=False)
    if isinstance(event.result, str):
        return event.result
    try:
        return result_json(event.result)
    except ValueError as exc:  # a stub or replayed result: shown as an error, never raised
        return json.dumps({"error": f"the tool's result cannot be shown: {exc}"})
