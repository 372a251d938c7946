"""Property tests: no reply, however hostile, makes a parser raise or run anything."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evalpipe.formats import ERROR_KINDS, FORMATS, get_format
from evalpipe.records import ParseResult
from evalpipe.tools import build_toolset

SCHEMAS = build_toolset("math").schemas()
PARSERS = []
for _name in FORMATS:
    _fmt = get_format(_name)
    _fmt.prepare([], SCHEMAS, False)
    PARSERS.append(_fmt)

FRAGMENTS = [
    "<tool_call>", "</tool_call>", "<think>", "</think>", "<tool_response>", "</tool_response>",
    "<function=add>", "<function=", "</function>", "<parameter=a>", "<parameter=", "</parameter>",
    "<|im_start|>", "<|im_end|>", "tool\n", "{", "}", "[", "]", '"', "'", ":", ",", "\\", "\n",
    '"name"', '"arguments"', '"tool"', '"parameters"', '"response"', "'name'", "name:",
    '"add"', '"fib"', "null", "true", "True", "None", "NaN", "Infinity", "-", "1e999",
    "9" * 400, "0.1", "```json", "```", "\\u12", "\\ud800", "é", "Hà Nội", "\u0301", "\u202e",
    "\x00", "\ufeff", "🙂", "__import__('os').system('touch /tmp/pwned')",
    "eval(", "exec(", "!!python/object", "cos\nsystem\n(S'ls'\ntR.",
]

CALL_BODIES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["name", "arguments", "tool", "parameters", "a", "b", "response"])
        | st.text(max_size=4), inner, max_size=3),
    max_leaves=10)

REPLIES = st.one_of(
    st.text(max_size=300),
    st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=5), max_size=40).map("".join),
    CALL_BODIES.map(repr).map(lambda b: f"<tool_call>{b}</tool_call>"),
    CALL_BODIES.map(repr),
    st.builds(lambda n, o, c: o * n + c * (n // 2), st.integers(0, 3000),
              st.sampled_from(["[", "{", "{\"a\":", "<tool_call>", "<think>", "<parameter=a>"]),
              st.sampled_from(["]", "}", "", "</tool_call>"])),
    st.builds(lambda d: '<tool_call>{"name": "add", "arguments": {"a": ' + "9" * d + "}}",
              st.integers(300, 6000)),
)


def check(result: ParseResult) -> None:
    assert isinstance(result, ParseResult)
    for call in result.calls:
        assert isinstance(call.name, str) and call.name.strip()
        assert isinstance(call.arguments, dict)
    for err in result.errors:
        assert err.kind in ERROR_KINDS and err.kind != "parser_bug", (err.kind, err.message)
        assert isinstance(err.message, str) and len(err.snippet) <= 200
    assert isinstance(result.content, str) and isinstance(result.reasoning, str)
    assert "<think>" not in result.content
    if result.calls:
        assert "<tool_call>" not in result.content and "</tool_call>" not in result.content


@settings(max_examples=2000, deadline=None, suppress_health_check=list(HealthCheck))
@given(reply=REPLIES)
def test_every_parser_returns_calls_or_typed_errors(reply):
    for fmt in PARSERS:
        for lenient in (False, True):
            check(fmt.parse(reply, lenient=lenient))


@settings(max_examples=300, deadline=None)
@given(prefix=st.text(max_size=40), suffix=st.text(max_size=40))
def test_strict_success_implies_lenient_success(prefix, suffix):
    """What strict mode accepts, lenient mode reads the same way, unrepaired."""
    for fmt in PARSERS:
        if fmt.name == "openai":
            continue
        from evalpipe.records import ToolCall

        reply = prefix.replace("<", "") + "\n" + fmt.render_call(
            ToolCall("add", {"a": 1, "b": 2})) + "\n" + suffix.replace("<", "")
        strict, lenient = fmt.parse(reply, lenient=False), fmt.parse(reply, lenient=True)
        if not strict.errors:
            assert [(c.name, c.arguments) for c in strict.calls] == \
                [(c.name, c.arguments) for c in lenient.calls]
            assert not lenient.repaired


def test_payloads_are_data_not_code(tmp_path, monkeypatch):
    pwned = tmp_path / "pwned_by_parser"
    ran: list[str] = []  # any command a parser ran; os.system would also touch the file
    monkeypatch.setattr(os, "system", lambda cmd: ran.append(cmd) or 0)
    payload = f"__import__('os').system('touch {pwned}')"
    replies = [
        f'<tool_call>{{"name": "add", "arguments": {{"a": "{payload}"}}}}</tool_call>',
        f"<tool_call>{{'name': 'add', 'arguments': {{'a': {payload}}}}}</tool_call>",
        f"<tool_call>{payload}</tool_call>",
        f"<tool_call>{{'name': 'add', 'arguments': {payload}}}</tool_call>",
        f'{{"tool": "add", "parameters": {{"a": {payload}}}}}',
        f'{{"tool": "add", "parameters": {{"a": "{payload}"}}}}',
        f"<tool_call><function=add><parameter=a>{payload}</parameter></function></tool_call>",
        (f"<tool_call><function=add><parameter=a>{{'x': {payload}}}</parameter>"
        "</function></tool_call>"),
        f"<tool_call>{{'name': 'add', 'arguments': {{'a': (lambda: {payload})()}}}}</tool_call>",
        ("<tool_call>{'name': 'add', 'arguments': {'a': [x for x in ().__class__.__bases__]}}"
        "</tool_call>"),
    ]
    for reply in replies:
        for fmt in PARSERS:
            for lenient in (False, True):
                result = fmt.parse(reply, lenient=lenient)
                check(result)
                for call in result.calls:  # whatever came back is plain data
                    assert _plain(call.arguments)
    assert ran == [] and not pwned.exists()


def _plain(value) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, (str, int, float, bool))
