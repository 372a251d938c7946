"""End to end on hostile replies: parse, validate, execute with the real tools, score.

Replies are built from the pieces that broke an earlier version (huge and
out-of-range numbers, signed exponents, duplicate keys, xml tag debris, calls cut
off by the token limit, 4,000-digit operands whose product JSON cannot hold) mixed
with well-formed calls and free text. No exception may escape any stage, and the
scores must be plain JSON. Bounded for CI: EVALPIPE_HOSTILE_EXAMPLES examples per
format (default 40); set it higher for a longer fuzz run.
"""

from __future__ import annotations

import json
import os

import pytest
from helpers import ScriptedBackend
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evalpipe.backends.base import GenerationSettings
from evalpipe.engine import CellRuntime, Engine
from evalpipe.formats import get_format
from evalpipe.questions import Question
from evalpipe.records import Generation, ToolCall
from evalpipe.scoring.run import score_records
from evalpipe.tools import build_toolset

EXAMPLES = int(os.environ.get("EVALPIPE_HOSTILE_EXAMPLES", "40"))
TOOLSET = build_toolset("math")
HUGE = int("7" * 4000)

QUESTIONS = [
    Question(id="plan", suite="plan", question="(12 + 30) * 7?", answer=294, lang="en",
             answer_type="number",
             gold_calls=[{"id": "s1", "name": "add", "arguments": {"a": 12, "b": 30}},
                         {"id": "s2", "name": "multiply", "arguments": {"a": "$s1", "b": 7}}]),
    Question(id="tiny", suite="arithmetic", question="2.5 / 1000?", answer=0.0025, lang="vi",
             answer_type="number",
             gold_calls=[{"id": "s1", "name": "divide",
                          "arguments": {"a": 2.5, "b": {"$any": [1000, "1000"]}}}]),
    Question(id="text", suite="control", question="Price range?", answer="$20-$30",
             answer_type="text", lang="en", gold_calls=[]),
]

numbers = st.one_of(
    st.integers(-10**6, 10**6), st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([HUGE, -HUGE, 10**400, 2**63, 10.0, True, False, None, "12", "1e400",
                     "9" * 50, [1, [2, [3]]], {"x": 1}]))
tool_names = st.sampled_from(["add", "subtract", "multiply", "divide", "power", "sqrt", "fib",
                              "search_site", "nope", "null.5</function"])
HOSTILE_TEXT = st.sampled_from([
    "1e400", "-1.0e309", "9" * 5000, "2.5E-3", "6.02e+23", "7e1234567", "$20-$30", "12-5",
    '{"name": "add", "name": "subtract", "arguments": {"a": 1, "a": 2, "b": 3}}',
    '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}, "arguments": {}}</tool_call>',
    "<tool_call>\n<function=null.5</function>\n</tool_call>",
    "<tool_call>\n<function=fib>\n<parameter=n>\n10.0\n</parameter>\n</function>\n</tool_call>",
    "<tool_call><tool_call>{{{{[[[", "</think>", "<think>", "<tool_response>42</tool_response>",
    "<|im_start|>user", "[" * 80 + "]" * 80, '{"tool": "fib", "parameters": {"n": 1000}}',
])


# Schema-valid calls, the right ones and those whose results are hard to hold.
VALID_CALLS = st.sampled_from([
    ToolCall("add", {"a": 12, "b": 30}), ToolCall("multiply", {"a": 42, "b": 7}),
    ToolCall("divide", {"a": 2.5, "b": 1000}), ToolCall("multiply", {"a": HUGE, "b": HUGE}),
    ToolCall("add", {"a": HUGE, "b": 1}), ToolCall("fib", {"n": 1000}),
    ToolCall("power", {"base": 10, "exponent": 300}), ToolCall("power", {"base": 2, "exponent": 0.5}),
    ToolCall("divide", {"a": 1, "b": 0}), ToolCall("sqrt", {"x": -1}),
    ToolCall("multiply", {"a": 1e308, "b": 10}), ToolCall("subtract", {"a": -1e308, "b": 1e308}),
])


@st.composite
def replies(draw, fmt):
    pieces = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["valid", "valid", "call", "text", "hostile"]))
        if kind == "valid":
            pieces.append(fmt.render_call(draw(VALID_CALLS)))
        elif kind == "call":
            args = draw(st.dictionaries(st.sampled_from(["a", "b", "n", "x", "base", "exponent",
                                                         "query"]), numbers, max_size=3))
            pieces.append(fmt.render_call(ToolCall(draw(tool_names), args)))
        elif kind == "text":
            pieces.append(draw(st.text(max_size=40)))
        else:
            pieces.append(draw(HOSTILE_TEXT))
    text = "\n".join(pieces)
    cut = draw(st.booleans())
    if cut and text:
        text = text[:draw(st.integers(1, len(text)))]
    return Generation(text, prompt_tokens=10, completion_tokens=5,
                      finish_reason="length" if cut else "stop")


@pytest.mark.parametrize("format_name", ["hermes", "json", "xml", "native"])
def test_hostile_replies_end_to_end(format_name):
    fmt = get_format(format_name, TOOLSET.schemas())

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(replies(fmt), min_size=1, max_size=3), st.sampled_from(QUESTIONS))
    def check(script, question):
        turns = iter(script)

        def reply(prompt):
            return next(turns, Generation("The answer is 1e400.", finish_reason="stop"))

        cell = CellRuntime(f"m/{format_name}/math/no-rag", "fp", {"toolset": "math"},
                           ScriptedBackend(reply), fmt, TOOLSET, GenerationSettings(),
                           max_turns=len(script))
        samples = [s.to_dict() for ended in Engine().run(cell, [question], "run")
                   for s in ended]
        json.dumps(samples, allow_nan=False)  # what the store writes is plain JSON
        scores = score_records({"run_id": "run"}, {question.id: question}, samples)
        assert scores["unscored"] == []  # the per-sample guard was not needed
        assert [s["category"] for s in scores["samples"]] != []
        json.dumps(scores, allow_nan=False)

    check()
