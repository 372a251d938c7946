"""Parser rules that close the gaps an outside check found: duplicate JSON keys,
xml names that are not identifiers, calls cut off by the token limit, one integer
rule from parse to tool."""

from __future__ import annotations

import pytest

from evalpipe.formats import get_format
from evalpipe.records import ToolCall
from evalpipe.tools import build_toolset

SCHEMAS = build_toolset("math").schemas()

# A call whose name key, or one of whose arguments, is given twice, per JSON-based format.
DUPLICATES = [
    ("hermes", ('<tool_call>{"name": "add", "name": "subtract", "arguments": {"a": 5, "b": 3}}'
               "</tool_call>"), "subtract", {"a": 5, "b": 3}),
    ("native", '<tool_call>{"name": "add", "arguments": {"a": 5, "a": 9, "b": 3}}</tool_call>',
     "add", {"a": 9, "b": 3}),
    ("json", '{"tool": "add", "tool": "subtract", "parameters": {"a": 5, "b": 3}}',
     "subtract", {"a": 5, "b": 3}),
    ("json", '{"tool": "add", "parameters": {"a": 5, "b": 3, "b": 4}}', "add", {"a": 5, "b": 4}),
    ("xml", '<tool_call>{"name": "add", "arguments": {"a": 1, "a": 2, "b": 3}}</tool_call>',
     "add", {"a": 2, "b": 3}),
    ("hermes", ('<tool_call>{"name": "add", "arguments": "{\\"a\\": 1, \\"a\\": 2, \\"b\\": 3}"}'
               "</tool_call>"), "add", {"a": 2, "b": 3}),
]


@pytest.mark.parametrize("name, reply, tool, arguments", DUPLICATES)
def test_duplicate_keys_strict_is_an_error_lenient_is_repaired(name, reply, tool, arguments):
    fmt = get_format(name, SCHEMAS)
    strict = fmt.parse(reply, lenient=False)
    assert strict.calls == [] and strict.errors
    # (strict xml does not read JSON calls at all)
    assert {e.kind for e in strict.errors} <= {"duplicate_key", "arguments_not_object",
                                               *(["missing_name"] if name == "xml" else [])}
    lenient = fmt.parse(reply, lenient=True)
    assert [(c.name, c.arguments) for c in lenient.calls] == [(tool, arguments)]
    assert lenient.repaired and not lenient.errors


@pytest.mark.parametrize("reply", [
    "<tool_call>\n<function=null.5</function>\n</tool_call>",
    "<tool_call>\n<function=add\"}>\n<parameter=a>1</parameter>\n</function>\n</tool_call>",
    ("<tool_call>\n<function=add>\n<parameter=a</parameter>\n1\n</parameter>\n</function>\n"
    "</tool_call>"),
    "<tool_call>\n<function=add>\n<parameter=1a>\n1\n</parameter>\n</function>\n</tool_call>",
])
@pytest.mark.parametrize("lenient", [True, False])
def test_xml_names_are_identifiers(reply, lenient):
    result = get_format("xml", SCHEMAS).parse(reply, lenient=lenient)
    assert result.calls == []
    assert [e.kind for e in result.errors] == ["bad_name"]


def test_xml_dotted_and_dashed_names_are_fine():
    reply = "<tool_call>\n<function=math.sqrt>\n<parameter=x-y>\n4\n</parameter>\n</function>" \
            "\n</tool_call>"
    (call,) = get_format("xml").parse(reply).calls
    assert (call.name, call.arguments) == ("math.sqrt", {"x-y": 4})


def _cut(fmt, call, inside):
    text = fmt.render_call(call)
    return text[:text.index(inside) + len(inside) - 1]  # stops inside `inside`


MULTIPLY = ToolCall("multiply", {"a": 3313, "b": 258})


@pytest.mark.parametrize("name", ["hermes", "native", "json", "xml"])
def test_a_call_cut_off_by_the_token_limit_is_never_run(name):
    fmt = get_format(name, SCHEMAS)
    cut = _cut(fmt, MULTIPLY, "258")
    assert fmt.parse(cut, lenient=True).calls  # without the limit: repaired, as before
    result = fmt.parse(cut, lenient=True, cut_off=True)
    assert result.calls == []
    assert [e.kind for e in result.errors] == ["truncated_call"]
    # a finished call before the cut one still runs
    two = fmt.render_call(ToolCall("add", {"a": 1, "b": 2})) + "\n" + cut
    result = fmt.parse(two, lenient=True, cut_off=True)
    assert [(c.name, c.arguments) for c in result.calls] == [("add", {"a": 1, "b": 2})]
    assert [e.kind for e in result.errors] == ["truncated_call"]
    # a finished call, then prose cut by the limit: the call is whole and runs
    whole = fmt.render_call(MULTIPLY) + "\nThe product is"
    result = fmt.parse(whole, lenient=True, cut_off=True)
    assert [(c.name, c.arguments) for c in result.calls] == [("multiply", {"a": 3313, "b": 258})]
    assert not result.errors


def test_xml_integral_float_is_not_an_integer():
    reply = "<tool_call>\n<function=fib>\n<parameter=n>\n10.0\n</parameter>\n</function>\n" \
            "</tool_call>"
    (call,) = get_format("xml", SCHEMAS).parse(reply).calls
    assert call.arguments == {"n": "10.0"}  # kept as written, so the schema refuses it
    (event,) = build_toolset("math").execute([call])
    assert event.error == "invalid_arguments"


@pytest.mark.parametrize("raw, decoded", [
    ('{"a": 1, "b": 2}', {"a": 1, "b": 2}),
    ('{"a": 1, "a": 2}', '{"a": 1, "a": 2}'),  # kept as text: the tool check refuses it
    ('{"a": 1e999}', '{"a": 1e999}'),
    ('[1, 2]', '[1, 2]'),
])
def test_structured_api_arguments_follow_the_same_json_rules(raw, decoded):
    from evalpipe.formats.openai import decode_arguments

    assert decode_arguments(raw) == decoded


def test_a_bug_in_a_formats_own_parser_becomes_an_error_on_the_reply():
    """`parse` is the base class's, in plain sight: it calls the format's `_parse` and turns
    what that raises into a parser_bug error instead of stopping the run."""
    from evalpipe.formats.hermes import HermesFormat

    class Broken(HermesFormat):
        def _parse(self, text, *, lenient=True):
            raise KeyError("a parser bug")

    assert "parse" not in Broken.__dict__ and Broken.parse is HermesFormat.parse
    result = Broken().parse("<tool_call>{}</tool_call>", lenient=True, cut_off=True)
    assert result.calls == [] and [e.kind for e in result.errors] == ["parser_bug"]
    assert "KeyError" in result.errors[0].message
