"""Parsers on real replies of the embedded model (SmolLM2-135M-Instruct).

The slow tests generate fresh replies with each format's prompt through the
engine; the others read replies recorded the same way
(tests/data/smollm2_replies.json, written with
`evalpipe measure-formats --dump`), so that the parsers meet real
model output on every test run, without the model.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalpipe.formats import ERROR_KINDS, get_format
from evalpipe.measure import run_format, validity
from evalpipe.questions import Question
from evalpipe.records import ParseResult
from evalpipe.tools import build_toolset

FIXTURES = Path(__file__).parent / "data" / "smollm2_replies.json"
TEXT_FORMATS = ["hermes", "json", "xml", "native"]
SCHEMAS = build_toolset("math").schemas()

QUESTIONS = [
    Question(id=f"q{i}", suite="arithmetic", question=q, answer=a, answer_type="number",
             gold_calls=[{"id": "s1", "name": op, "arguments": args}])
    for i, (q, a, op, args) in enumerate([
        ("What is 12 + 30?", 42, "add", {"a": 12, "b": 30}),
        ("Compute 37 * 18.", 666, "multiply", {"a": 37, "b": 18}),
        ("What is 144 divided by 12?", 12, "divide", {"a": 144, "b": 12}),
        ("Tính 250 - 75.", 175, "subtract", {"a": 250, "b": 75}),
    ])
]


def check(result: ParseResult) -> None:
    """Calls or typed errors, plain data, no tags left in the content."""
    assert isinstance(result, ParseResult)
    for call in result.calls:
        assert isinstance(call.name, str) and call.name
        assert isinstance(call.arguments, dict)
        json.dumps(call.arguments)
    for err in result.errors:
        assert err.kind in ERROR_KINDS and err.kind != "parser_bug"
    if result.calls:
        assert "<tool_call>" not in result.content and "</tool_call>" not in result.content
    assert "<think>" not in result.content


def parsers(name):
    fmt = get_format(name)
    fmt.prepare([], SCHEMAS, False)
    return fmt


# --- live model (slow) ----------------------------------------------------------------


@pytest.fixture(scope="module")
def backend():
    from evalpipe.backends import load_backend
    from evalpipe.errors import ModelUnavailableError

    try:
        return load_backend({"id": "smollm2-135m"})
    except ModelUnavailableError as exc:  # no cached copy and no network
        pytest.skip(f"embedded model unavailable: {exc}")


@pytest.mark.slow
@pytest.mark.parametrize("name", TEXT_FORMATS)
def test_live_replies_parse_to_calls_or_typed_errors(backend, name):
    samples = run_format(backend, name, QUESTIONS, max_new_tokens=96, max_turns=1)
    assert len(samples) == len(QUESTIONS)
    fmt = parsers(name)
    for sample in samples:
        assert sample.stop_reason in ("answered", "turn_limit", "length")
        assert sample.error is None
        turn = sample.turns[0]
        for lenient in (False, True):
            check(fmt.parse(turn["raw"], lenient=lenient))
        # what the engine recorded is what the parser says
        assert [c["name"] for c in turn["calls"]] == [c.name for c in fmt.parse(turn["raw"]).calls]
        assert all(e["kind"] in ERROR_KINDS for e in turn["parse_errors"] + turn["strict_errors"])
    rates = validity(samples).rates()
    assert rates["samples"] == len(QUESTIONS)
    for key in ("call_valid", "call_valid_strict"):
        assert rates[key] is None or 0 <= rates[key] <= 1
    if rates["call_valid"] is not None:
        assert rates["call_valid_strict"] <= rates["call_valid"]


# --- recorded replies -----------------------------------------------------------------------


def recorded():
    data = json.loads(FIXTURES.read_text(encoding="utf-8"))
    return [(name, i, case) for name in data["replies"] for i, case in
            enumerate(data["replies"][name])]


def test_fixture_file_is_real_model_output():
    data = json.loads(FIXTURES.read_text(encoding="utf-8"))
    assert data["model"] == "smollm2-135m"
    assert set(data["replies"]) >= {"hermes", "json", "xml"}
    assert all(case["raw"] for cases in data["replies"].values() for case in cases)


@pytest.mark.parametrize("name,index,case", recorded(),
                         ids=lambda v: v if isinstance(v, (str, int)) else "")
def test_recorded_replies(name, index, case):
    fmt = parsers(name)
    for mode in ("strict", "lenient"):
        result = fmt.parse(case["raw"], lenient=mode == "lenient")
        check(result)
        got = {"calls": [[c.name, c.arguments] for c in result.calls],
               "errors": [e.kind for e in result.errors], "repaired": result.repaired}
        assert got == case[mode], (mode, case["raw"])


def test_measure_says_when_no_call_was_attempted():
    from evalpipe.measure import Validity, describe

    text = describe("hermes", Validity(samples=8))
    assert text.startswith("hermes: no call attempted in 8 samples") and "null" not in text
    text = describe("json", Validity(samples=8, samples_attempted=6, samples_valid=5,
                                     samples_valid_strict=4, attempts=14, valid=12,
                                     valid_strict=11, error_kinds={"bad_json": 2}))
    assert "6 of 8 samples attempted a call (14 attempts)" in text
    assert "85.7% (12/14) lenient, 78.6% (11/14) strict" in text and "bad_json 2" in text
