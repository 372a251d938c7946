"""A plain JSON protocol written into the system prompt.

The model calls a tool with `{"tool": NAME, "parameters": {...}}` (a JSON list
of such objects for parallel calls), anywhere in its reply: alone, inside a
```json fence or with text around it. Each result comes back as a user message
holding `{"tool": NAME, "response": RESULT}`.

A bracketed region of the reply counts as a call attempt when it has a "tool"
key, or a name key and an arguments key (other protocols' spelling); other JSON
in a reply is part of the answer. Lenient mode repairs JSON slips, accepts
name/arguments spellings and arguments given as a JSON string, and closes a
call the reply ended inside of.
"""

from __future__ import annotations

import json
import re
from typing import Any

from evalpipe.formats.base import (
    PromptProtocolFormat,
    cut_imitation,
    error,
    start_result,
)
from evalpipe.formats.calls import ARG_KEYS, calls_from_text, looks_like_call, remove_spans, tidy
from evalpipe.formats.repair import json_spans, loads_value
from evalpipe.records import ParseResult, ToolCall

PROTOCOL = """# Tools

You can call these tools (one JSON object per tool: name, description, JSON schema of the parameters):
{tools}

To call a tool, reply with a JSON object and nothing else:
{{"tool": "<tool name>", "parameters": {{<argument name>: <value>, ...}}}}
To call several tools at once, reply with a JSON list of such objects.
Each result comes back as {{"tool": "<tool name>", "response": <result>}}.
When you have the final answer, reply with it in plain text, without JSON."""

_TOOL_KEY = re.compile(r"""["']?tool["']?\s*:""")


def render_tools(tools: list[dict[str, Any]]) -> str:
    lines = []
    for t in tools:
        fn = t.get("function", t)
        lines.append(json.dumps({"name": fn.get("name"), "description": fn.get("description", ""),
                                 "parameters": fn.get("parameters", {})}, ensure_ascii=False))
    return "\n".join(lines)


class JsonFormat(PromptProtocolFormat):
    name = "json"

    def protocol(self, tools):
        return PROTOCOL.format(tools=render_tools(tools))

    def tool_result(self, name: str, content: str) -> str:
        value, kind, _ = loads_value(content, lenient=False)
        return json.dumps({"tool": name, "response": content if kind else value},
                          ensure_ascii=False)

    def render_call(self, call: ToolCall) -> str:
        return json.dumps({"tool": call.name, "parameters": call.arguments}, ensure_ascii=False)

    def render_calls(self, calls: list[ToolCall]) -> str:
        if len(calls) == 1:
            return self.render_call(calls[0])
        return json.dumps([{"tool": c.name, "parameters": c.arguments} for c in calls],
                          ensure_ascii=False)

    def _parse(self, text: str, *, lenient: bool = True) -> ParseResult:
        result, reply = start_result(text)
        if reply is None:
            return result
        reply = cut_imitation(reply, result)
        taken = []
        end = len(reply)
        for index, span in enumerate(json_spans(reply)):
            body = span.text(reply)
            if not (_TOOL_KEY.search(body) or looks_like_call(body)):
                continue
            where = f"call {index}"
            if _imitates_response(body):
                result.errors.append(error("imitated_turn", f"{where} imitates a tool response; "
                                           "the rest is ignored", body))
                end = span.start
                break
            taken.append(span)
            if not span.closed and not lenient:
                result.errors.append(error("not_json", f"{where}: the reply ends inside it", body))
                continue
            calls, errors, repaired = calls_from_text(body, where, lenient=lenient,
                                                      allow_list=True, name_key="tool",
                                                      args_key="parameters")
            result.calls += calls
            result.errors += errors
            result.repaired |= bool(calls) and (repaired or not span.closed)
        result.content = tidy(remove_spans(reply[:end], [s for s in taken if s.start < end]))
        for i, call in enumerate(result.calls):
            call.id = f"call_{i}"
        return result


def _imitates_response(body: str) -> bool:
    """{"tool": ..., "response": ...} without arguments: the model wrote a result."""
    if '"response"' not in body and "'response'" not in body:
        return False
    value, kind, _ = loads_value(body, lenient=True)
    items = value if isinstance(value, list) else [value]
    return kind is None and any(isinstance(v, dict) and "response" in v
                                and not any(k in v for k in ARG_KEYS) for v in items)
