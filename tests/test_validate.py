"""evalpipe._validate finds every kind of problem, on the right line and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalpipe._validate import number_pattern, validate_paths

DOC = ("# Server notes\n\n- lang: en\n\nThe database server ong-chua has 64 GB of RAM. "
       "It served 7,006,652 queries yesterday and 7.006.652 the day before.\n"
       "Disk: 1,92 TB NVMe. Nginx version 1.24 runs on cua-to.\n")


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "site"
    root.mkdir()
    (root / "notes.md").write_text(DOC, encoding="utf-8")
    return root


def span(text: str, doc: str = "notes.md") -> dict:
    start = DOC.index(text)
    return {"doc": doc, "start": start, "end": start + len(text)}


def good(i: int = 1, **over) -> dict:
    rec = {"id": f"q{i}", "suite": "plan", "question": "Compute (12 + 30) * 7.", "answer": 294,
           "lang": "en",
           "gold_calls": [{"id": "s1", "name": "add", "arguments": {"a": 12, "b": 30}},
                          {"id": "s2", "name": "multiply", "arguments": {"a": "$s1", "b": 7}}]}
    rec.update(over)
    return rec


def rag(i: int = 1, **over) -> dict:
    rec = {"id": f"r{i}", "suite": "site_rag", "question": "How much RAM has ong-chua?",
           "answer": 64, "answer_type": "number", "lang": "en", "gold_calls": [],
           "gold_passages": [span("ong-chua has 64 GB of RAM")]}
    rec.update(over)
    return rec


def write(tmp_path: Path, lines: list, name: str = "q.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x, ensure_ascii=False))
                            + "\n" for x in lines), encoding="utf-8")
    return path


def check(path: Path, corpus: Path) -> list[str]:
    return validate_paths([str(path)], corpus_root=str(corpus))


def test_valid_file_has_no_errors(tmp_path, corpus):
    path = write(tmp_path, [good(1), rag(2), good(3, answer="294")])
    assert check(path, corpus) == []


def test_bad_json_line_is_reported_with_its_line_and_later_lines_still_checked(tmp_path, corpus):
    bad_later = good(4)
    del bad_later["question"]
    path = write(tmp_path, [good(1), "", '{"id": "q2", "suite": ', bad_later])
    errors = check(path, corpus)
    assert len(errors) == 2
    assert errors[0].startswith(f"{path}:3: not valid JSON")
    assert "expected one JSON object per line" in errors[0]
    assert errors[1].startswith(f"{path}:4: field 'question': missing required field")


def test_missing_field(tmp_path, corpus):
    rec = good(1)
    del rec["answer"]
    errors = check(write(tmp_path, [rec]), corpus)
    assert len(errors) == 1
    assert ":1: field 'answer': missing required field: expected a string or number" in errors[0]


def test_duplicate_id_names_both_lines(tmp_path, corpus):
    errors = check(write(tmp_path, [good(1), good(2), good(1)]), corpus)
    assert errors == [(f"{tmp_path / 'q.jsonl'}:3: field 'id': duplicate id 'q1' (first on line "
                      "1): expected ids unique within a file")]


def test_unknown_tool_with_suggestion(tmp_path, corpus):
    rec = good(1)
    rec["gold_calls"][1]["name"] = "multiplyy"
    errors = check(write(tmp_path, [rec]), corpus)
    assert len(errors) == 1
    assert ":1: field 'gold_calls[1].name': unknown tool 'multiplyy'" in errors[0]
    assert "did you mean 'multiply'" in errors[0]


def test_search_site_is_a_known_tool_and_is_not_replayed(tmp_path, corpus):
    rec = rag(1, gold_calls=[{"id": "s1", "name": "search_site",
                              "arguments": {"query": "ong-chua RAM"}}])
    assert check(write(tmp_path, [rec]), corpus) == []


def test_forward_reference(tmp_path, corpus):
    rec = good(1, gold_calls=[
        {"id": "s1", "name": "multiply", "arguments": {"a": "$s2", "b": 7}},
        {"id": "s2", "name": "add", "arguments": {"a": 12, "b": 30}}])
    errors = check(write(tmp_path, [rec]), corpus)
    assert len(errors) == 1
    assert "field 'gold_calls[0].arguments.a': reference '$s2' names no earlier step" in errors[0]


def test_wrong_plan_answer(tmp_path, corpus):
    errors = check(write(tmp_path, [good(1), good(2, answer=295)]), corpus)
    assert len(errors) == 1
    assert ":2: field 'answer': got 295 but executing gold_calls gives 294" in errors[0]


def test_plan_answer_tolerance_is_relative(tmp_path, corpus):
    rec = good(1, question="98765 / 25", answer=3950.6 * (1 + 1e-12),
               gold_calls=[{"id": "s1", "name": "divide", "arguments": {"a": 98765, "b": 25}}])
    assert check(write(tmp_path, [rec]), corpus) == []
    rec["answer"] = 3950.61
    assert len(check(write(tmp_path, [rec]), corpus)) == 1


def test_plan_that_the_tools_refuse(tmp_path, corpus):
    rec = good(1, answer=0, gold_calls=[{"id": "s1", "name": "divide",
                                         "arguments": {"a": 1, "b": 0}}])
    errors = check(write(tmp_path, [rec]), corpus)
    assert len(errors) == 1
    assert "field 'gold_calls': the gold plan fails: step s1 (divide)" in errors[0]


def test_plan_arguments_that_fail_the_schema(tmp_path, corpus):
    rec = good(1, gold_calls=[{"id": "s1", "name": "add", "arguments": {"a": 1, "c": 2}}])
    errors = check(write(tmp_path, [rec]), corpus)
    assert len(errors) == 1 and "the gold plan fails" in errors[0]


def test_span_not_containing_the_answer(tmp_path, corpus):
    rec = rag(1, answer=32)
    errors = check(write(tmp_path, [rec]), corpus)
    assert len(errors) == 1
    assert ":1: field 'gold_passages[0]': span" in errors[0]
    assert "does not contain the answer: expected a span holding 32" in errors[0]


def test_unknown_doc_and_span_past_the_end(tmp_path, corpus):
    rec = rag(1, gold_passages=[{"doc": "note.md", "start": 0, "end": 10},
                                {"doc": "notes.md", "start": 0, "end": len(DOC) + 5}])
    errors = check(write(tmp_path, [rec]), corpus)
    assert len(errors) == 2
    assert "field 'gold_passages[0].doc': unknown document 'note.md' (did you mean " \
           "'notes.md'?)" in errors[0]
    assert f"field 'gold_passages[1].end': {len(DOC) + 5} is past the end" in errors[1]


def test_missing_corpus_is_reported_per_span(tmp_path):
    errors = validate_paths([str(write(tmp_path, [rag(1)]))],
                            corpus_root=str(tmp_path / "nowhere"))
    assert len(errors) == 1 and "corpus folder not found" in errors[0]


@pytest.mark.parametrize(("answer", "passage", "aliases"), [
    (7006652, "It served 7,006,652 queries", []),
    (7006652, "7.006.652 the day before", []),
    (1.92, "Disk: 1,92 TB NVMe", []),
    ("nginx 1.24", "Nginx version 1.24 runs", ["1.24"]),
    ("NGINX", "Nginx version 1.24 runs", []),
])
def test_span_contains_answer_in_its_written_forms(tmp_path, corpus, answer, passage, aliases):
    rec = rag(1, answer=answer, aliases=aliases,
              answer_type="number" if isinstance(answer, (int, float)) else "text",
              gold_passages=[span(passage)])
    assert check(write(tmp_path, [rec]), corpus) == []


def test_number_pattern_needs_whole_numbers():
    assert number_pattern(16).search("16 GB")
    assert not number_pattern(16).search("160 GB")
    assert not number_pattern(16).search("1.16 GB")
    assert not number_pattern(16).search("16.5 GB")
    assert number_pattern(4870).search("4.870 TPS")
    assert number_pattern(-22822.4).search("gives -22822,4")
    assert number_pattern(0.5).search("0,50")


def test_abstain_questions_need_no_span(tmp_path, corpus):
    rec = {"id": "a1", "suite": "site_rag", "question": "Who owns the cat?",
           "answer": "I don't know", "answer_type": "abstain", "gold_calls": []}
    assert check(write(tmp_path, [rec]), corpus) == []


def test_folder_expands_to_jsonl_files_and_errors_name_each_file(tmp_path, corpus):
    folder = tmp_path / "sets"
    folder.mkdir()
    write(folder, [good(1)], "a.jsonl")
    write(folder, [good(1, answer=1)], "b.jsonl")
    (folder / "notes.txt").write_text("not a question file")
    errors = validate_paths([str(folder)], corpus_root=str(corpus))
    assert len(errors) == 1 and errors[0].startswith(f"{folder / 'b.jsonl'}:1: field 'answer'")


def test_missing_file_and_empty_file(tmp_path, corpus):
    empty = write(tmp_path, [], "empty.jsonl")
    errors = validate_paths([str(tmp_path / "nope.jsonl"), str(empty)],
                            corpus_root=str(corpus))
    assert len(errors) == 2
    assert "file not found" in errors[0] and "no questions" in errors[1]
