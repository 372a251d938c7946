"""The Qwen3-Coder XML protocol:

    <tool_call>
    <function=add>
    <parameter=a>
    12
    </parameter>
    <parameter=b>
    30
    </parameter>
    </function>
    </tool_call>

Parameter values are plain text, so their types come from the tools' JSON
schemas: integer, number, boolean, null, object and array values are
converted, strings are kept (one leading and one trailing newline removed). The
format learns the schemas from `prepare()` (the engine calls it before every
generation) or from the constructor (`XmlFormat(tools=[...])`, for parsing
without a conversation). A parameter whose tool or name is not in the schemas
is read as a JSON literal when it is one and kept as a string otherwise; a value
that does not convert to its declared type stays a string, so that the tool's
schema check reports invalid_arguments.

Lenient mode accepts, and marks repaired: a missing </parameter>, </function>
or </tool_call>, a <function=...> block without <tool_call>, a repeated
parameter (the last one wins), JSON slips in object/array values, a type the
format cannot convert to (read as a JSON literal), and a hermes-style JSON
object inside <tool_call> or with no tags at all (bare or in a code fence; strict
mode counts each such call as an untagged_call error).
"""

from __future__ import annotations

import json
import math
import re
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
from evalpipe.formats.calls import bare_json_calls, calls_from_text, tidy
from evalpipe.formats.repair import MAX_INT_DIGITS, loads_value
from evalpipe.records import ParseError, ParseResult, ToolCall

OPEN, CLOSE, BLOCK = TOOL_CALL_OPEN, TOOL_CALL_CLOSE, TOOL_CALL_BLOCK
FUNCTION = re.compile(r"<function\s*=\s*([^>\n]*)>(.*?)(</function>|(?=<function\s*=)|$)",
                      re.DOTALL)
PARAMETER = re.compile(
    r"<parameter\s*=\s*([^>\n]*)>(.*?)(</parameter>|(?=<parameter\s*=)|(?=</function>)|$)",
    re.DOTALL)
# stray <tool_call> tags are cut by calls.tidy; these are xml's own
STRAY_TAG = re.compile(r"<function\s*=[^>\n]*>|</function>|</parameter>|<parameter\s*=[^>\n]*>")
_INT = re.compile(r"-?\d+")  # "10.0" is no integer: the same rule as the tool's schema check
# Function and parameter names are identifiers (dots and dashes allowed: "math.sqrt");
# anything else, such as tag debris ("null.5</function"), is a malformed call.
IDENTIFIER = re.compile(r"[^\W\d][\w.\-]*")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|-?\.\d+(?:[eE][+-]?\d+)?")
KNOWN_TYPES = ("string", "integer", "number", "boolean", "null", "object", "array")

PROTOCOL = """# Tools

You have access to the following functions:

<tools>
{tools}
</tools>

If you choose to call a function ONLY reply in the following format with NO suffix:

<tool_call>
<function=example_function_name>
<parameter=example_parameter_1>
value_1
</parameter>
<parameter=example_parameter_2>
This is the value for the second parameter
that can span
multiple lines
</parameter>
</function>
</tool_call>

<IMPORTANT>
Reminder:
- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags
- Required parameters MUST be specified
- You may provide optional reasoning for your function call in natural language BEFORE the function call, but NOT after
- Each result comes back inside <tool_response></tool_response> tags
- If there is no function call available, answer the question like normal with your current knowledge and do not tell the user about function calls
</IMPORTANT>"""


def render_tools(tools: list[dict[str, Any]]) -> str:
    out = []
    for t in tools:
        fn = t.get("function", t)
        lines = ["<function>", f"<name>{fn.get('name', '')}</name>"]
        if fn.get("description"):
            lines.append(f"<description>{fn['description'].strip()}</description>")
        lines.append("<parameters>")
        params = fn.get("parameters") or {}
        for pname, prop in (params.get("properties") or {}).items():
            lines += ["<parameter>", f"<name>{pname}</name>"]
            if isinstance(prop, dict):
                if "type" in prop:
                    lines.append(f"<type>{json.dumps(prop['type']).strip(chr(34))}</type>")
                if prop.get("description"):
                    lines.append(f"<description>{prop['description']}</description>")
                extra = {k: v for k, v in prop.items() if k not in ("type", "description")}
                if extra:
                    lines.append(json.dumps(extra, ensure_ascii=False))
            lines.append("</parameter>")
        if params.get("required"):
            lines.append(f"<required>{json.dumps(params['required'])}</required>")
        lines += ["</parameters>", "</function>"]
        out.append("\n".join(lines))
    return "\n".join(out)


def _properties(tools: list[dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    props: dict[str, dict[str, Any]] = {}
    for t in tools or ():
        fn = t.get("function", t) if isinstance(t, dict) else {}
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            params = fn.get("parameters") or {}
            props[fn["name"]] = dict(params.get("properties") or {}) if isinstance(params,
                                                                                   dict) else {}
    return props


class XmlFormat(PromptProtocolFormat):
    name = "xml"

    def __init__(self, tools: list[dict[str, Any]] | None = None):
        super().__init__(tools)
        self._props = _properties(tools)

    def prepare(self, messages, tools, template_supports_tools):
        self._props = _properties(tools)  # parameter types, for typing parsed values
        return super().prepare(messages, tools, template_supports_tools)

    def protocol(self, tools):
        return PROTOCOL.format(tools=render_tools(tools))

    def tool_result(self, name: str, content: str) -> str:
        return f"<tool_response>\n{content}\n</tool_response>"

    def render_call(self, call: ToolCall) -> str:
        lines = [OPEN, f"<function={call.name}>"]
        for key, value in call.arguments.items():
            text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            lines += [f"<parameter={key}>", text, "</parameter>"]
        lines += ["</function>", CLOSE]
        return "\n".join(lines)

    def _parse(self, text: str, *, lenient: bool = True) -> ParseResult:
        result, reply = start_result(text)
        if reply is None:
            return result
        reply = cut_imitation(reply, result)
        blocks = BLOCK.search(reply) is not None
        for body, closed, where in tool_call_blocks(reply, result, lenient):
            self._read_block(body, where, lenient, result, repaired=not closed)
        if blocks:
            content = BLOCK.sub("", reply)
        elif FUNCTION.search(reply):  # <function=...> without the <tool_call> wrapper
            for index, match in enumerate(FUNCTION.finditer(reply)):
                where = f"untagged call {index}"
                if not lenient:
                    result.errors.append(error("untagged_call", f"{where}: <function=...> "
                                               f"without {OPEN}", match.group(0)))
                    continue
                self._read_function(match, where, lenient, result, repaired=True)
            content = FUNCTION.sub("", reply)
        else:  # no XML at all: a bare JSON call, as the Qwen2.5-Coder models write one
            content = bare_json_calls(reply, result, lenient, f"{OPEN}<function=...> tags")
        result.content = tidy(STRAY_TAG.sub("", content))
        for i, call in enumerate(result.calls):
            call.id = f"call_{i}"
        return result

    def _read_block(self, body: str, where: str, lenient: bool, result: ParseResult,
                    repaired: bool) -> None:
        functions = list(FUNCTION.finditer(body))
        if not functions:
            if not body.strip():
                result.errors.append(error("empty", f"{where}: nothing inside {OPEN}"))
            elif lenient and body.strip()[:1] in "{[":  # a hermes-style JSON call
                calls, errors, _ = calls_from_text(body, where, lenient=True, allow_list=True)
                result.calls += calls
                result.errors += errors
                result.repaired |= bool(calls)
            else:
                result.errors.append(error("missing_name", f"{where}: no <function=NAME> inside "
                                           f"{OPEN}", body))
            return
        for i, match in enumerate(functions):
            label = where if len(functions) == 1 else f"{where} function {i}"
            self._read_function(match, label, lenient, result, repaired)

    def _read_function(self, match: re.Match, where: str, lenient: bool, result: ParseResult,
                       repaired: bool) -> None:
        name = match.group(1).strip().strip("\"'").strip()
        body, closed = match.group(2), match.group(3) == "</function>"
        if not name:
            result.errors.append(error("missing_name", f"{where}: <function=> without a name",
                                       match.group(0)))
            return
        if not IDENTIFIER.fullmatch(name):
            result.errors.append(error("bad_name", f"{where}: function name {name[:40]!r} is "
                                       "not an identifier", match.group(0)))
            return
        if not closed:
            if not lenient:
                result.errors.append(error("unclosed_tag", f"{where}: <function={name}> without "
                                           "</function>", match.group(0)))
                return
            repaired = True
        props = self._props.get(name)
        arguments: dict[str, Any] = {}
        for param in PARAMETER.finditer(body):
            key = param.group(1).strip().strip("\"'").strip()
            if not key:
                result.errors.append(error("missing_name", f"{where}: <parameter=> without a name",
                                           param.group(0)))
                return
            if not IDENTIFIER.fullmatch(key):
                result.errors.append(error("bad_name", f"{where}: parameter name {key[:40]!r} "
                                           "is not an identifier", param.group(0)))
                return
            if param.group(3) != "</parameter>":
                if not lenient:
                    result.errors.append(error("unclosed_tag", f"{where}: <parameter={key}> "
                                               "without </parameter>", param.group(0)))
                    return
                repaired = True
            if key in arguments:
                if not lenient:
                    result.errors.append(error("duplicate_parameter", f"{where}: parameter "
                                               f"{key!r} given twice", param.group(0)))
                    return
                repaired = True
            prop = props.get(key) if props is not None else None
            value, problem, fixed = convert(param.group(2), prop, lenient)
            if problem:
                problem.message = f"{where} parameter {key!r}: {problem.message}"
                result.errors.append(problem)
                return
            arguments[key] = value
            repaired |= fixed
        result.calls.append(ToolCall(name, arguments))
        result.repaired |= repaired


def convert(raw: str, prop: Any, lenient: bool) -> tuple[Any, ParseError | None, bool]:
    """A parameter's text as the type its schema declares: (value, error, repaired?)."""
    if not isinstance(prop, dict) or "type" not in prop:
        return _guess(raw), None, False
    types = prop["type"] if isinstance(prop["type"], list) else [prop["type"]]
    known = [t for t in types if t in KNOWN_TYPES]
    if not known:
        if not lenient:
            return None, error("unknown_parameter_type", f"schema type {prop['type']!r} is not "
                               "one of " + ", ".join(KNOWN_TYPES), raw), False
        return _guess(raw), None, True
    text = raw.strip()
    for kind in known:
        if kind == "string":
            continue  # tried last: every text is a string
        ok, value, fixed = _as_type(text, kind, lenient)
        if ok:
            return value, None, fixed
    return _string(raw), None, False


def _string(raw: str) -> str:
    raw = raw.removeprefix("\n")
    raw = raw.removesuffix("\n")
    return raw


def _as_type(text: str, kind: str, lenient: bool) -> tuple[bool, Any, bool]:
    if kind == "integer":
        if _INT.fullmatch(text) and len(text) <= MAX_INT_DIGITS:
            return True, int(text.split(".")[0]), False
        return False, None, False
    if kind == "number":
        if _NUMBER.fullmatch(text) and len(text) <= MAX_INT_DIGITS:
            if re.fullmatch(r"-?\d+", text):
                return True, int(text), False
            value = float(text)
            if math.isfinite(value):
                return True, value, False
        return False, None, False
    if kind == "boolean":
        if text.lower() in ("true", "false"):
            return True, text.lower() == "true", False
        return False, None, False
    if kind == "null":
        if text.lower() in ("null", "none"):
            return True, None, False
        return False, None, False
    value, problem, fixed = loads_value(text, lenient=lenient)
    wanted = dict if kind == "object" else list
    if problem is None and isinstance(value, wanted):
        return True, value, fixed
    return False, None, False


def _guess(raw: str) -> Any:
    """An untyped parameter: a JSON literal when it is one, else the text."""
    value, problem, _ = loads_value(raw, lenient=False)
    return _string(raw) if problem else value


__all__ = ["XmlFormat", "convert"]
