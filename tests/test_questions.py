"""Question loading through HF datasets, with line- and field-precise errors."""

from __future__ import annotations

import json

import pytest

from evalpipe.errors import InputError
from evalpipe.questions import load_questions

GOOD = {"id": "a1", "suite": "arithmetic", "question": "1234 nhân 5678?", "answer": 7006652,
        "lang": "vi", "gold_calls": [{"id": "s1", "name": "multiply",
                                      "arguments": {"a": 1234, "b": 5678}}]}


def write(tmp_path, lines):
    path = tmp_path / "q.jsonl"
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return path


def test_mixed_answer_types_load_and_default_answer_type(tmp_path):
    text = {"id": "t1", "suite": "control", "question": "Capital of France?", "answer": "Paris"}
    qs = load_questions(write(tmp_path, [GOOD, "", text]))
    assert [q.answer_type for q in qs] == ["number", "text"]
    assert qs[0].answer == 7006652 and qs[0].needs_tools and not qs[1].needs_tools
    assert qs[1].source.endswith(":3")  # the blank line still counts


@pytest.mark.parametrize("bad, field", [
    ({**GOOD, "id": ""}, "id"),
    ({k: v for k, v in GOOD.items() if k != "answer"}, "answer"),
    ({**GOOD, "answer_type": "date"}, "answer_type"),
    ({**GOOD, "aliases": "x"}, "aliases"),
    ({**GOOD, "gold_calls": [{"id": "s1", "name": "add", "arguments": {"a": "$s2", "b": 1}}]},
     "gold_calls[0].arguments.a"),
    ({**GOOD, "gold_passages": [{"doc": "a.md", "start": 5, "end": 2}]}, "gold_passages[0]"),
    ({**GOOD, "extra": 1}, "extra"),
])
def test_bad_records_name_file_line_and_field(tmp_path, bad, field):
    path = write(tmp_path, [GOOD | {"id": "ok"}, bad])
    with pytest.raises(InputError) as err:
        load_questions(path)
    assert (err.value.line, err.value.field) == (2, field)
    assert str(path) in str(err.value)


def test_bad_json_and_duplicates(tmp_path):
    with pytest.raises(InputError, match=r":2: not valid JSON"):
        load_questions(write(tmp_path, [GOOD, '{"id": "x",']))
    with pytest.raises(InputError, match="duplicate id 'a1'"):
        load_questions(write(tmp_path, [GOOD, GOOD]))


def test_parquet_files_load_too(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "q.parquet"
    pq.write_table(pa.Table.from_pylist([{"id": "t1", "suite": "control", "question": "Hi?",
                                          "answer": "hello"}]), path)
    (q,) = load_questions(path)
    assert q.answer == "hello" and q.source.endswith(":1")


def test_a_file_with_a_byte_order_mark_is_read_alike_by_validate_and_run(tmp_path):
    """Editors on Windows start a UTF-8 file with a BOM: `validate` and `run` read it the
    same way (one reader, evalpipe.jsonl.records), and a bad line names the same line."""
    import evalpipe
    from evalpipe.questions import load_questions

    path = tmp_path / "bom.jsonl"
    lines = [json.dumps({"id": "a", "suite": "s", "question": "1+1?", "answer": 2}),
             json.dumps({"id": "b", "suite": "s", "question": "2+2?", "answer": 4})]
    path.write_bytes(b"\xef\xbb\xbf" + "\n".join(lines).encode() + b"\n")
    assert evalpipe.validate([path]) == []
    assert [q.id for q in load_questions(path)] == ["a", "b"]
    path.write_bytes(b"\xef\xbb\xbf" + f"{lines[0]}\n{{bad\n".encode())
    [problem] = evalpipe.validate([path])
    with pytest.raises(InputError) as err:
        load_questions(path)
    assert problem == str(err.value) and err.value.line == 2
