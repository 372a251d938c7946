"""BFCL through evalpipe: the wheel's data, the converter, schema-only tools,
call-only conversations, the `match: bfcl` rules, and BFCL's own AST checker
as the oracle for evalpipe's verdicts."""

from __future__ import annotations

import json
import zipfile
from collections import Counter

import pytest
from bfcl_oracle import AST_CATEGORIES, agreement
from click.testing import CliRunner
from helpers import ScriptedBackend

from evalpipe.backends.base import GenerationSettings
from evalpipe.bfcl import DEFAULT_CATEGORIES, BfclData, import_bfcl
from evalpipe.bfcl.convert import convert_item, gold_value, tool_of
from evalpipe.bfcl.wheel import DATA
from evalpipe.cli import main
from evalpipe.config import parse_config
from evalpipe.engine import CellRuntime, Engine
from evalpipe.errors import InputError
from evalpipe.formats import get_format
from evalpipe.questions import parse_question
from evalpipe.records import ToolCall
from evalpipe.scoring.plan import argument_matches
from evalpipe.scoring.score import score_sample
from evalpipe.tools import build_toolset
from evalpipe.tools.registry import Toolset
from evalpipe.tools.schema_only import schema_tool

FUNCTION = {"name": "weather.get", "description": "Weather for a city.", "parameters": {
    "type": "dict", "required": ["city"], "properties": {
        "city": {"type": "string", "description": "City name"},
        "days": {"type": "integer", "description": "Days ahead", "optional": True},
        "scale": {"type": "float"}, "point": {"type": "tuple", "items": {"type": "integer"}},
        "extra": {"type": "any"}, "opts": {"type": "dict", "properties": {
            "unit": {"type": "string", "enum": ["c", "f"]}}}}}}
ITEM = {"id": "simple_python_9", "function": [FUNCTION],
        "question": [[{"role": "user", "content": "Weather in Paris in 3 days?"}]]}
ANSWER = {"id": "simple_python_9", "ground_truth": [{"weather.get": {
    "city": ["Paris", "paris, france"], "days": [3, ""], "scale": [2], "extra": [""],
    "point": [[1, 2]], "opts": [{"unit": ["c", ""]}, ""]}}]}


# --- converting BFCL items -------------------------------------------------------------------

def test_function_docs_become_json_schema_tools():
    params = tool_of(FUNCTION, "f")["function"]["parameters"]
    assert params["type"] == "object" and params["additionalProperties"] is False
    props = params["properties"]
    assert props["scale"]["type"] == "number" and props["point"]["type"] == "array"
    assert props["point"]["items"] == {"type": "integer"}
    assert "type" not in props["extra"]  # "any": no constraint
    assert props["opts"]["type"] == "object" and props["opts"]["properties"]["unit"]["enum"]
    assert "optional" not in props["days"]


def test_an_enum_on_an_array_lists_the_values_of_its_items():
    doc = {"name": "report", "parameters": {"type": "dict", "properties": {
        "metrics": {"type": "array", "items": {"type": "string"},
                    "enum": ["temperature", "humidity"]},
        "kinds": {"type": "array", "enum": ["a", "b"]},
        "unit": {"type": "string", "enum": ["c", "f"]}}}}
    tool = schema_tool(tool_of(doc, "f"))
    props = tool_of(doc, "f")["function"]["parameters"]["properties"]
    assert props["metrics"] == {"type": "array", "items": {"type": "string",
                                                           "enum": ["temperature", "humidity"]}}
    assert props["kinds"]["items"] == {"enum": ["a", "b"]} and "enum" not in props["kinds"]
    assert props["unit"]["enum"] == ["c", "f"]  # a scalar's enum stays where it is
    toolset = Toolset({"report": tool})
    assert toolset.check(ToolCall("report", {"metrics": ["humidity", "temperature"]})) is None
    assert toolset.check(ToolCall("report", {"metrics": ["co2"]}))[0] == "invalid_arguments"


def test_an_irrelevance_item_may_offer_no_function_and_still_runs():
    item = dict(ITEM, id="live_irrelevance_120-9-0", function=[])
    q = parse_question(convert_item("live_irrelevance", item, None, "x:1"), file="q.jsonl",
                       line=1)
    assert q.tools == [] and q.gold_calls == []
    sample = _run(_cell(ScriptedBackend(lambda p: "Nothing to call.")), q)
    assert sample.stop_reason == "answered"
    assert score_sample(sample.to_dict(), q)["category"] == "correct"
    with pytest.raises(InputError, match="list of function docs"):
        convert_item("live_irrelevance", dict(item, function=None), None, "x:1")


def test_possible_answers_become_gold_forms():
    record = convert_item("simple_python", ITEM, ANSWER, "x:1")
    args = record["gold_calls"][0]["arguments"]
    assert args["city"] == {"$any": ["Paris", "paris, france"]}
    assert args["days"] == {"$any": [3], "$optional": True}
    assert args["scale"] == 2.0 and type(args["scale"]) is float  # a float parameter
    assert args["extra"] == {"$any": [""], "$optional": True}  # BFCL's [""]: omit it
    assert args["point"] == [1, 2]
    assert args["opts"] == {"$any": [{"unit": {"$any": ["c"], "$optional": True}}],
                            "$optional": True}
    q = parse_question(record, file="x.jsonl", line=1)
    assert q.answer_type == "calls" and q.tools[0]["function"]["name"] == "weather.get"


def test_irrelevance_expects_no_call_and_other_prompts_are_skipped():
    record = convert_item("irrelevance", ITEM, None, "x:1")
    assert record["gold_calls"] == [] and record["suite"] == "bfcl_irrelevance"
    two = dict(ITEM, question=[[{"role": "system", "content": "s"}, *ITEM["question"][0]]])
    assert convert_item("simple_python", two, ANSWER, "x:1") is None
    with pytest.raises(InputError, match="possible answer"):
        convert_item("simple_python", ITEM, None, "x:1")


def test_a_bare_value_and_a_single_value_are_literals():
    assert gold_value([10]) == 10
    assert gold_value("x") == "x"
    assert gold_value([1, 2], "float") == {"$any": [1.0, 2.0]}
    assert gold_value(["$20"]) == "$$20"  # a literal "$", not a step reference


# --- the wheel: fetched once, bad files named --------------------------------------------------

def _wheel(tmp_path, files):
    path = tmp_path / "bfcl_eval-0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(f"{DATA}/{name}", text)
    return path


def test_import_writes_question_files_that_load(tmp_path):
    wheel = _wheel(tmp_path, {"BFCL_v4_simple_python.json": json.dumps(ITEM) + "\n",
                              "possible_answer/BFCL_v4_simple_python.json": json.dumps(ANSWER)})
    summary = import_bfcl(["simple_python"], tmp_path / "out", wheel=wheel)
    assert summary == {"simple_python": {"questions": 1, "skipped": 0}}
    line = (tmp_path / "out" / "simple_python.jsonl").read_text().splitlines()
    assert json.loads(line[0])["id"] == "simple_python_9"
    from evalpipe._validate import validate_file

    assert validate_file(tmp_path / "out" / "simple_python.jsonl") == []  # its own tools count


@pytest.mark.parametrize("files, message", [
    ({}, "the wheel has no"),
    ({"BFCL_v4_simple_python.json": json.dumps(ITEM) + "\n{oops\n"}, ":2: not valid JSON"),
    ({"BFCL_v4_simple_python.json": json.dumps(ITEM)}, "the wheel has no .*possible_answer"),
])
def test_bad_or_missing_bfcl_files_are_input_errors(tmp_path, files, message):
    wheel = _wheel(tmp_path, files)
    with pytest.raises(InputError, match=message):
        import_bfcl(["simple_python"], tmp_path / "out", wheel=wheel)
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_import_command_exits_2_on_a_file_that_is_not_a_wheel(tmp_path):
    bad = tmp_path / "bad.whl"
    bad.write_text("not a zip")
    result = CliRunner().invoke(main, ["import", "bfcl", "--wheel", str(bad),
                                       "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "not a readable wheel" in result.output


# --- schema-only tools and call-only conversations ----------------------------------------------

def _question(**kw):
    record = convert_item("simple_python", ITEM, ANSWER, "x:1")
    return parse_question({**record, **kw}, file="q.jsonl", line=1)


def _cell(backend, call_only=True, stub=None):
    toolset = build_toolset("question")
    toolset.stub_result = stub
    return CellRuntime("m/hermes/question/no-rag", "fp", {"toolset": "question"}, backend,
                       get_format("hermes"), toolset, GenerationSettings(), call_only=call_only)


def _run(cell, q):
    return next(s for ended in Engine().run(cell, [q], "run") for s in ended)


CALL = ('<tool_call>{"name": "weather.get", "arguments": {"city": "Paris", "scale": 2, '
        '"point": [1, 2]}}</tool_call>')


def test_schema_only_call_is_validated_never_run_and_ends_the_conversation():
    backend = ScriptedBackend(lambda p: CALL)
    sample = _run(_cell(backend), _question())
    assert sample.stop_reason == "call_only" and len(sample.turns) == 1 and backend.calls == 1
    (event,) = sample.turns[0]["tool_events"]
    assert event["error"] is None and event["result"] is None
    assert "weather.get" in sample.settings["tools_offered"]
    assert "weather.get" in sample.messages[0]["content"] or "weather.get" in json.dumps(
        sample.turns)  # the tool was offered in the prompt


def test_call_only_gives_no_second_chance_after_a_malformed_call():
    sample = _run(_cell(ScriptedBackend(lambda p: "<tool_call>{oops</tool_call>")), _question())
    assert len(sample.turns) == 1 and sample.turns[0]["parse_errors"]


def test_stub_mode_returns_the_stub_and_the_loop_goes_on():
    replies = iter([CALL, "It is sunny."])
    sample = _run(_cell(ScriptedBackend(lambda p: next(replies)), call_only=False,
                        stub={"ok": True}), _question())
    assert sample.stop_reason == "answered" and len(sample.turns) == 2
    assert sample.turns[0]["tool_events"][0]["result"] == {"ok": True}
    assert sample.final_answer == "It is sunny."


def test_schema_only_arguments_are_checked_against_the_schema():
    toolset = Toolset({"weather.get": schema_tool(tool_of(FUNCTION, "f"))})
    assert toolset.check(ToolCall("weather.get", {"city": 3}))[0] == "invalid_arguments"
    assert toolset.check(ToolCall("weather.get", {"city": "Paris", "zzz": 1}))[0] == \
        "invalid_arguments"
    assert toolset.check(ToolCall("weather.get", {"city": "Paris", "days": 2})) is None


def test_a_question_tool_that_is_no_json_schema_is_an_input_error():
    bad = {"type": "function", "function": {"name": "f", "parameters": {"type": "dict"}}}
    with pytest.raises(InputError, match=r"q.jsonl:1: field 'tools\[0\]'.*not a JSON Schema"):
        _question(tools=[bad])


# --- scoring: the calls are the answer ----------------------------------------------------------

def test_a_calls_question_is_correct_when_the_calls_match():
    q = _question()
    good = _run(_cell(ScriptedBackend(lambda p: CALL)), q).to_dict()
    assert score_sample(good, q)["category"] == "correct"
    wrong = CALL.replace("Paris", "Rome")
    bad = _run(_cell(ScriptedBackend(lambda p: wrong)), q).to_dict()
    scored = score_sample(bad, q)
    assert scored["category"] == "wrong_plan" and scored["exact"] is False


def test_irrelevance_is_correct_without_a_call_and_wrong_with_one():
    record = convert_item("irrelevance", ITEM, None, "x:1")
    q = parse_question(record, file="q.jsonl", line=1)
    quiet = _run(_cell(ScriptedBackend(lambda p: "I cannot help with that.")), q).to_dict()
    assert score_sample(quiet, q)["exact"] is True
    called = _run(_cell(ScriptedBackend(lambda p: CALL)), q).to_dict()
    assert score_sample(called, q)["exact"] is False


def test_match_bfcl_uses_python_types_and_bfcl_string_normalisation():
    def same(gold, got, rules):
        return argument_matches({"x": gold}, {"x": got}, rules=rules)

    assert same(5, 5.0, "evalpipe") and not same(5, 5.0, "bfcl")  # integral float for an int
    assert same(5.0, 5, "bfcl")  # an int for a float parameter
    assert same(5, "5", "evalpipe") and not same(5, "5", "bfcl")
    assert same("New York", "new-york", "bfcl") and same("New York", "NEWYORK", "bfcl")
    assert not same(True, 1, "bfcl") and not same(0.1, 0.1000001, "bfcl")
    assert same(0.1, 0.1000000001, "evalpipe")  # evalpipe's relative tolerance
    assert same({"$any": ["a"], "$optional": True}, "A", "bfcl")


def test_rule_set_reaches_the_verdict_through_score_sample():
    q = _question()
    reply = CALL.replace('"Paris"', '"ParisFrance"')  # BFCL drops spaces and commas
    sample = _run(_cell(ScriptedBackend(lambda p: reply)), q).to_dict()
    assert score_sample(sample, q)["exact"] is False
    assert score_sample(sample, q, rules="bfcl")["exact"] is True


def test_config_keys_for_schema_tools_and_match():
    config = parse_config({"questions": ["q.jsonl"], "schema_tools": {"mode": "stub",
                                                                      "result": "done"},
                           "match": "bfcl"})
    assert config.schema_tools.model_dump() == {"mode": "stub", "result": "done"}
    assert config.match == "bfcl"
    assert parse_config({"questions": ["q.jsonl"]}).schema_tools.mode == "call_only"
    with pytest.raises(InputError, match="match"):
        parse_config({"questions": ["q.jsonl"], "match": "leaderboard"})


# --- the oracle: BFCL's own AST checker from the same wheel -------------------------------------

@pytest.fixture(scope="module")
def oracle_rows():
    with BfclData() as data:  # the cached wheel; fetched with pip download --no-deps once
        return agreement(data, AST_CATEGORIES)


# Integral floats for integers: whether evalpipe's schema check refuses 5.0 for an
# integer is evalpipe's own definition (docs/bfcl.md); match: bfcl must agree either way.
DIFFERENT_BY_DEFINITION = {"integral_float_for_int"}


def _rate(rows, key):
    return sum(r["bfcl"] == r[key] for r in rows) / len(rows)


def test_evalpipe_agrees_with_bfcl_where_both_define_the_same_thing(oracle_rows):
    kinds = Counter(r["perturbation"] for r in oracle_rows)
    assert len(kinds) == 13 and len(oracle_rows) > 8000
    assert {r["category"] for r in oracle_rows} == set(AST_CATEGORIES)
    gold = [r for r in oracle_rows if r["perturbation"] == "gold"]
    assert sum(r["bfcl"] for r in gold) / len(gold) > 0.99  # the harness builds passing calls
    same = [r for r in oracle_rows if r["perturbation"] not in DIFFERENT_BY_DEFINITION]
    assert _rate(same, "evalpipe") >= 0.995
    assert _rate(oracle_rows, "match_bfcl") >= 0.995
    for kind in kinds:  # no perturbation class is badly off under match: bfcl
        assert _rate([r for r in oracle_rows if r["perturbation"] == kind], "match_bfcl") > 0.95


def test_match_bfcl_refuses_an_integral_float_for_an_integer_like_bfcl(oracle_rows):
    rows = [r for r in oracle_rows if r["perturbation"] == "integral_float_for_int"]
    assert len(rows) > 500 and not any(r["bfcl"] for r in rows)
    assert _rate(rows, "match_bfcl") == 1.0


def test_every_remaining_disagreement_is_a_schema_check_bfcl_does_not_make(oracle_rows):
    """BFCL never checks enums, and accepts a value whose type is that of its possible
    answer even when the declared type differs; evalpipe's JSON Schema check does both."""
    from bfcl_oracle import schema_problems

    for r in oracle_rows:
        if r["bfcl"] != r["match_bfcl"]:
            assert r["bfcl"] and not r["match_bfcl"], r
            problems = schema_problems(r)
            assert problems and all("is not one of" in p or "is not of type" in p
                                    for p in problems), r


def test_a_config_names_bfcl_categories_that_load_from_the_wheel(tmp_path):
    from evalpipe.questions import load_questions

    config = parse_config({"questions": ["bfcl:parallel"]}, base=tmp_path)
    assert config.questions == ["bfcl:parallel"]  # not taken for a path next to the config
    questions = load_questions("bfcl:parallel")
    assert len(questions) == 200 and questions[0].source == "bfcl:parallel:1"
    assert all(q.answer_type == "calls" and len(q.gold_calls) >= 2 for q in questions)
    for category in DEFAULT_CATEGORIES:  # every item the importer writes loads back
        assert load_questions(f"bfcl:{category}")
    # four live items offer no function at all; the category imports all the same
    live = load_questions("bfcl:live_irrelevance")
    assert len(live) == 834 and sum(not q.tools for q in live) == 4


def test_the_run_table_shows_bfcl_accuracy_per_category():
    from evalpipe._report.tables import score_table

    def group(cell, suite, exact, valid):
        return {"cell_id": cell, "suite": suite, "n": 4, "categories": {"correct": exact},
                "rates": {"exact": {"rate": exact / 4, "n": 4},
                          "format_valid": {"rate": valid / 2, "n": 2}}}

    scores = {"k": 3, "groups": [group("m/hermes", "all", 1, 2),
                                 group("m/hermes", "bfcl_parallel", 1, 2),
                                 group("m/xml", "bfcl_parallel", 3, 1)]}
    text = score_table(scores)
    assert "BFCL accuracy per category" in text
    row = next(line for line in text.splitlines() if line.startswith("| parallel"))
    assert "25.0% (1/4), valid 100.0% (2/2)" in row and "75.0% (3/4)" in row
    assert "BFCL" not in score_table({"k": 3, "groups": [group("m", "all", 1, 2)]})
    # scored by evalpipe's own argument rules, the table says it is not the leaderboard's
    assert "NOT comparable with the BFCL leaderboard" in text
    assert "NOT comparable" not in score_table({**scores, "match": "bfcl"})


def test_the_bfcl_config_scores_by_bfcl_rules():
    """configs/bfcl.yaml is for leaderboard-comparable numbers: BFCL's argument rules."""
    from helpers import REPO

    from evalpipe.config import load_config

    assert load_config(REPO / "configs" / "bfcl.yaml").match == "bfcl"


def test_a_plan_of_the_questions_own_tool_named_like_a_built_in_is_not_replayed(tmp_path):
    from evalpipe._validate import validate_file

    doc = {"name": "multiply", "parameters": {"type": "dict", "properties": {
        "a": {"type": "integer"}, "b": {"type": "integer"}}}}
    item = dict(ITEM, id="live_simple_47-20-0", function=[doc])
    answer = {"id": item["id"], "ground_truth": [{"multiply": {"a": [3], "b": [2]}}]}
    path = tmp_path / "live.jsonl"
    path.write_text(json.dumps(convert_item("live_simple", item, answer, "x:1")) + "\n")
    assert validate_file(path) == []  # BFCL's answer is the call, not the product
