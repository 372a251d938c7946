"""Decoded JSON -> ToolCall, shared by the JSON-bodied formats (hermes, json) and by
xml for JSON calls written without its tags.

Each protocol has one key for the function name and one for the arguments.
Strict mode accepts only those; lenient mode also takes the keys other
protocols use (name/tool/function, arguments/parameters/args/...), an
OpenAI-style {"function": {...}} wrapper and arguments encoded as a JSON
string, and marks the result repaired.
"""

from __future__ import annotations

import re
from typing import Any

from evalpipe.formats.base import TOOL_CALL_TAG, arguments_from, error
from evalpipe.formats.repair import Span, json_spans, loads_value
from evalpipe.records import ParseError, ParseResult, ToolCall

NAME_KEYS = ("name", "tool", "function", "tool_name", "function_name")
ARG_KEYS = ("arguments", "parameters", "args", "params", "input")

_NAME_KEY = re.compile(r"""["']?(?:name|tool|function|tool_name|function_name)["']?\s*:""")
_ARG_KEY = re.compile(r"""["']?(?:arguments|parameters|args|params|input)["']?\s*:""")
_EMPTY_FENCE = re.compile(r"```[A-Za-z]*\s*```")


def looks_like_call(text: str) -> bool:
    """Does a bracketed region read as a call attempt (a name key and an
    arguments key), rather than JSON that is part of an answer?"""
    return bool(_NAME_KEY.search(text) and _ARG_KEY.search(text))


def call_from_object(obj: Any, where: str, *, lenient: bool, name_key: str = "name",
                     args_key: str = "arguments"
                     ) -> tuple[ToolCall | None, ParseError | None, bool]:
    """(call, error, repaired?) from one decoded JSON value."""
    if not isinstance(obj, dict):
        return None, error("not_object", f"{where} is {type(obj).__name__}, not an object"), False
    repaired = False
    if (lenient and name_key not in obj and isinstance(obj.get("function"), dict)
            and name_key != "function"):
        obj, repaired = obj["function"], True  # {"type": "function", "function": {...}}
    name = obj.get(name_key)
    if name_key not in obj:
        other = next((k for k in NAME_KEYS if k != name_key and isinstance(obj.get(k), str)), None)
        if other is None:
            return None, error("missing_name", f"{where} has no {name_key!r}"), False
        if not lenient:
            return None, error("missing_name", f"{where} names the tool under {other!r}, "
                               f"not {name_key!r}"), False
        name, repaired = obj[other], True
    if not isinstance(name, str) or not name.strip():
        return None, error("missing_name", f"{where} {name_key!r} is not a non-empty string"), False
    if args_key in obj:
        raw_args = obj[args_key]
    else:
        other = next((k for k in ARG_KEYS if k != args_key and k in obj), None)
        if other is None:
            raw_args = {}
        elif not lenient:
            return None, error("missing_arguments", f"{where} gives its arguments under "
                               f"{other!r}, not {args_key!r}"), False
        else:
            raw_args, repaired = obj[other], True
    args, err, fixed = arguments_from(raw_args, lenient, where)
    if args is None:
        return None, err, False
    return ToolCall(name.strip(), args), None, repaired or fixed


def calls_from_text(body: str, where: str, *, lenient: bool, allow_list: bool,
                    name_key: str = "name", args_key: str = "arguments"
                    ) -> tuple[list[ToolCall], list[ParseError], bool]:
    """Calls from one call body (the inside of a tag, or a bracketed region).

    A list of calls is accepted when the protocol allows it (or, repaired, in
    lenient mode); in lenient mode a body that is not JSON as a whole is searched
    for call-like objects (text around the call, code fences, two objects)."""
    value, kind, repaired = loads_value(body, lenient=lenient)
    if kind == "not_json" and lenient:
        spans = [s for s in json_spans(body) if looks_like_call(s.text(body))]
        if spans and spans[0].text(body).strip() != body.strip():
            calls, errors, fixed = [], [], True
            for s in spans:
                c, e, f = calls_from_text(s.text(body), where, lenient=True, allow_list=True,
                                          name_key=name_key, args_key=args_key)
                calls += c
                errors += e
                fixed |= f
            return calls, errors, fixed
    if kind:
        return [], [error(kind, _MESSAGES.get(kind, kind).format(where=where), body)], False
    items = [value]
    if isinstance(value, list):
        if not value:
            return [], [error("empty", f"{where} is an empty list", body)], False
        if not allow_list and not lenient:
            return [], [error("not_object", f"{where} is a list; one object per call", body)], False
        items, repaired = value, repaired or not allow_list
    calls, errors = [], []
    for i, item in enumerate(items):
        label = where if len(items) == 1 else f"{where} item {i}"
        call, err, fixed = call_from_object(item, label, lenient=lenient,
                                            name_key=name_key, args_key=args_key)
        if call is None:
            if err is not None:
                err.snippet = body[:200]
                errors.append(err)
        else:
            calls.append(call)
            repaired |= fixed
    return calls, errors, repaired


_MESSAGES = {
    "not_json": "{where} is not valid JSON",
    "empty": "{where} is empty",
    "too_long": "{where} is too long to parse",
    "too_deep": "{where} nests brackets too deeply",
    "bad_number": "{where} holds a number out of range",
    "duplicate_key": "{where} gives a key twice",
}


def bare_json_calls(reply: str, result: ParseResult, lenient: bool, wrapper: str) -> str:
    """Bare {"name": ..., "arguments": ...} objects (or lists of them) written without
    the protocol's `wrapper`, alone, in a code fence or several in a row, as the
    Qwen2.5-Coder models write them: calls (repaired) in lenient mode; in strict mode
    one untagged_call error per call written, as many as the lenient parse counts.
    Returns the reply without them."""
    spans = [s for s in json_spans(reply) if looks_like_call(s.text(reply))]
    for index, span in enumerate(spans):
        where, body = f"untagged call {index}", span.text(reply)
        if not lenient:
            result.errors += [error("untagged_call", f"{where}: a call without {wrapper}", body)
                              for _ in range(_calls_written(body))]
            continue
        calls, errors, _ = calls_from_text(body, where, lenient=True, allow_list=True)
        result.calls += calls
        result.errors += errors
        result.repaired |= bool(calls)
    return remove_spans(reply, spans)


def _calls_written(body: str) -> int:
    """How many calls a bare JSON region holds: the objects of a list, else one."""
    value, kind, _ = loads_value(body, lenient=True)
    if kind is None and isinstance(value, list):
        return max(1, sum(isinstance(v, dict) for v in value))
    return 1


def remove_spans(text: str, spans: list[Span]) -> str:
    out, last = [], 0
    for s in sorted(spans, key=lambda s: s.start):
        out.append(text[last:s.start])
        last = max(last, s.end)
    out.append(text[last:])
    return "".join(out)


def tidy(text: str) -> str:
    """Content once calls are cut out: no stray <tool_call> tags, no empty code
    fences, no blank runs."""
    text = _EMPTY_FENCE.sub("", TOOL_CALL_TAG.sub("", text))
    return re.sub(r"\n{3,}", "\n\n", text).strip()
