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
from evalpipe.formats.repair import loads_value
from evalpipe.records import ParseResult, ToolCall

# The Chat Completions wire shape, in one home: this format's prepare and the
# OpenAI backend's requests and replies both go through these functions.
MESSAGE_KEYS = {"system": ("role", "content"), "user": ("role", "content"),
                "assistant": ("role", "content", "tool_calls"),
                "tool": ("role", "content", "tool_call_id")}


def _arguments_json(arguments: Any) -> str:
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False)


def wire_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Canonical transcript -> Chat Completions messages: only the keys the API
    knows, tool-call arguments as JSON strings, assistant text never null."""
    out = []
    for m in messages:
        role = m.get("role", "user")
        msg = {k: m[k] for k in MESSAGE_KEYS.get(role, ("role", "content")) if k in m}
        msg["content"] = msg.get("content") or ""
        if role == "assistant" and msg.get("tool_calls"):
            calls = []
            for i, call in enumerate(msg["tool_calls"]):
                fn = call.get("function", call)
                calls.append({"id": call.get("id") or f"call_{i}", "type": "function",
                              "function": {"name": fn.get("name", ""),
                                           "arguments": _arguments_json(fn.get("arguments", {}))}})
            msg["tool_calls"] = calls
        elif "tool_calls" in msg:
            del msg["tool_calls"]
        if role == "tool":
            msg.setdefault("tool_call_id", "")
        out.append(msg)
    return out


def wire_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    if not tools:
        return None
    return [t if t.get("type") == "function" and "function" in t
            else {"type": "function", "function": t} for t in tools]


def decode_arguments(raw: Any) -> Any:
    """Structured call arguments as a dict; a string that is not a JSON object (or
    gives a key twice, or holds an out-of-range number) is kept as it is, so the
    tool check reports invalid_arguments. Decoded by the formats' strict reader."""
    if isinstance(raw, dict):
        return raw
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    if not isinstance(raw, str):
        return raw
    value, problem, _ = loads_value(raw, lenient=False)
    return value if problem is None and isinstance(value, dict) else raw


class OpenAIFormat(Format):
    name = "openai"

    def prepare(self, messages, tools, template_supports_tools):
        return wire_messages(messages), wire_tools(list(tools))

    def render_call(self, call: ToolCall) -> str:
        """The call as an API returns it (documentation and tests only)."""
        return json.dumps({"id": call.id or "call_0", "type": "function",
                           "function": {"name": call.name,
                                        "arguments": _arguments_json(call.arguments)}},
                          ensure_ascii=False)

    def render_calls(self, calls: list[ToolCall]) -> str:
        return "[" + ", ".join(self.render_call(c) for c in calls) + "]"

    def _parse(self, text: str, *, lenient: bool = True) -> ParseResult:
        result, reply = start_result(text)
        if reply is not None:
            result.content = reply
        return result
