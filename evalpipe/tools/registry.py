"""Tools the model may call: schemas, validation before execution, limits.

Model output is untrusted. A call runs only after its name is found among the
tools offered and its arguments validate against the tool's JSON schema; every
failure (unknown tool, bad arguments, an exception, a timeout, an over-long
result) becomes a ToolEvent with an error that is shown to the model, never an
exception that stops the run.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from evalpipe.records import ToolCall, ToolEvent

MAX_ARGUMENT_CHARS = 10_000  # a 10 MB "argument" is refused before validation


@dataclass
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema of the arguments object
    fn: Callable[..., Any] | None  # None: schema-only, never run (tools/schema_only.py)
    parallel_safe: bool = True  # pure tools may run concurrently

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
            name: jsonschema.Draft202012Validator(tool.parameters)
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
        size = len(json.dumps(call.arguments, default=str))
        if size > MAX_ARGUMENT_CHARS:
            return "invalid_arguments", f"arguments are {size} characters; limit {MAX_ARGUMENT_CHARS}"
        errors = sorted(self._validators[call.name].iter_errors(call.arguments),
                        key=lambda e: list(e.path))
        if errors:
            first = errors[0]
            where = ".".join(str(p) for p in first.path) or "arguments"
            return "invalid_arguments", f"{where}: {first.message}"
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
        if self.tools[call.name].fn is None:  # schema-only: validated, never run
            event.result = self.stub_result
            return event
        start = time.perf_counter()
        pool = ThreadPoolExecutor(max_workers=1)
        try:
            result = pool.submit(self.tools[call.name].fn, **call.arguments).result(
                timeout=self.limits.timeout_s)
        except FutureTimeout:
            event.error, event.error_message = "timeout", f"no result within {self.limits.timeout_s} s"
        except Exception as exc:  # noqa: BLE001 -- a tool's own failure is reported to the model
            event.error, event.error_message = "tool_exception", f"{type(exc).__name__}: {exc}"
        else:
            text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
            if len(text) > self.limits.max_result_chars:
                event.truncated = True
                result = text[: self.limits.max_result_chars] + " [truncated]"
            event.result = result
        finally:
            pool.shutdown(wait=False)
            event.ms = (time.perf_counter() - start) * 1000
        return event


def result_text(event: ToolEvent) -> str:
    """What the model is shown for one tool call."""
    if event.error:
        return json.dumps({"error": event.error_message or event.error}, ensure_ascii=False)
    if isinstance(event.result, str):
        return event.result
    return json.dumps(event.result, ensure_ascii=False)
