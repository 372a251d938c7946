"""Nothing a model writes or a tool returns stops a run: tool results that JSON cannot
hold, one type rule for integers, tool failures apart from model failures, and a
per-sample guard in score_records."""

from __future__ import annotations

import json
import math

import pytest
from synth import call, make_sample

from evalpipe.questions import Question
from evalpipe.records import Manifest, RecordedConfig, ToolCall
from evalpipe.scoring.aggregate import aggregate
from evalpipe.scoring.run import score_records
from evalpipe.tools import build_toolset
from evalpipe.tools.registry import Tool, result_text

RUN = Manifest(run_id="run", config=RecordedConfig())  # what scoring reads of a run

HUGE = int("7" * 4000)


def run_one(toolset, name, arguments):
    (event,) = toolset.execute([ToolCall(name, arguments, id="c1")])
    return event


def odd_tool(value):
    return Tool("odd", "returns a fixed value", {"type": "object", "properties": {}},
                lambda: value)


@pytest.mark.parametrize("value", [
    HUGE * HUGE,  # a 7,999-digit product: json.dumps refuses it
    math.nan,
    math.inf,
    {1, 2},
    object(),
], ids=["7999-digit int", "nan", "inf", "set", "object"])
def test_a_result_json_cannot_hold_is_a_tool_error(value):
    toolset = build_toolset("math").with_tools(odd_tool(value))
    event = run_one(toolset, "odd", {})
    assert event.error == "bad_result" and event.result is None
    assert len(event.error_message) < 700
    json.loads(result_text(event))  # what the model is shown is JSON


def test_multiply_of_two_4000_digit_integers_is_an_error_not_a_crash():
    event = run_one(build_toolset("math"), "multiply", {"a": HUGE, "b": HUGE})
    assert event.error == "bad_result"


def test_a_long_result_is_cut_to_the_limit():
    toolset = build_toolset("math").with_tools(odd_tool(list(range(5000))))
    event = run_one(toolset, "odd", {})
    assert event.error is None and event.truncated
    assert len(event.result) <= toolset.limits.max_result_chars + len(" [truncated]")


@pytest.mark.parametrize("name, arguments, valid", [
    ("fib", {"n": 10}, True),
    ("fib", {"n": 10.0}, False),  # JSON Schema calls 10.0 an integer; evalpipe does not
    ("fib", {"n": True}, False),
    ("add", {"a": 1.0, "b": 2}, True),  # "number" takes ints and floats
    ("add", {"a": True, "b": 2}, False),
])
def test_one_integer_rule_from_validation_to_tool(name, arguments, valid):
    toolset = build_toolset("math")
    assert (toolset.check(ToolCall(name, arguments)) is None) is valid
    event = run_one(toolset, name, arguments)
    assert (event.error is None) is valid
    assert event.error in (None, "invalid_arguments")


CALC = Question(id="calc", suite="plan", question="(12 + 30) * 7?", answer=294,
                answer_type="number", lang="en",
                gold_calls=[{"id": "s1", "name": "add", "arguments": {"a": 12, "b": 30}},
                            {"id": "s2", "name": "multiply",
                             "arguments": {"a": "$s1", "b": 7}}])
DIV = Question(id="div", suite="arithmetic", question="144 / 12?", answer=12,
               answer_type="number", lang="en",
               gold_calls=[{"id": "s1", "name": "divide", "arguments": {"a": 144, "b": 12}}])


@pytest.mark.parametrize("question, steps, category", [
    # the right call, and the tool timed out or raised: not the model's failure
    (CALC, [[call("add", {"a": 12, "b": 30}, 42)],
            [call("multiply", {"a": 42, "b": 7}, error="timeout")]], "tool_failure"),
    (DIV, [[call("divide", {"a": 144, "b": 12}, error="tool_exception")]], "tool_failure"),
    (DIV, [[call("divide", {"a": 144, "b": 12}, error="bad_result")]], "tool_failure"),
    # a tool refusing a call the plan does not ask for is the model's mistake
    (DIV, [[call("divide", {"a": 144, "b": 0}, error="tool_exception")]], "wrong_plan"),
    (DIV, [[call("fib", {"n": 10.0}, error="invalid_arguments")]], "invalid_arguments"),
])
def test_tool_failures_are_kept_apart_from_model_failures(question, steps, category):
    sample = make_sample(question, "I could not finish.", steps=steps, toolset="math")
    out = score_records(RUN, {question.id: question}, [sample])
    (scored,) = out["samples"]
    assert scored["category"] == category
    (group,) = [g for g in out["groups"] if g["suite"] == "all"]
    failed = category == "tool_failure"
    assert group["n_tool_failure"] == int(failed)
    assert group["rates"]["exact"]["n"] == int(not failed)  # kept out of the rates


def test_a_sample_the_scorer_fails_on_is_recorded_and_the_rest_is_scored(monkeypatch):
    from evalpipe.scoring import run

    real = run.score_sample

    def flaky(sample, question, **kwargs):
        if sample["final_answer"] == "boom":
            raise RecursionError("maximum recursion depth exceeded")
        return real(sample, question, **kwargs)

    monkeypatch.setattr(run, "score_sample", flaky)
    good = make_sample(DIV, "12", steps=[[call("divide", {"a": 144, "b": 12}, 12)]],
                       toolset="math")
    bad = dict(make_sample(DIV, "boom", toolset="math"), repeat=1)
    out = score_records(RUN, {DIV.id: DIV}, [good, bad])
    assert [s["category"] for s in out["samples"]] == ["correct", "scorer_error"]
    assert out["unscored"] == [{"cell_id": "cell-1", "question_id": "div", "repeat": 1,
                                "scorer_error": "RecursionError: maximum recursion depth "
                                                "exceeded"}]
    (group,) = [g for g in out["groups"] if g["suite"] == "all"]
    assert group["n_scorer_error"] == 1 and group["categories"]["scorer_error"] == 1
    assert group["rates"]["exact"]["n"] == 1 and group["rates"]["exact"]["rate"] == 1.0
    json.dumps(out, allow_nan=False)


def test_hostile_final_answers_are_scored():
    replies = ["1e400", "-1.0e309", "9" * 5000, "2.5E-3", "12"]
    samples = [dict(make_sample(DIV, r, toolset="none"), repeat=i) for i, r in enumerate(replies)]
    out = score_records(RUN, {DIV.id: DIV}, samples)
    assert out["unscored"] == []
    assert [s["exact"] for s in out["samples"]] == [False, False, False, False, True]
    json.dumps(out, allow_nan=False)


def test_aggregate_keeps_scorer_errors_out_of_rates():
    rows = [{"cell_id": "c", "suite": "s", "exact": True, "category": "correct"},
            {"cell_id": "c", "suite": "s", "scorer_error": "X: y", "category": "scorer_error"}]
    (row, _) = aggregate(rows)
    assert (row["n"], row["n_scorer_error"], row["rates"]["exact"]["n"]) == (2, 1, 1)


def test_evalpipe_score_on_a_hostile_run_exits_0_and_lists_what_it_could_not_score(tmp_path):
    from click.testing import CliRunner
    from helpers import ScriptedBackend

    from evalpipe.backends.base import GenerationSettings
    from evalpipe.cli import main
    from evalpipe.engine import CellRuntime, Engine
    from evalpipe.formats import get_format
    from evalpipe.store import RunStore
    from evalpipe.tools.registry import ToolLimits, Toolset

    def tool_call(name, **arguments):
        return get_format("hermes").render_call(ToolCall(name, arguments))

    script = {  # question id -> replies, one per turn
        "q-huge-product": [tool_call("multiply", a=HUGE, b=HUGE), "It is 1e400."],
        "q-long-result": [tool_call("fib", n=1000), "9" * 5000],
        "q-exponent": ["2.5E-3"],
        "q-right": [tool_call("divide", a=144, b=12), "12"],
    }
    questions = [Question(id=q, suite="s", question=q, answer=12 if q == "q-right" else 0.0025,
                          answer_type="number", lang="en") for q in script]
    replies = {q: iter(r) for q, r in script.items()}

    def reply(prompt):
        question = next(q for q in script if f"<user>{q}" in prompt)
        return next(replies[question], "done")

    math_tools = build_toolset("math")
    toolset = Toolset(math_tools.tools, ToolLimits(timeout_s=5.0, max_result_chars=50))
    cell = CellRuntime("m/hermes/math/no-rag", "fp", {"toolset": "math"},
                       ScriptedBackend(reply), get_format("hermes"), toolset,
                       GenerationSettings(), max_turns=3)
    samples = [s.to_dict() for ended in Engine().run(cell, questions, "run") for s in ended]
    events = {s["question_id"]: [e for t in s["turns"] for e in t["tool_events"]]
              for s in samples}
    assert events["q-huge-product"][0]["error"] == "bad_result"
    assert events["q-long-result"][0]["truncated"]
    corrupt = dict(samples[-1], question_id="q-right", repeat=1, turns=[{"tool_events": 7}])

    store = RunStore(tmp_path / "run")
    store.path.mkdir()
    store.write_json("manifest.json", {"run_id": "run", "config": {"k": 3}})
    store.write_questions(questions)
    store.append_samples([*samples, corrupt])

    result = CliRunner().invoke(main, ["score", str(store.path)])
    assert result.exit_code == 0, result.output
    assert "1 sample(s) could not be scored" in result.output
    assert "question q-right, repeat 1: TypeError" in result.output
    scores = json.loads((store.path / "scores.json").read_text())
    assert len(scores["samples"]) == 5
    assert [u["question_id"] for u in scores["unscored"]] == ["q-right"]
    by_id = {(s["question_id"], s["repeat"]): s for s in scores["samples"]}
    assert by_id[("q-exponent", 0)]["exact"] and by_id[("q-right", 0)]["exact"]
    assert not by_id[("q-huge-product", 0)]["exact"]
    report = CliRunner().invoke(main, ["report", str(store.path)])
    assert report.exit_code == 0, report.output
    assert "1 sample(s) could not be scored" in report.output
