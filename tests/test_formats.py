"""Tool-call formats: round trips, strict vs lenient, prepare(), typed errors."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalpipe.formats import (
    ERROR_KINDS,
    FORMATS,
    get_format,
    split_reasoning,
)
from evalpipe.formats.repair import loads_value, repair_json
from evalpipe.formats.xml import XmlFormat
from evalpipe.records import ToolCall
from evalpipe.tools import build_toolset
from evalpipe.tools.registry import Tool

TEXT_FORMATS = ["native", "hermes", "json", "xml"]

ECHO = Tool("lookup", "Look up a record.", {
    "type": "object",
    "properties": {"query": {"type": "string"}, "limit": {"type": "integer"},
                   "score": {"type": "number"}, "exact": {"type": "boolean"},
                   "filters": {"type": "object"}, "tags": {"type": "array"},
                   "note": {"type": ["string", "null"]}},
    "required": ["query"], "additionalProperties": False}, lambda **kw: kw)
SCHEMAS = build_toolset("math").with_tools(ECHO).schemas()

GOLD = [
    ToolCall("add", {"a": 12, "b": 30}),
    ToolCall("divide", {"a": 7.5, "b": -2.25}),
    ToolCall("fib", {"n": 20}),
    ToolCall("lookup", {"query": "Hà Nội, \"quoted\" and 'single'", "limit": 3, "score": 0.5,
                        "exact": True, "filters": {"year": 2024, "tags": ["a", "b"]},
                        "tags": [1, "x", None], "note": None}),
    ToolCall("lookup", {"query": "line one\nline two", "exact": False, "note": "12"}),
]


def fmt_for(name: str):
    fmt = get_format(name)
    fmt.prepare([{"role": "user", "content": "q"}], SCHEMAS, False)
    return fmt


def same(calls, gold):
    return [(c.name, c.arguments) for c in calls] == [(g.name, g.arguments) for g in gold]


def test_registry_has_every_format():
    assert set(FORMATS) == {"native", "hermes", "json", "xml", "openai"}
    call = ToolCall("add", {"a": 1, "b": 2}, id="c1")
    for name in FORMATS:
        fmt = get_format(name)
        assert fmt.name == name
        if name in ("hermes", "json", "xml"):  # they read calls out of reply text
            assert same(fmt.parse(fmt.render_calls([call])).calls, [call])


def test_unknown_format_is_an_input_error():
    from evalpipe.errors import InputError

    with pytest.raises(InputError):
        get_format("yaml")


# --- round trips ---------------------------------------------------------------------


@pytest.mark.parametrize("name", TEXT_FORMATS)
@pytest.mark.parametrize("gold", GOLD, ids=lambda c: c.name)
@pytest.mark.parametrize("lenient", [False, True])
def test_round_trip_one_call(name, gold, lenient):
    fmt = fmt_for(name)
    result = fmt.parse(fmt.render_call(gold), lenient=lenient)
    assert result.errors == []
    assert same(result.calls, [gold])
    assert not result.repaired
    assert result.content == ""


@pytest.mark.parametrize("name", TEXT_FORMATS)
@pytest.mark.parametrize("lenient", [False, True])
def test_round_trip_parallel_with_think_and_text(name, lenient):
    fmt = fmt_for(name)
    reply = ("<think>I need two sums.\nThen a fib.</think>Let me compute that.\n"
             + fmt.render_calls(GOLD) + "\nI will report back.")
    result = fmt.parse(reply, lenient=lenient)
    assert result.errors == []
    assert same(result.calls, GOLD)
    assert result.reasoning == "I need two sums.\nThen a fib."
    assert "Let me compute that." in result.content
    assert "I will report back." in result.content
    assert "<think>" not in result.content and "<tool_call>" not in result.content
    assert [c.id for c in result.calls] == [f"call_{i}" for i in range(len(GOLD))]


@pytest.mark.parametrize("name", ["hermes", "json"])
@settings(max_examples=150, deadline=None)
@given(args=st.dictionaries(
    st.text(st.characters(blacklist_characters="<", blacklist_categories=("Cs",)), min_size=1,
            max_size=8),
    st.recursive(st.none() | st.booleans() | st.integers(-10**12, 10**12)
                 | st.floats(allow_nan=False, allow_infinity=False)
                 | st.text(st.characters(blacklist_characters="<",
                                         blacklist_categories=("Cs",)), max_size=20),
                 lambda inner: st.lists(inner, max_size=3)
                 | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                 max_leaves=8),
    max_size=4))
def test_round_trip_any_json_arguments(name, args):
    fmt = fmt_for(name)
    call = ToolCall("anything", args)
    for lenient in (False, True):
        result = fmt.parse("Sure: " + fmt.render_call(call), lenient=lenient)
        assert result.errors == []
        assert same(result.calls, [call])


def test_openai_round_trip_through_prepare():
    fmt = get_format("openai")
    messages = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": f"call_0_{i}", "type": "function",
             "function": {"name": g.name, "arguments": g.arguments}} for i, g in enumerate(GOLD)]},
        *[{"role": "tool", "tool_call_id": f"call_0_{i}", "name": g.name, "content": "1"}
          for i, g in enumerate(GOLD)],
        {"role": "user", "content": "fix it", "format_feedback": True},
    ]
    wire, tools = fmt.prepare(messages, SCHEMAS, False)
    assert tools == SCHEMAS
    assistant = wire[2]
    assert assistant["content"] == ""
    back = [ToolCall(c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in assistant["tool_calls"]]
    assert same(back, GOLD)
    assert all(isinstance(c["function"]["arguments"], str) for c in assistant["tool_calls"])
    assert [m["tool_call_id"] for m in wire[3:3 + len(GOLD)]] == [f"call_0_{i}"
                                                                   for i in range(len(GOLD))]
    assert all(set(m) == {"role", "tool_call_id", "content"} for m in wire[3:3 + len(GOLD)])
    assert wire[-1] == {"role": "user", "content": "fix it"}
    # the documented rendering is the API's own shape
    rendered = json.loads(fmt.render_call(GOLD[0]))
    assert json.loads(rendered["function"]["arguments"]) == GOLD[0].arguments


def test_openai_parse_never_returns_calls():
    fmt = get_format("openai")
    result = fmt.parse('<think>r</think><tool_call>{"name": "add", "arguments": {}}</tool_call>')
    assert result.calls == [] and result.errors == []
    assert result.reasoning == "r"


# --- prepare ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["hermes", "json", "xml"])
def test_prepare_writes_protocol_and_tool_results_as_user_messages(name):
    fmt = get_format(name)
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 12 + 30?"},
        {"role": "assistant", "content": "RAW REPLY", "tool_calls": [
            {"id": "call_0_0", "type": "function",
             "function": {"name": "add", "arguments": {"a": 12, "b": 30}}}]},
        {"role": "tool", "tool_call_id": "call_0_0", "name": "add", "content": "42"},
        {"role": "tool", "tool_call_id": "call_0_1", "name": "add", "content": "{\"x\": 1}"},
    ]
    wire, tools = fmt.prepare(messages, SCHEMAS, True)
    assert tools is None
    assert wire[0]["role"] == "system" and wire[0]["content"].startswith("Be brief.")
    assert "fib" in wire[0]["content"]
    assert wire[2] == {"role": "assistant", "content": "RAW REPLY"}
    assert [m["role"] for m in wire] == ["system", "user", "assistant", "user"]
    assert "42" in wire[3]["content"]
    if name == "json":
        lines = wire[3]["content"].splitlines()
        assert json.loads(lines[0]) == {"tool": "add", "response": 42}
        assert json.loads(lines[1]) == {"tool": "add", "response": {"x": 1}}
    else:
        assert wire[3]["content"].count("<tool_response>") == 2


def test_native_uses_template_tools_when_supported():
    fmt = get_format("native")
    messages = [{"role": "user", "content": "q", "format_feedback": True},
                {"role": "tool", "tool_call_id": "c", "name": "add", "content": "3"}]
    wire, tools = fmt.prepare(messages, SCHEMAS, True)
    assert tools == SCHEMAS
    assert wire == [{"role": "user", "content": "q"},
                    {"role": "tool", "content": "3", "name": "add"}]
    wire, tools = fmt.prepare(messages, SCHEMAS, False)  # falls back to hermes
    assert tools is None and "<tools>" in wire[0]["content"]


def test_prepare_without_tools_adds_no_protocol():
    for name in ["hermes", "json", "xml"]:
        wire, tools = get_format(name).prepare([{"role": "user", "content": "q"}], [], False)
        assert wire == [{"role": "user", "content": "q"}] and tools is None


# --- strict vs lenient ---------------------------------------------------------------

SLIPS = [
    # (format, reply, strict error kind, lenient calls)
    ("hermes", '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2,}}</tool_call>',
     "not_json", [("add", {"a": 1, "b": 2})]),
    ("hermes", "<tool_call>{'name': 'add', 'arguments': {'a': 1, 'b': True}}</tool_call>",
     "not_json", [("add", {"a": 1, "b": True})]),
    ("hermes", '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}',
     "unclosed_tag", [("add", {"a": 1, "b": 2})]),
    ("hermes", '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}</tool_call>',
     "not_json", [("add", {"a": 1, "b": 2})]),
    ("hermes", '<tool_call>{"name": "add", "arguments": "{\\"a\\": 1}"}</tool_call>',
     "arguments_not_object", [("add", {"a": 1})]),
    ("hermes", 'Calling {"name": "add", "arguments": {"a": 1, "b": 2}} now.',
     "untagged_call", [("add", {"a": 1, "b": 2})]),
    ("hermes", '{"name": "add", "arguments": {"a": 1}}</tool_call>',
     "untagged_call", [("add", {"a": 1})]),
    ("hermes", '<tool_call>{"name": "add", "parameters": {"a": 1}}</tool_call>',
     "missing_arguments", [("add", {"a": 1})]),
    ("hermes", ('<tool_call>[{"name": "add", "arguments": {"a": 1}}, '
     '{"name": "fib", "arguments": {"n": 2}}]</tool_call>'),
     "not_object", [("add", {"a": 1}), ("fib", {"n": 2})]),
    ("hermes", '<tool_call>\n```json\n{"name": "add", "arguments": {"a": 1}}\n```\n</tool_call>',
     "not_json", [("add", {"a": 1})]),
    ("hermes", '<tool_call>{"name": "add", "arguments": {"a": 1},\n "note": "x\ny"}</tool_call>',
     "not_json", [("add", {"a": 1})]),
    ("json", '{"tool": "add", "parameters": {"a": 1, "b": 2}',
     "not_json", [("add", {"a": 1, "b": 2})]),
    ("json", "{'tool': 'add', 'parameters': {'a': None, 'b': False,}}",
     "not_json", [("add", {"a": None, "b": False})]),
    ("json", '{"name": "add", "arguments": {"a": 1}}', "missing_name", [("add", {"a": 1})]),
    ("json", '{"tool": "add", "parameters": "{\\"a\\": 1}"}', "arguments_not_object",
     [("add", {"a": 1})]),
    ("json", "{tool: 'add', parameters: {a: 1}}", "not_json", [("add", {"a": 1})]),
    ("xml", "<function=add>\n<parameter=a>\n12\n</parameter>\n</function>",
     "untagged_call", [("add", {"a": 12})]),
    ("xml", "<tool_call>\n<function=add>\n<parameter=a>\n12\n<parameter=b>\n3\n</function>",
     "unclosed_tag", [("add", {"a": 12, "b": 3})]),
    ("xml", "<tool_call><function=add><parameter=a>1</parameter></function>",
     "unclosed_tag", [("add", {"a": 1})]),
    ("xml", ("<tool_call><function=add><parameter=a>1</parameter><parameter=a>2</parameter>"
     "</function></tool_call>"), "duplicate_parameter", [("add", {"a": 2})]),
    ("xml", '<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>',
     "missing_name", [("add", {"a": 1})]),
    ("xml", ("<tool_call><function=lookup><parameter=filters>{'a': 1,}</parameter>"
     "</function></tool_call>"), None, [("lookup", {"filters": {"a": 1}})]),
]


@pytest.mark.parametrize("name,reply,strict_kind,lenient_calls", SLIPS)
def test_lenient_repairs_what_strict_rejects(name, reply, strict_kind, lenient_calls):
    fmt = fmt_for(name)
    strict = fmt.parse(reply, lenient=False)
    lenient = fmt.parse(reply, lenient=True)
    if strict_kind is None:  # xml: a slip inside a typed value stays a string when strict
        assert strict.errors == [] and strict.calls[0].arguments != lenient_calls[0][1]
    else:
        assert strict.calls == []
        assert [e.kind for e in strict.errors] == [strict_kind] * len(strict.errors)
        assert strict.errors and not strict.repaired
    assert lenient.errors == []
    assert [(c.name, c.arguments) for c in lenient.calls] == lenient_calls
    assert lenient.repaired
    assert "<tool_call>" not in lenient.content and "</tool_call>" not in lenient.content


BROKEN = [
    ("hermes", "<tool_call></tool_call>", "empty"),
    ("hermes", '<tool_call>{"arguments": {}}</tool_call>', "missing_name"),
    ("hermes", '<tool_call>{"name": "  ", "arguments": {}}</tool_call>', "missing_name"),
    ("hermes", "<tool_call>[1, 2]</tool_call>", "not_object"),
    ("hermes", '<tool_call>"add"</tool_call>', "not_object"),
    ("hermes", '<tool_call>{"name": "add", "arguments": [1, 2]}</tool_call>',
     "arguments_not_object"),
    ("hermes", "<tool_call>add(1, 2)</tool_call>", "not_json"),
    ("hermes", '<tool_call>{"name": "add", "arguments": {"a": 1e999}}</tool_call>',
     "bad_number"),
    ("hermes", '<tool_call>{"name": "add", "arguments": {"a": NaN}}</tool_call>', "bad_number"),
    ("hermes", '<tool_call>{"name": "add", "arguments": {"a": ' + "9" * 5000 + "}}</tool_call>",
     "bad_number"),
    ("hermes", "<tool_call>" + "[" * 200 + "</tool_call>", "too_deep"),
    ("hermes", '<tool_call>{"name": "add", "arguments": {"a": "' + "x" * 200_000
     + '"}}</tool_call>', "too_long"),
    ("hermes", "x" * 1_100_000, "too_long"),
    ("json", '{"tool": 7, "parameters": {}}', "missing_name"),
    ("json", '{"tool": "add", "parameters": 3}', "arguments_not_object"),
    ("json", '[{"tool": "add", "parameters": {}}, 5]', "not_object"),
    ("xml", "<tool_call>add 1 2</tool_call>", "missing_name"),
    ("xml", "<tool_call><function=><parameter=a>1</parameter></function></tool_call>",
     "missing_name"),
    ("xml", "<tool_call><function=add><parameter=>1</parameter></function></tool_call>",
     "missing_name"),
    ("xml", "<tool_call>\n</tool_call>", "empty"),
]


@pytest.mark.parametrize("name,reply,kind", BROKEN)
def test_broken_calls_give_typed_errors_in_both_modes(name, reply, kind):
    fmt = fmt_for(name)
    for lenient in (False, True):
        result = fmt.parse(reply, lenient=lenient)
        assert kind in [e.kind for e in result.errors], (lenient, result.errors)
        assert all(e.kind in ERROR_KINDS for e in result.errors)
        assert all(len(e.snippet) <= 200 for e in result.errors)


@pytest.mark.parametrize("name", TEXT_FORMATS)
def test_too_many_calls_in_one_reply(name):
    fmt = fmt_for(name)
    reply = fmt.render_calls([ToolCall("add", {"a": i, "b": 1}) for i in range(500)])
    result = fmt.parse(reply)
    assert len(result.calls) == 64 and [e.kind for e in result.errors] == ["too_long"]
    assert len(fmt.parse("<tool_call></tool_call>" * 500).errors) <= 64


def test_valid_calls_survive_next_to_broken_ones():
    fmt = fmt_for("hermes")
    reply = ('<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>\n'
             "<tool_call>{oops}</tool_call>")
    for lenient in (False, True):
        result = fmt.parse(reply, lenient=lenient)
        assert [c.name for c in result.calls] == ["add"]
        assert [e.kind for e in result.errors] == ["not_json"]


# --- imitation of the other side -----------------------------------------------------

IMITATIONS = [
    ("hermes", "<tool_response>{\"result\": 42}</tool_response>The answer is 42."),
    ("hermes", "Thinking.<|im_start|>tool\n{\"result\": 42}<|im_end|>"),
    ("xml", "<tool_response>\n42\n</tool_response>"),
    ("json", '{"tool": "add", "response": 42}\nSo the answer is 42.'),
    ("native", "<|im_start|>user\nthanks<|im_end|>"),
]


@pytest.mark.parametrize("name,reply", IMITATIONS)
def test_imitated_turns_are_cut_and_reported(name, reply):
    fmt = fmt_for(name)
    for lenient in (False, True):
        result = fmt.parse(reply, lenient=lenient)
        assert result.calls == []
        assert [e.kind for e in result.errors] == ["imitated_turn"]
        assert "42" not in result.content and "thanks" not in result.content


def test_call_before_an_imitated_response_is_kept():
    fmt = fmt_for("hermes")
    reply = ('<tool_call>{"name": "add", "arguments": {"a": 40, "b": 2}}</tool_call>\n'
             '<tool_response>{"result": 42}</tool_response>\nThe answer is 42.')
    result = fmt.parse(reply)
    assert [c.name for c in result.calls] == ["add"]
    assert [e.kind for e in result.errors] == ["imitated_turn"]
    assert result.content == ""


# --- xml typing --------------------------------------------------------------------------


def test_xml_types_values_from_the_schema():
    fmt = XmlFormat(tools=SCHEMAS)  # the constructor path: no prepare() needed
    reply = ("<tool_call>\n<function=lookup>\n"
             "<parameter=query>\n42\n</parameter>\n"
             "<parameter=limit>\n 7 \n</parameter>\n"
             "<parameter=score>\n-1.5e2\n</parameter>\n"
             "<parameter=exact>\nTrue\n</parameter>\n"
             "<parameter=filters>\n{\"k\": [1, 2]}\n</parameter>\n"
             "<parameter=tags>\n[\"a\"]\n</parameter>\n"
             "<parameter=note>\nnull\n</parameter>\n"
             "</function>\n</tool_call>")
    result = fmt.parse(reply, lenient=False)
    assert result.errors == []
    assert result.calls[0].arguments == {"query": "42", "limit": 7, "score": -150.0,
                                         "exact": True, "filters": {"k": [1, 2]},
                                         "tags": ["a"], "note": None}


def test_xml_values_that_do_not_convert_stay_strings_for_the_schema_check():
    fmt = XmlFormat(tools=SCHEMAS)
    reply = ("<tool_call><function=add><parameter=a>twelve</parameter>"
             "<parameter=b>1e999</parameter><parameter=c>{\"x\": 1}</parameter>"
             "</function></tool_call>")
    result = fmt.parse(reply, lenient=False)
    assert result.calls[0].arguments == {"a": "twelve", "b": "1e999", "c": {"x": 1}}
    problem = build_toolset("math").check(result.calls[0])
    assert problem is not None and problem[0] == "invalid_arguments"


def test_xml_unknown_schema_type():
    tools = [{"type": "function", "function": {"name": "t", "parameters": {
        "type": "object", "properties": {"x": {"type": "decimal"}}}}}]
    fmt = XmlFormat(tools=tools)
    reply = "<tool_call><function=t><parameter=x>1.5</parameter></function></tool_call>"
    assert [e.kind for e in fmt.parse(reply, lenient=False).errors] == ["unknown_parameter_type"]
    lenient = fmt.parse(reply, lenient=True)
    assert lenient.calls[0].arguments == {"x": 1.5} and lenient.repaired


def test_get_format_hands_schemas_to_xml():
    fmt = get_format("xml", tools=SCHEMAS)
    reply = "<tool_call><function=fib><parameter=n>5</parameter></function></tool_call>"
    assert fmt.parse(reply).calls[0].arguments == {"n": 5}
    assert get_format("hermes", tools=SCHEMAS).name == "hermes"


def test_xml_learns_schemas_from_prepare():
    fmt = get_format("xml")
    reply = "<tool_call><function=fib><parameter=n>5</parameter></function></tool_call>"
    fmt.prepare([], [{"type": "function", "function": {"name": "fib", "parameters": {
        "type": "object", "properties": {"n": {"type": "string"}}}}}], False)
    assert fmt.parse(reply).calls[0].arguments == {"n": "5"}
    fmt.prepare([], SCHEMAS, False)
    assert fmt.parse(reply).calls[0].arguments == {"n": 5}


# --- reasoning and JSON repair -------------------------------------------------------------


def test_split_reasoning():
    assert split_reasoning("<think>a</think>b") == ("b", "a")
    assert split_reasoning("a</think>b") == ("b", "a")
    assert split_reasoning("x<think>never closed") == ("x", "never closed")
    assert split_reasoning("<think>1</think>m<think>2</think>n") == ("mn", "1\n2")
    assert split_reasoning("plain") == ("plain", "")


def test_calls_inside_reasoning_are_not_calls():
    fmt = fmt_for("hermes")
    result = fmt.parse('<think><tool_call>{"name": "add", "arguments": {}}</tool_call></think>'
                       "The answer is 3.")
    assert result.calls == [] and result.errors == [] and result.content == "The answer is 3."


@pytest.mark.parametrize("text,value", [
    ("{'a': 'it\\'s', \"b\": [1, 2,],}", {"a": "it's", "b": [1, 2]}),
    ('{"a": {"b": [1, {"c": 2', {"a": {"b": [1, {"c": 2}]}}),
    ('{"a": "unterminated', {"a": "unterminated"}),
    ("{a: True, b_2: None}", {"a": True, "b_2": None}),
    ('{"a": 1,', {"a": 1}),
    ("{'q': 'say \"hi\"'}", {"q": 'say "hi"'}),
])
def test_repair(text, value):
    assert loads_value(text, lenient=False)[1] == "not_json"
    assert loads_value(text, lenient=True) == (value, None, True)


def test_repair_never_evaluates():
    payload = "__import__('os').system('echo pwned')"
    assert loads_value(payload, lenient=True)[1] == "not_json"
    assert "__import__" in repair_json(payload)  # left as text, and json.loads refuses it


# What Qwen2.5-Coder 0.5B/1.5B really write instead of <tool_call> tags (docs/models.md).
QWEN_SHAPES = {
    "bare object": ('{"name": "multiply", "arguments": {"a": 1234, "b": 5678}}',
                    [("multiply", {"a": 1234, "b": 5678})]),
    "fenced json": (('Tôi sẽ gọi công cụ.\n```json\n{"name": "multiply", "arguments": '
                    '{"a": 12, "b": 30}}\n```'), [("multiply", {"a": 12, "b": 30})]),
    "two fences": (('```json\n{"name": "add", "arguments": {"a": 12, "b": 30}}\n```\n'
                   '```json\n{"name": "multiply", "arguments": {"a": 42, "b": 7}}\n```'),
                   [("add", {"a": 12, "b": 30}), ("multiply", {"a": 42, "b": 7})]),
    "two objects": (('{"name": "add", "arguments": {"a": 12, "b": 30}}\n'
                    '{"name": "multiply", "arguments": {"a": 42, "b": 7}}'),
                    [("add", {"a": 12, "b": 30}), ("multiply", {"a": 42, "b": 7})]),
    "a list": (('```json\n[{"name": "add", "arguments": {"a": 12, "b": 30}}, '
               '{"name": "subtract", "arguments": {"a": 5, "b": 1}}]\n```'),
               [("add", {"a": 12, "b": 30}), ("subtract", {"a": 5, "b": 1})]),
}


@pytest.mark.parametrize("fmt", ["hermes", "native", "json", "xml"])
@pytest.mark.parametrize("shape", QWEN_SHAPES)
def test_the_call_shapes_qwen_writes_are_read_leniently_and_are_strict_errors(fmt, shape):
    reply, want = QWEN_SHAPES[shape]
    f = get_format(fmt)
    lenient = f.parse(reply, lenient=True)
    assert [(c.name, c.arguments) for c in lenient.calls] == want
    assert lenient.repaired and not lenient.errors
    assert "{" not in lenient.content and "```" not in lenient.content
    strict = f.parse(reply, lenient=False)
    # every call written is one strict format error: strict validity counts them all
    assert strict.calls == [] and len(strict.errors) == len(want)
