"""The hermes protocol: <tool_call>{"name": ..., "arguments": {...}}</tool_call>.

`HermesFormat` writes the protocol into the system prompt, for chat templates
without tool support; `NativeFormat` hands the tools to the model's own chat
template (Qwen2.5 style) and reads the same tags back.
"""

from __future__ import annotations

import json
import re
from typing import Any

from evalpipe.formats.base import Format, merge_system, split_reasoning
from evalpipe.formats.repair import loads_object
from evalpipe.records import ParseError, ParseResult, ToolCall

OPEN, CLOSE = "<tool_call>", "</tool_call>"
BLOCK = re.compile(r"<tool_call>(.*?)(</tool_call>|(?=<tool_call>)|$)", re.S)

PROTOCOL = """# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{tools}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{{"name": <function-name>, "arguments": <args-json-object>}}
</tool_call>
Each result comes back inside <tool_response></tool_response> tags. When you have the final answer, reply with it in plain text, without tags."""


def render_tools(tools: list[dict[str, Any]]) -> str:
    return "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)


def call_from_object(obj: Any, index: int, name_key: str = "name",
                     args_key: str = "arguments") -> tuple[ToolCall | None, ParseError | None]:
    """A ToolCall from a decoded JSON object, or the typed reason it is not one."""
    if not isinstance(obj, dict):
        return None, ParseError("not_object", f"call {index} is {type(obj).__name__}")
    name = obj.get(name_key)
    if not isinstance(name, str) or not name.strip():
        return None, ParseError("missing_name", f"call {index} has no '{name_key}' string")
    args = obj.get(args_key, {})
    if not isinstance(args, dict):
        return None, ParseError("arguments_not_object",
                                f"call {index} '{args_key}' is {type(args).__name__}")
    return ToolCall(name.strip(), args, id=f"call_{index}"), None


class HermesFormat(Format):
    name = "hermes"
    response_open, response_close = "<tool_response>", "</tool_response>"

    def prepare(self, messages, tools, template_supports_tools):
        if not tools:
            return to_text_messages(messages, self), None
        return merge_system(to_text_messages(messages, self),
                            PROTOCOL.format(tools=render_tools(tools))), None

    def tool_result(self, name: str, content: str) -> str:
        return f"{self.response_open}\n{content}\n{self.response_close}"

    def parse(self, text: str, *, lenient: bool = True) -> ParseResult:
        reply, reasoning = split_reasoning(text)
        result = ParseResult(reasoning=reasoning)
        for index, match in enumerate(BLOCK.finditer(reply)):
            body, closed = match.group(1).strip(), match.group(2) == CLOSE
            if not closed and not lenient:
                result.errors.append(ParseError("unclosed_tag", "<tool_call> without </tool_call>",
                                                body[:200]))
                continue
            obj, err, repaired = loads_object(body, lenient=lenient)
            if err:
                result.errors.append(ParseError(err, f"call {index} is not valid JSON", body[:200]))
                continue
            call, error = call_from_object(obj, index)
            if error:
                error.snippet = body[:200]
                result.errors.append(error)
            else:
                result.calls.append(call)
                result.repaired |= repaired or not closed
        result.content = BLOCK.sub("", reply).strip()
        return result


class NativeFormat(HermesFormat):
    """The model's own chat template renders the tools; falls back to the hermes
    system prompt when the template has no tool support."""

    name = "native"

    def prepare(self, messages, tools, template_supports_tools):
        if not template_supports_tools:
            return super().prepare(messages, tools, template_supports_tools)
        wire = []
        for m in messages:
            if m["role"] == "assistant":
                wire.append({"role": "assistant", "content": m["content"]})
            elif m["role"] == "tool":
                wire.append({"role": "tool", "content": m["content"], "name": m.get("name", "")})
            else:
                wire.append(m)
        return wire, (tools or None)


def to_text_messages(messages: list[dict[str, Any]], fmt: HermesFormat) -> list[dict[str, Any]]:
    """Canonical transcript -> plain chat: the assistant's raw text stays as it
    was; tool results become one user message in the format's response tags."""
    wire: list[dict[str, Any]] = []
    for m in messages:
        if m["role"] == "tool":
            block = fmt.tool_result(m.get("name", ""), m["content"])
            if wire and wire[-1].get("_tool_block"):
                wire[-1]["content"] += "\n" + block
            else:
                wire.append({"role": "user", "content": block, "_tool_block": True})
        else:
            wire.append({"role": m["role"], "content": m["content"]})
    for m in wire:
        m.pop("_tool_block", None)
    return wire
