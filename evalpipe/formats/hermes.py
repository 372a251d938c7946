"""The hermes protocol: <tool_call>{"name": ..., "arguments": {...}}</tool_call>.

`HermesFormat` writes the protocol into the system prompt, for chat templates
without tool support; `NativeFormat` hands the tools to the model's own chat
template (Qwen2.5 style) and reads the same tags back.

Lenient mode accepts, and marks repaired: a missing </tool_call>, JSON slips
(see repair.py), arguments under another key or as a JSON string, a list of
calls or text around the object inside one tag, and a bare
{"name": ..., "arguments": ...} object written without any tags.
"""

from __future__ import annotations

import json
from typing import Any

from evalpipe.formats.base import (
    TOOL_CALL_BLOCK,
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    PromptProtocolFormat,
    cut_imitation,
    error,
    start_result,
    tool_call_blocks,
)
from evalpipe.formats.calls import calls_from_text, looks_like_call, remove_spans, tidy
from evalpipe.formats.repair import json_spans
from evalpipe.records import ParseResult, ToolCall

OPEN, CLOSE, BLOCK = TOOL_CALL_OPEN, TOOL_CALL_CLOSE, TOOL_CALL_BLOCK

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


class HermesFormat(PromptProtocolFormat):
    name = "hermes"
    response_open, response_close = "<tool_response>", "</tool_response>"

    def protocol(self, tools):
        return PROTOCOL.format(tools=render_tools(tools))

    def tool_result(self, name: str, content: str) -> str:
        return f"{self.response_open}\n{content}\n{self.response_close}"

    def render_call(self, call: ToolCall) -> str:
        body = json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)
        return f"{OPEN}\n{body}\n{CLOSE}"

    def _parse(self, text: str, *, lenient: bool = True) -> ParseResult:
        result, reply = start_result(text)
        if reply is None:
            return result
        reply = cut_imitation(reply, result)
        blocks = BLOCK.search(reply) is not None
        for body, closed, where in tool_call_blocks(reply, result, lenient):
            if not body.strip():
                result.errors.append(error("empty", f"{where}: nothing inside {OPEN}"))
                continue
            calls, errors, repaired = calls_from_text(body, where, lenient=lenient,
                                                      allow_list=False)
            result.calls += calls
            result.errors += errors
            result.repaired |= bool(calls) and (repaired or not closed)
        if blocks:
            content = BLOCK.sub("", reply)
        else:
            content = self._untagged(reply, result, lenient)
        result.content = tidy(content)  # stray <tool_call> tags go too
        for i, call in enumerate(result.calls):
            call.id = f"call_{i}"
        return result

    @staticmethod
    def _untagged(reply: str, result: ParseResult, lenient: bool) -> str:
        """Bare {"name": ..., "arguments": ...} objects written without tags: an
        error in strict mode, calls (repaired) in lenient mode. Returns the
        reply without them."""
        spans = [s for s in json_spans(reply) if looks_like_call(s.text(reply))]
        for index, span in enumerate(spans):
            where = f"untagged call {index}"
            if not lenient:
                result.errors.append(error("untagged_call", f"{where}: a call without "
                                           f"{OPEN} tags", span.text(reply)))
                continue
            calls, errors, _ = calls_from_text(span.text(reply), where, lenient=True,
                                               allow_list=True)
            result.calls += calls
            result.errors += errors
            result.repaired |= bool(calls)
        return remove_spans(reply, spans)


class NativeFormat(HermesFormat):
    """The model's own chat template renders the tools; falls back to the hermes
    system prompt when the template has no tool support. Replies are read as
    hermes (the Qwen2.5 convention)."""

    name = "native"

    def prepare(self, messages, tools, template_supports_tools):
        if not template_supports_tools:
            return super().prepare(messages, tools, template_supports_tools)
        wire = []
        for m in messages:
            if m["role"] == "assistant":  # the raw reply already holds its <tool_call> tags
                wire.append({"role": "assistant", "content": m.get("content") or ""})
            elif m["role"] == "tool":
                wire.append({"role": "tool", "content": m.get("content") or "",
                             "name": m.get("name", "")})
            else:
                wire.append({"role": m["role"], "content": m.get("content") or ""})
        return wire, (tools or None)
