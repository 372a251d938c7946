"""Structured tool calls from an OpenAI-compatible HTTP backend.

Nothing is written into the prompt and nothing is parsed out of text: the
messages stay in Chat Completions shape (assistant `tool_calls` with ids and
JSON-string arguments, content "" rather than null, which some servers refuse;
`tool` messages with `tool_call_id`), the tools list is
passed through to the server, and calls come back structured in
`Generation.tool_calls`, which the engine uses directly. `parse` only splits off
`<think>` reasoning and never returns calls.
"""

from __future__ import annotations

import json
from typing import Any

from evalpipe.formats.base import Format, start_result
from evalpipe.records import ParseResult, ToolCall


def _arguments_json(arguments: Any) -> str:
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False)


class OpenAIFormat(Format):
    name = "openai"

    def prepare(self, messages, tools, template_supports_tools):
        wire: list[dict[str, Any]] = []
        for m in messages:
            role = m["role"]
            if role == "assistant":
                out: dict[str, Any] = {"role": "assistant", "content": m.get("content") or ""}
                calls = m.get("tool_calls") or []
                if calls:
                    out["tool_calls"] = [
                        {"id": c.get("id", ""), "type": "function",
                         "function": {"name": c["function"]["name"],
                                      "arguments": _arguments_json(c["function"]["arguments"])}}
                        for c in calls]
                wire.append(out)
            elif role == "tool":
                wire.append({"role": "tool", "tool_call_id": m.get("tool_call_id", ""),
                             "content": m.get("content") or ""})
            else:
                wire.append({"role": role, "content": m.get("content") or ""})
        return wire, (list(tools) or None)

    def render_call(self, call: ToolCall) -> str:
        """The call as an API returns it (documentation and tests only)."""
        return json.dumps({"id": call.id or "call_0", "type": "function",
                           "function": {"name": call.name,
                                        "arguments": _arguments_json(call.arguments)}},
                          ensure_ascii=False)

    def render_calls(self, calls: list[ToolCall]) -> str:
        return "[" + ", ".join(self.render_call(c) for c in calls) + "]"

    def parse(self, text: str, *, lenient: bool = True) -> ParseResult:
        result, reply = start_result(text)
        if reply is not None:
            result.content = reply
        return result
