"""Question sets in the shape they have: CSV, Parquet, JSON and JSONL files with a field
mapping in the config (`questions: [{path, fields, values}]`), read by one path for
`run` and `validate`, and checked with the same file:row:field errors."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner
from helpers import ScriptedBackend, last_user

from evalpipe import runner
from evalpipe._validate import validate
from evalpipe.cli import main
from evalpipe.config import load_config
from evalpipe.errors import InputError
from evalpipe.questions import load_questions

CALLS = [{"id": "s1", "name": "multiply", "arguments": {"a": 6, "b": 7}}]
CSV = (
    "qid,prompt,expected,kind,topic,calls,notes\n"
    f'm1,What is 6 times 7?,42,number,maths,"{json.dumps(CALLS).replace(chr(34), 2 * chr(34))}",'
    "checked\n"
    "c1,What is the capital of France?,Paris,text,geo,,\n"
    "c2,What is the capital of Vietnam?,Hanoi,text,geo,,from an atlas\n"
)
CSV_FIELDS = {"id": "qid", "question": "prompt", "answer": "expected", "answer_type": "kind",
              "suite": "topic", "gold_calls": "calls"}


def answers(prompt: str) -> str:
    question = last_user(prompt)
    return {"What is 6 times 7?": "42", "What is the capital of France?": "Paris"}.get(
        question, "I do not know.")


def run_config(tmp_path, monkeypatch, entry) -> dict:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"name": "mine", "questions": [entry], "models": ["scripted"],
                                   "toolsets": ["none"], "retrieval": ["none"]}))
    run_dir = runner.execute_run(load_config(cfg), tmp_path / "out", use_cache=False,
                                 backends=lambda model: ScriptedBackend(answers))
    return json.loads((run_dir / "scores.json").read_text())


def test_a_csv_with_a_mapping_runs_end_to_end(tmp_path, monkeypatch):
    (tmp_path / "mine.csv").write_text(CSV)
    entry = {"path": str(tmp_path / "mine.csv"), "fields": CSV_FIELDS, "values": {"lang": "en"}}
    questions = {q.id: q for q in load_questions(entry)}
    assert questions["m1"].answer == 42 and questions["m1"].answer_type == "number"
    assert questions["m1"].gold_calls == CALLS  # a JSON cell decoded
    assert questions["c1"].gold_calls is None and questions["c1"].suite == "geo"
    assert questions["c2"].source == f"{tmp_path / 'mine.csv'}:4"  # the row's line, header 1
    scores = run_config(tmp_path, monkeypatch, entry)
    verdicts = {s["question_id"]: s["exact"] for s in scores["samples"]}
    assert verdicts == {"m1": True, "c1": True, "c2": False}
    assert validate([entry]) == []


def test_a_parquet_file_with_a_mapping_runs_end_to_end(tmp_path, monkeypatch):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    table = pa.table({
        "prompt": ["What is 6 times 7?", "What is the capital of France?"],
        "target": [42, 7],  # numbers stay numbers in Parquet
        "also": [["forty-two"], []],  # a list column
        "plan": [json.dumps(CALLS), None],
    })
    pq.write_table(table, tmp_path / "mine.parquet")
    entry = {"path": str(tmp_path / "mine.parquet"),
             "fields": {"id": "$row", "question": "prompt", "answer": "target",
                        "aliases": "also", "gold_calls": "plan"},
             "values": {"suite": "mixed", "lang": "en"}}
    questions = load_questions(entry)
    assert [q.id for q in questions] == ["mine-1", "mine-2"]
    assert questions[0].answer_type == "number" and questions[0].aliases == ["forty-two"]
    assert questions[0].gold_calls == CALLS and questions[1].gold_calls is None
    scores = run_config(tmp_path, monkeypatch, entry)
    assert {s["question_id"]: s["exact"] for s in scores["samples"]} == {
        "mine-1": True, "mine-2": False}


def test_a_json_array_file_reads_like_jsonl(tmp_path):
    rows = [{"id": "a", "suite": "s", "question": "Q?", "answer": 1},
            {"id": "b", "suite": "s", "question": "R?", "answer": "x"}]
    (tmp_path / "q.json").write_text(json.dumps(rows, indent=2))
    assert [(q.id, q.answer_type) for q in load_questions(tmp_path / "q.json")] == [
        ("a", "number"), ("b", "text")]


def test_bad_rows_are_named_by_file_row_and_field_in_run_and_validate(tmp_path):
    bad = CSV + 'x1,What?,1,number,maths,"[{""id"": ""s1"",",\n' + "x2,Why?,,text,geo,,\n"
    (tmp_path / "bad.csv").write_text(bad)
    entry = {"path": str(tmp_path / "bad.csv"), "fields": CSV_FIELDS}
    problems = validate([entry])
    assert len(problems) == 2, problems  # every bad row, not only the first
    assert problems[0].startswith(f"{tmp_path / 'bad.csv'}:5: field 'gold_calls': text that "
                                  "is not JSON")
    assert problems[1].startswith(f"{tmp_path / 'bad.csv'}:6: field 'answer': an empty cell "
                                  "(column 'expected')")
    with pytest.raises(InputError) as err:  # run stops at the first, with the same words
        load_questions(entry)
    assert str(err.value) == problems[0]


def test_a_mapped_column_the_file_lacks_names_the_columns(tmp_path):
    (tmp_path / "mine.csv").write_text(CSV)
    entry = {"path": str(tmp_path / "mine.csv"), "fields": {**CSV_FIELDS, "question": "text"}}
    with pytest.raises(InputError) as err:
        load_questions(entry)
    message = str(err.value)
    assert message.startswith(f"{tmp_path / 'mine.csv'}:2: field 'question': no column 'text'")
    assert "'prompt'" in message and "'notes'" in message


def test_a_misspelt_field_in_the_mapping_stops_the_config(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("questions:\n  - path: mine.csv\n    fields:\n      question: prompt\n"
                   "      anwser: expected\nmodels: [m]\n")
    with pytest.raises(InputError) as err:
        load_config(cfg)
    assert str(err.value).startswith(f"{cfg}:5: field 'questions[0].fields.anwser': unknown "
                                     "question field 'anwser' (did you mean answer?)")


def test_validate_config_reads_the_mapped_files(tmp_path, monkeypatch):
    (tmp_path / "mine.csv").write_text(CSV)
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({
        "questions": [{"path": "mine.csv", "fields": CSV_FIELDS}], "models": ["m"]}))
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, ["validate", "--config", "c.yaml"])
    assert res.exit_code == 0, res.output
    assert "ok: no problems found" in res.output
