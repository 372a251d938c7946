"""Plan arguments read as a careful grader reads them: one matcher, one gold-value form."""

from __future__ import annotations

import json

import pytest
from synth import call

from evalpipe.errors import InputError
from evalpipe.plans import check_value, execute_gold_plan, resolve
from evalpipe.questions import load_questions
from evalpipe.scoring.plan import argument_matches, arguments_match, executed_calls, match_plan
from evalpipe.tools import build_toolset


@pytest.mark.parametrize("gold, actual, same", [
    # integers compare exactly at every size; tolerance is for non-integers only
    (1234567, 1234568, False),
    (1234567, 1234567, True),
    (1234567, 1234567.0, True),
    (10**20, 10**20 + 1, False),
    (2.5, 2.5000001, True),
    (2.5, 2.51, False),
    (2.0, 2, True),
    # booleans are not numbers, in both directions
    (True, 1, False),
    (1, True, False),
    (False, 0, False),
    (0, False, False),
    (True, True, True),
    # a long numeric gold string keeps every digit
    ("12345678901234567890", 12345678901234567891, False),
    ("12345678901234567890", 12345678901234567890, True),
    ("12345678901234567890", "12345678901234567891", False),
    ("12", 12, True),
    (12, "12", True),
    (12, "1e400", False),
    # strings in text_key form
    ("Ha Noi", "ha  noi!", True),
    ("Hà Nội", "Ha Noi", False),
    # lists and objects element by element, with the same rules
    ([1, 2], [1.0, 2], True),
    ([1234567], [1234568], False),
    (["Paris", "Lyon"], ["paris", "LYON"], True),
    ([1, 2], [2, 1], False),
    ([1, 2], [1, 2, 3], False),
    ({"unit": "Celsius", "n": 3}, {"unit": "celsius", "n": 3.0}, True),
    ({"n": 1}, {"n": True}, False),
    ({"n": 1}, {"n": 1, "extra": 2}, False),
    (None, None, True),
    (None, 0, False),
    # $any, $strings and $optional inside values
    ({"$any": [3, "three"]}, "Three", True),
    ({"$any": [3, "three"]}, 4, False),
    ({"$any": ["NY"], "$strings": "exact"}, "ny", False),
    ({"$any": ["NY"], "$strings": "exact"}, "NY", True),
    ({"$any": ["New York"], "$strings": "text"}, "new-york", True),
    ({"$optional": True}, "anything", True),
    ({"city": "Paris", "zip": {"$optional": True}}, {"city": "paris"}, True),
    ({"city": "Paris", "zip": {"$any": [75001], "$optional": True}}, {"city": "Paris",
                                                                      "zip": 75002}, False),
])
def test_argument_matches(gold, actual, same):
    assert argument_matches(gold, actual) is same


@pytest.mark.parametrize("gold, got, same", [
    ({"a": 1, "b": {"$optional": True}}, {"a": 1}, True),
    ({"a": 1, "b": {"$optional": True}}, {"a": 1, "b": 99}, True),
    ({"a": 1, "b": {"$any": [2, 3], "$optional": True}}, {"a": 1, "b": 3}, True),
    ({"a": 1, "b": {"$any": [2, 3], "$optional": True}}, {"a": 1, "b": 4}, False),
    ({"a": 1, "b": {"$any": [2, 3]}}, {"a": 1}, False),  # not optional: must be given
    ({"a": 1}, {"a": 1, "c": 2}, False),  # an argument the gold does not know
])
def test_optional_arguments(gold, got, same):
    assert arguments_match("f", got, gold) is same


def test_integer_plan_arguments_over_a_million_are_exact():
    gold = [{"id": "s1", "name": "add", "arguments": {"a": 1234567, "b": 1}}]
    ran = [{"index": 0, "tool_events": [call("add", {"a": 1234568, "b": 1}, 1234569)]}]
    r = match_plan(executed_calls(ran), gold)
    assert (r.exact, r.reason) == (False, "wrong_arguments")


def test_a_reference_inside_any_resolves():
    gold = [{"id": "s1", "name": "add", "arguments": {"a": 2, "b": 3}},
            {"id": "s2", "name": "multiply", "arguments": {"a": {"$any": ["$s1", 6]}, "b": 7}}]
    for first in (5, 6):
        ran = [{"index": 0, "tool_events": [call("add", {"a": 2, "b": 3}, 5)]},
               {"index": 1, "tool_events": [call("multiply", {"a": first, "b": 7}, first * 7)]}]
        assert match_plan(executed_calls(ran), gold).exact


def test_dollar_escape_is_a_literal_string():
    assert resolve({"price": "$$20-$30", "v": "$s1", "plain": "a$b"}, {"s1": 4}) == {
        "price": "$20-$30", "v": 4, "plain": "a$b"}
    assert argument_matches(resolve({"p": "$$20-$30"}, {})["p"], "$20-$30")
    assert check_value({"price": "$$HOME"}, set(), "arguments") is None


def test_gold_plans_run_with_the_first_accepted_value():
    steps = [{"id": "s1", "name": "add", "arguments": {"a": {"$any": [2, 20]}, "b": 3}},
             {"id": "s2", "name": "multiply", "arguments": {"a": "$s1", "b": 2}}]
    run = execute_gold_plan(steps, build_toolset("math"))
    assert (run.results, run.failed, run.skipped) == ({"s1": 5, "s2": 10}, {}, [])


def test_a_gold_plan_runs_one_way_for_validate_and_the_scorer():
    """One executor, one policy: it never raises, runs what can run and says what failed;
    validate reports the failure, the scorer checks references against what ran."""
    from evalpipe.scoring.plan import Executed

    steps = [{"id": "s1", "name": "divide", "arguments": {"a": 1, "b": 0}},
             {"id": "s2", "name": "add", "arguments": {"a": "$s1", "b": 1}},
             {"id": "s3", "name": "search_site", "arguments": {"query": "x"}},
             {"id": "s4", "name": "add", "arguments": {"a": 2, "b": 2}},
             {"id": "s5", "name": "multiply", "arguments": {"a": "$s4", "b": 3}}]
    run = execute_gold_plan(steps)
    assert run.results == {"s4": 4, "s5": 12}
    assert list(run.failed) == ["s1"] and "division by zero" in run.failed["s1"]
    assert run.skipped == ["s2", "s3"]
    # the scorer does not stop on the broken steps, and checks s5's reference by value
    executed = [Executed("add", {"a": 2, "b": 2}, 4, True, 0, 0),
                Executed("multiply", {"a": 4, "b": 3}, 12, True, 1, 1)]
    assert match_plan(executed, steps).exact is False  # s1..s3 were never called
    assert match_plan(executed, steps[3:]).exact
    wrong = [executed[0], Executed("multiply", {"a": 5, "b": 3}, 15, True, 1, 1)]
    assert not match_plan(wrong, steps[3:]).exact


BASE = {"id": "q1", "suite": "arithmetic", "question": "?", "answer": 5}


@pytest.mark.parametrize("arguments, field", [
    ({"a": "$s9", "b": 1}, "gold_calls[0].arguments.a"),
    ({"a": {"$anny": [1]}, "b": 1}, "gold_calls[0].arguments.a.$anny"),
    ({"a": {"$any": []}, "b": 1}, "gold_calls[0].arguments.a.$any"),
    ({"a": {"$any": 3}, "b": 1}, "gold_calls[0].arguments.a.$any"),
    ({"a": {"$any": [1], "$strings": "loose"}, "b": 1}, "gold_calls[0].arguments.a.$strings"),
    ({"a": {"$optional": "yes"}, "b": 1}, "gold_calls[0].arguments.a.$optional"),
    ({"a": {"$strings": "text"}, "b": 1}, "gold_calls[0].arguments.a"),
    ({"a": {"$any": [{"$optional": True}]}, "b": 1}, "gold_calls[0].arguments.a.$any[0]"),
    ({"a": [1, {"$optional": True}], "b": 1}, "gold_calls[0].arguments.a[1].$optional"),
    ({"a": {"$any": ["$s2"]}, "b": 1}, "gold_calls[0].arguments.a.$any[0]"),
    ({"a": {"x": "$nope"}, "b": 1}, "gold_calls[0].arguments.a.x"),
])
def test_bad_gold_forms_name_file_line_and_field(tmp_path, arguments, field):
    path = tmp_path / "q.jsonl"
    record = {**BASE, "gold_calls": [{"id": "s1", "name": "add", "arguments": arguments}]}
    path.write_text(json.dumps({**BASE, "id": "ok"}) + "\n" + json.dumps(record) + "\n")
    with pytest.raises(InputError) as info:
        load_questions(path)
    assert (info.value.file, info.value.line, info.value.field) == (str(path), 2, field)
    assert info.value.exit_code == 2 and info.value.expected


def test_good_gold_forms_load(tmp_path):
    path = tmp_path / "q.jsonl"
    record = {**BASE, "gold_calls": [
        {"id": "s1", "name": "add", "arguments": {"a": {"$any": [2, "two"], "$strings": "exact"},
                                                  "b": 3}},
        {"id": "s2", "name": "search_site", "arguments": {
            "query": "$$5 deals", "k": {"$optional": True},
            "filters": {"$any": [{"tag": "$s1"}], "$optional": True}}}]}
    path.write_text(json.dumps(record) + "\n")
    (q,) = load_questions(path)
    assert q.gold_calls == record["gold_calls"]


def test_validate_reports_every_bad_form_with_file_line_and_field(tmp_path):
    from evalpipe._validate import validate_paths

    good = {**BASE, "gold_calls": [{"id": "s1", "name": "add",
                                    "arguments": {"a": {"$any": [2, 20]}, "b": 3}}]}
    bad = {**BASE, "id": "q2", "gold_calls": [{"id": "s1", "name": "add",
                                               "arguments": {"a": {"$anny": [2]}, "b": 3}}]}
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    errors = validate_paths([str(path)])
    assert errors == [(f"{path}:2: field 'gold_calls[0].arguments.a.$anny': unknown key in a "
                      'gold value form: expected "$any", "$optional", "$strings" (write "$$" '
                      'for a literal "$")')]
