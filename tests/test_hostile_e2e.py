"""End to end on hostile replies: parse, validate, execute with the real tools, score.

The wire-level tests go further down: generated server JSON (plain and streamed:
fields missing, extra or of any type, lone surrogates, terminal escapes, arguments
900 deep, bodies that are not JSON) through a fake server, the real OpenAI backend
and the runner; every run finishes, every sample gets a verdict, and show, report
and score read the run back.

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
from pathlib import Path

import pytest
from helpers import ScriptedBackend
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evalpipe.backends.base import GenerationSettings
from evalpipe.engine import CellRuntime, Engine
from evalpipe.formats import get_format
from evalpipe.questions import Question
from evalpipe.records import Generation, Manifest, RecordedConfig, ToolCall
from evalpipe.scoring.run import score_records
from evalpipe.tools import build_toolset

RUN = Manifest(run_id="run", config=RecordedConfig())  # what scoring reads of a run

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
    ToolCall("power", {"base": 10, "exponent": 300}),
    ToolCall("power", {"base": 2, "exponent": 0.5}),
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
        scores = score_records(RUN, {question.id: question}, samples)
        assert scores["unscored"] == []  # the per-sample guard was not needed
        assert [s["category"] for s in scores["samples"]] != []
        json.dumps(scores, allow_nan=False)

    check()


# -- the wire level: the server's JSON itself, through the real backend and run --------------

ODD_STRINGS = ["\ud800", "\udfff x", "\x1b[2J\x1b]0;t\x07", "\x00", "\u202eevil", "\x9b31m",
               "7" * 5000, "add", "multiply", '{"a": 1, "b": 2}', '{"a": "\\ud800"}',
               "[" * 200, "1e400"]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12)
    | st.sampled_from(ODD_STRINGS),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=3),
    max_leaves=8)


def field(valid):
    """Mostly a value that fits, sometimes anything JSON can hold."""
    return st.one_of(valid, valid, valid, json_values)


def deep(n: int) -> dict:
    value: dict = {"a": 1}
    for _ in range(n):
        value = {"a": value}
    return value


ARGUMENTS = st.sampled_from(['{"a": 2, "b": 3}', '{"a": 1}', "", "{", '{"a": NaN}',
                             "[" * 900 + "]" * 900]) | st.just(deep(900)) | st.just({"a": 1})
CALL = st.fixed_dictionaries(
    {"function": field(st.fixed_dictionaries(
        {"name": field(st.sampled_from(["add", "multiply", "nope", ""]))},
        optional={"arguments": field(ARGUMENTS)}))},
    optional={"id": field(st.just("call_1")), "type": field(st.just("function")),
              "index": field(st.integers(0, 3))})
MESSAGE = st.fixed_dictionaries(
    {}, optional={"role": field(st.just("assistant")),
                  "content": field(st.sampled_from(["The answer is 5.", "", None]) | st.text()),
                  "tool_calls": field(st.lists(CALL, max_size=2))})
USAGE = st.fixed_dictionaries({}, optional={"prompt_tokens": field(st.integers(0, 99)),
                                            "completion_tokens": field(st.integers(0, 99))})
FINISH = st.sampled_from(["stop", "length", "tool_calls"])
REPLY = st.fixed_dictionaries(
    {"choices": field(st.lists(st.fixed_dictionaries(
        {"message": field(MESSAGE)}, optional={"finish_reason": field(FINISH),
                                               "index": field(st.just(0))}),
        min_size=1, max_size=2))},
    optional={"usage": field(USAGE), "model": field(st.just("fake")), "extra": json_values})
RAW = st.sampled_from([b"", b"not json", b'{"choices": [', b"\xff\xfe{}", b"null",
                       b'{"choices": [{"message": {"content": Infinity}}]}',
                       b"[" * 5000 + b"]" * 5000])
CHUNK = st.fixed_dictionaries(
    {"choices": field(st.lists(st.fixed_dictionaries(
        {"delta": field(MESSAGE)}, optional={"finish_reason": field(FINISH)}), max_size=2))},
    optional={"usage": field(USAGE), "error": st.none() | json_values})


def wire_run(tmp_path, replies, stream: bool):
    """One run of two questions against a fake server that sends `replies` in turn (then a
    plain answer); checks the run finished, every sample has a verdict, and show, report
    and score read it back."""
    import itertools
    import tempfile
    import threading

    from fake_openai import FakeOpenAI, Json, Stream, chat

    from evalpipe import api
    from evalpipe._report.show import find_samples, render_sample
    from evalpipe.cli.common import terminal_safe
    from evalpipe.config import parse_config
    from evalpipe.runner import execute_run

    lock = threading.Lock()
    script = iter(replies)

    def respond(path, body):
        if path.endswith("/models"):
            return Json({"data": []})
        with lock:
            reply = next(script, None)
        if reply is None:
            return Json(chat("The answer is 5."))
        if stream:
            return Stream(reply)
        return Json(reply)

    out = Path(tempfile.mkdtemp(dir=tmp_path))
    (out / "q.jsonl").write_text("".join(json.dumps(
        {"id": f"q{i}", "suite": "arithmetic", "question": f"What is {i} plus 4?",
         "answer": i + 4}) + "\n" for i in range(2)))
    with FakeOpenAI(respond=respond) as server:
        config = parse_config({
            "name": "wire", "questions": [str(out / "q.jsonl")], "formats": ["openai"],
            "toolsets": ["calculator"], "max_turns": 2,
            "models": [{"id": "fake", "backend": "openai", "base_url": server.url,
                        "stream": "on" if stream else "off", "max_retries": 0,
                        "concurrency": 2, "timeout_s": 30}]}, source=str(out / "c.yaml"))
        run_dir = execute_run(config, out / "o", use_cache=False, echo=lambda line: None)
    scores = json.loads((run_dir / "scores.json").read_text(encoding="utf-8"))
    assert scores["unscored"] == [] and len(scores["samples"]) == 2
    assert all(s["category"] for s in scores["samples"])
    (run_dir / "samples.jsonl").read_bytes().decode("utf-8")  # whole UTF-8 lines
    for qid in ("q0", "q1"):
        samples, texts = find_samples(run_dir, qid)
        text = terminal_safe("".join(render_sample(s, texts) for s in samples))
        text.encode("utf-8")
        assert "\x1b" not in text and "\x9b" not in text
    api.report(run_dir, "md")
    json.loads(api.report(run_dir, "json"))
    api.score(run_dir)
    return itertools.chain(scores["samples"])


@settings(max_examples=max(10, EXAMPLES // 2), deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(st.lists(st.one_of(REPLY, RAW), min_size=1, max_size=4))
def test_hostile_server_replies_end_to_end(tmp_path_factory, replies):
    wire_run(tmp_path_factory.mktemp("wire"), replies, stream=False)


@settings(max_examples=max(10, EXAMPLES // 2), deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(st.lists(st.one_of(CHUNK, RAW), max_size=4), st.booleans()),
                min_size=1, max_size=4))
def test_hostile_streamed_replies_end_to_end(tmp_path_factory, streams):
    replies = []
    for chunks, finish in streams:
        if finish:  # a finish_reason at the end, as a well-formed stream has
            chunks = [*chunks, {"choices": [{"delta": {}, "finish_reason": "stop"}]}]
        replies.append(chunks)
    wire_run(tmp_path_factory.mktemp("wire"), replies, stream=True)
