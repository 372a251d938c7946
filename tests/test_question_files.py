"""Question files read as written, checked alike by `evalpipe validate` and `evalpipe run`
(both through the real command line): text that is not valid Unicode, CSV cells such as
`NA` and `007`, every kind of broken CSV, Parquet and JSON file, and the size limits
(question_limits). A bad file is one line naming file, line or row, and field, exit 2,
and no run folder; nothing is copied into a cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
import yaml
from fake_openai import FakeOpenAI
from helpers import REPO

from evalpipe.datafiles import QuestionLimits
from evalpipe.errors import InputError
from evalpipe.questions import load_questions

GOOD = {"id": "q1", "suite": "s", "question": "What is 6 times 7?", "answer": 42}
DEAD = "http://127.0.0.1:9/v1"  # nothing listens: a run that got past its questions fails


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "EVALPIPE_CACHE": str(cwd / "cache"),
           "HF_HOME": str(cwd / "hf"), **(env or {})}
    return subprocess.run([sys.executable, "-m", "evalpipe", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, check=False, timeout=300)


def config(tmp_path: Path, entry, url: str = DEAD, **extra) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({
        "name": "files", "questions": [entry],
        "models": [{"id": "fake", "backend": "openai", "base_url": url, "stream": "off",
                    "max_retries": 0, "timeout_s": 30}],
        "formats": ["openai"], "toolsets": ["none"], "retrieval": ["none"], "max_turns": 1,
        **extra}))
    return path


def refused_alike(tmp_path: Path, entry, message: str, *sets: str) -> None:
    """`validate --config` and `run` both exit 2 with one line that starts with
    `message`, and the run leaves no folder behind."""
    cfg = config(tmp_path, entry)
    options = [item for s in sets for item in ("--set", s)]
    checked = cli("validate", "--config", str(cfg), *options, cwd=tmp_path)
    assert checked.returncode == 2, checked.stdout + checked.stderr
    assert checked.stderr.splitlines()[0].startswith(message), checked.stderr
    ran = cli("run", "--config", str(cfg), "--out", str(tmp_path / "out"), "--no-cache",
              *options, cwd=tmp_path)
    assert ran.returncode == 2, ran.stderr
    assert ran.stderr.splitlines() == [ran.stderr.strip()], ran.stderr  # one line
    assert ran.stderr.startswith(f"error: {message}"), ran.stderr
    assert "Traceback" not in ran.stderr and "generating the dataset" not in ran.stderr
    assert not (tmp_path / "out").exists()


def jsonl(path: Path, *records) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n"
                            for r in records), encoding="utf-8")
    return path


# -- valid Unicode -----------------------------------------------------------------------

@pytest.mark.parametrize("field, value", [
    ("question", "What is \ud800 6 times 7?"),
    ("answer", "forty-two \udfff"),
    ("id", "q\ud83d"),
    ("suite", "\udc00"),
    ("lang", "v\ud800"),
    ("aliases[1]", ["ok", "x\ud800"]),
    ("tags[0]", ["\ud800"]),
    ("gold_calls[0].arguments.a", [{"id": "s1", "name": "multiply",
                                    "arguments": {"a": "\ud800", "b": 7}}]),
    ("tools[0].function.description", [{"type": "function", "function": {
        "name": "f", "description": "d\ud800", "parameters": {"type": "object"}}}]),
])
def test_a_lone_surrogate_in_any_field_is_refused_by_validate_and_run(tmp_path, field, value):
    """A JSON "\\ud800" escape without its pair decodes to text no UTF-8 file can hold:
    before, `validate` said ok and `run` crashed writing questions.jsonl (exit 1, a
    failed run folder)."""
    top = field.split("[")[0].split(".")[0]
    record = {**GOOD, top: value}
    path = jsonl(tmp_path / "q.jsonl", record)  # json.dumps writes the escapes
    refused_alike(tmp_path, str(path), f"{path}:1: field '{field}': a lone surrogate U+")


def test_a_lone_surrogate_in_a_field_name_is_refused(tmp_path):
    path = jsonl(tmp_path / "q.jsonl", GOOD, '{"id": "q2", "suite": "s", "question": "Q?", '
                 '"answer": 1, "x\\ud800": 1}')
    refused_alike(tmp_path, str(path), f"{path}:2: field 'record': a lone surrogate U+D800")


def test_a_lone_surrogate_in_the_config_is_refused_by_validate_and_run(tmp_path):
    """A model id "m\\ud800" in the YAML: before, the run crashed with a traceback when
    the HTTP client encoded its first request (exit 1, a run folder left behind)."""
    path = jsonl(tmp_path / "q.jsonl", GOOD)
    cfg = config(tmp_path, str(path))
    cfg.write_text(cfg.read_text().replace("id: fake", 'id: "m\\ud800"'))
    message = f"{cfg}:7: field 'models[0].id': a lone surrogate U+D800 at character 2"
    for args in (["validate", "--config", str(cfg)],
                 ["run", "--config", str(cfg), "--out", str(tmp_path / "out")]):
        res = cli(*args, cwd=tmp_path)
        assert res.returncode == 2 and res.stderr.startswith(f"error: {message}"), res.stderr
    assert not (tmp_path / "out").exists()


def test_a_pair_of_surrogate_escapes_is_one_character_and_fine(tmp_path):
    path = jsonl(tmp_path / "q.jsonl", '{"id": "q1", "suite": "s", "question": '
                 '"What is \\ud83d\\ude00?", "answer": 1}')
    assert load_questions(path)[0].question == "What is \U0001f600?"


# -- own data read as written --------------------------------------------------------------

AS_WRITTEN = ["NA", "null", "N/A", "NaN", "nan", "None", "#N/A", "n/a", "-", "NULL", "TRUE",
              "false", "007", "0", "-0", "1e3", " 42 ", "1,000", "inf"]


def _csv(path: Path, rows: list[list[str]]) -> Path:
    import csv

    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([["id", "suite", "question", "answer"], *rows])
    return path


def test_csv_cells_are_read_as_written(tmp_path):
    """Before, the data library read `NA`, `null`, `N/A` and `NaN` as missing (then
    "missing required field"), `007` as the number 7 (then "expected a non-empty
    string"), and `TRUE` as a boolean."""
    path = _csv(tmp_path / "q.csv", [[f"{i:03d}", "s", f"Q{i}?", text]
                                     for i, text in enumerate(AS_WRITTEN, start=7)])
    questions = load_questions(path)
    assert [q.answer for q in questions] == AS_WRITTEN
    assert {q.answer_type for q in questions} == {"text"}
    assert [q.id for q in questions] == [f"{i:03d}" for i in range(7, 7 + len(AS_WRITTEN))]
    ids = _csv(tmp_path / "ids.csv", [[text, "s", "Q?", "a"] for text in AS_WRITTEN])
    assert [q.id for q in load_questions(ids)] == AS_WRITTEN  # ids too, "007" and "NA"
    res = cli("validate", str(path), cwd=tmp_path)
    assert res.returncode == 0 and "ok: no problems found" in res.stdout, res.stderr


def test_a_run_keeps_csv_values_as_written_end_to_end(tmp_path):
    path = _csv(tmp_path / "q.csv", [["007", "s", "Which code?", "NA"],
                                     ["008", "s", "Which value?", "null"]])
    with FakeOpenAI(respond=lambda path, body: {"choices": [{"message": {
            "role": "assistant", "content": "NA"}, "finish_reason": "stop"}],
            "model": "fake"}) as server:
        res = cli("run", "--config", str(config(tmp_path, str(path), server.url)), "--out",
                  str(tmp_path / "out"), "--no-cache", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    [run_dir] = [p for p in (tmp_path / "out").iterdir() if p.name != "latest"]
    snapshot = [json.loads(line) for line in (run_dir / "questions.jsonl").open()]
    assert [(q["id"], q["answer"]) for q in snapshot] == [("007", "NA"), ("008", "null")]


def test_a_number_answer_is_read_as_a_number_only_when_the_mapping_says_so(tmp_path):
    path = _csv(tmp_path / "q.csv", [["a", "s", "Q?", "007"], ["b", "s", "R?", "2.50"],
                                     ["c", "s", "S?", "1e3"]])
    assert [q.answer for q in load_questions(path)] == ["007", "2.50", "1e3"]
    entry = {"path": str(path), "values": {"answer_type": "number"}}
    assert [q.answer for q in load_questions(entry)] == [7, 2.5, 1000.0]
    bad = _csv(tmp_path / "bad.csv", [["a", "s", "Q?", "NA"]])
    with pytest.raises(InputError, match=r"bad\.csv:2: field 'answer': got 'NA' with "
                                         r"answer_type number: expected a finite number"):
        load_questions({"path": str(bad), "values": {"answer_type": "number"}})


def test_an_empty_cell_is_a_field_not_given_and_said_so_when_required(tmp_path):
    path = _csv(tmp_path / "q.csv", [["a", "s", "Q?", ""]])
    refused_alike(tmp_path, str(path), f"{path}:2: field 'answer': an empty cell")
    mapped = {"path": str(path), "fields": {"answer": "answer"},
              "values": {"answer_type": "calls"}}
    with pytest.raises(InputError, match="answer_type calls without gold_calls"):
        load_questions(mapped)  # not required there: the next check speaks


def test_parquet_values_keep_their_types_and_nulls_say_so(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"id": ["007", "b"], "suite": ["s", "s"],
                             "question": ["Q?", "R?"], "answer": ["NA", None]}),
                   tmp_path / "q.parquet")
    refused_alike(tmp_path, str(tmp_path / "q.parquet"),
                  f"{tmp_path / 'q.parquet'}:2: field 'answer': a null value")
    pq.write_table(pa.table({"id": ["007"], "suite": ["s"], "question": ["Q?"],
                             "answer": ["NA"]}), tmp_path / "ok.parquet")
    [q] = load_questions(tmp_path / "ok.parquet")
    assert (q.id, q.answer) == ("007", "NA")


# -- every broken file: one line, file, row and field, exit 2 ------------------------------

HEADER = "id,suite,question,answer\n"


@pytest.mark.parametrize("name, content, message", [
    ("empty.csv", b"", "{f}: the file is empty: expected a header row"),
    ("blank.csv", b"\n\n", "{f}: the file is empty"),
    ("header.csv", HEADER.encode(), "{f}:1: a header row and no rows under it"),
    ("latin1.csv", (HEADER + "a,s,Caf\xe9?,x\n").encode("latin-1"),
     "{f}:2: field 'question': not UTF-8 (invalid continuation byte"),
    ("long.csv", (HEADER + "a,s,Q?,x,extra\n").encode(),
     "{f}:2: field 'answer': the row has 5 cells and the header 4 columns"),
    ("short.csv", (HEADER + "a,s,Q?,x\nb,s\n").encode(),
     "{f}:3: field 'question': the row has 2 cells and the header 4 columns: no cell"),
    ("quote.csv", (HEADER + 'a,s,"Q?,x\n').encode(),
     "{f}:2: not valid CSV: a quoted cell is never closed"),
    ("twice.csv", b"id,suite,question,answer,id\na,s,Q?,x,b\n",
     "{f}:1: field 'id': column 'id' is named twice"),
    ("junk.parquet", b"PAR1 not really",
     "{f}: not a readable Parquet file ("),
    ("bad.json", b'[{"id": "a", "suite": "s", "question": "Q?", "answer": 1},\n{"id": ',
     "{f}:2: record 2 of the array is not valid JSON"),
    ("bad.jsonl", b'{"id": "a", "suite": "s", "question": "Q?", "answer": 1}\n\xff\n',
     "{f}:2: not UTF-8"),
    ("q.xlsx", b"PK\x03\x04", "{f}: unsupported question file"),
    ("missing.csv", None, "{f}: file not found"),
])
def test_a_broken_file_is_named_in_evalpipes_words(tmp_path, name, content, message):
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    refused_alike(tmp_path, str(path), message.format(f=path))


def test_a_truncated_parquet_file_names_the_file(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"id": ["a"], "suite": ["s"], "question": ["Q?"],
                             "answer": ["x"]}), tmp_path / "q.parquet")
    data = (tmp_path / "q.parquet").read_bytes()
    (tmp_path / "q.parquet").write_bytes(data[:len(data) // 2])
    refused_alike(tmp_path, str(tmp_path / "q.parquet"),
                  f"{tmp_path / 'q.parquet'}: not a readable Parquet file")


def test_every_bad_csv_row_is_named_in_one_pass(tmp_path):
    path = tmp_path / "q.csv"
    path.write_text(HEADER + "a,s,Q?,x\nb,s\nc,s,R?,y,z\nd,s,,w\n", encoding="utf-8")
    res = cli("validate", str(path), cwd=tmp_path)
    assert res.returncode == 2
    assert [line.split(": field")[0] for line in res.stderr.splitlines()[:3]] == [
        f"{path}:3", f"{path}:4", f"{path}:5"]


def test_csv_lines_may_end_in_crlf_or_cr_and_start_with_a_bom(tmp_path):
    for ending in ("\r\n", "\r"):
        path = tmp_path / "q.csv"
        text = ending.join(["id,suite,question,answer", "a,s,\"Two\nlines?\",x", "b,s,Q?,y"])
        path.write_bytes(b"\xef\xbb\xbf" + text.encode())
        questions = load_questions(path)
        assert [(q.id, q.source.rsplit(":", 1)[1]) for q in questions] == [("a", "2"),
                                                                           ("b", "4")]


# -- bounds ----------------------------------------------------------------------------------

def _big_files(tmp_path: Path, size: int) -> dict[str, Path]:
    """One file per format whose second record has a `question` of `size` bytes."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = [GOOD, {**GOOD, "id": "big", "question": "x" * size}]
    files = {"jsonl": jsonl(tmp_path / "q.jsonl", *rows)}
    (tmp_path / "q.json").write_text(json.dumps(rows))
    files["json"] = tmp_path / "q.json"
    files["csv"] = _csv(tmp_path / "q.csv", [[r["id"], r["suite"], r["question"],
                                              str(r["answer"])] for r in rows])
    pq.write_table(pa.Table.from_pylist([{**r, "answer": str(r["answer"])} for r in rows]),
                   tmp_path / "q.parquet")
    files["parquet"] = tmp_path / "q.parquet"
    return files


ROW = {"jsonl": 2, "json": 2, "csv": 3, "parquet": 2}


@pytest.mark.parametrize("fmt", ["jsonl", "json", "csv", "parquet"])
def test_a_field_over_the_limit_is_refused_and_the_limit_can_be_raised(tmp_path, fmt):
    path = _big_files(tmp_path, 5000)[fmt]
    refused_alike(tmp_path, str(path), f"{path}:{ROW[fmt]}: field 'question': 5,000 bytes, "
                  "over the limit of 4,000 bytes per field: expected at most 4,000 bytes per "
                  "field (raise it with question_limits.max_field_bytes in the config, or "
                  "--set question_limits.max_field_bytes=N)",
                  "question_limits.max_field_bytes=4000")
    res = cli("validate", str(path), "--set", "question_limits.max_field_bytes=6000",
              cwd=tmp_path)
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize("fmt", ["jsonl", "json", "csv", "parquet"])
def test_a_record_over_the_limit_is_refused(tmp_path, fmt):
    path = _big_files(tmp_path, 5000)[fmt]
    refused_alike(tmp_path, str(path), f"{path}:{ROW[fmt]}: ",
                  "question_limits.max_record_bytes=3000")
    res = cli("validate", str(path), "--set", "question_limits.max_record_bytes=3000",
              cwd=tmp_path)
    assert "over the limit of 3,000 bytes per record" in res.stderr
    assert "question_limits.max_record_bytes" in res.stderr


@pytest.mark.parametrize("fmt", ["jsonl", "json", "csv", "parquet"])
def test_a_file_over_the_row_limit_is_refused(tmp_path, fmt):
    path = _big_files(tmp_path, 10)[fmt]
    refused_alike(tmp_path, str(path), str(path), "question_limits.max_rows=1")
    res = cli("validate", str(path), "--set", "question_limits.max_rows=1", cwd=tmp_path)
    assert "over the limit of 1 records per file" in res.stderr


def test_the_limits_are_a_config_section(tmp_path):
    path = _big_files(tmp_path, 5000)["jsonl"]
    cfg = config(tmp_path, str(path), question_limits={"max_field_bytes": 4000})
    res = cli("validate", "--config", str(cfg), cwd=tmp_path)
    assert res.returncode == 2 and "over the limit of 4,000 bytes per field" in res.stderr
    cfg = config(tmp_path, str(path), question_limits={"max_rows": 0})
    res = cli("validate", "--config", str(cfg), cwd=tmp_path)
    assert res.returncode == 2
    assert "field 'question_limits.max_rows': got 0" in res.stderr


@pytest.mark.parametrize("fmt", ["jsonl", "json", "csv"])
def test_a_record_over_the_limit_is_never_held_whole(tmp_path, fmt):
    """A 20 MB record against a 1 MB limit: the reader's memory stays near the limit."""
    path = _big_files(tmp_path, 20_000_000)[fmt]
    tracemalloc.start()
    try:
        with pytest.raises(InputError, match="over the limit of 1,000,000 bytes per record"):
            load_questions(path, QuestionLimits(max_record_bytes=1_000_000))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8_000_000, peak


def test_reading_tables_leaves_no_cache_and_needs_no_data_library(tmp_path):
    """Before, CSV and Parquet files went through Hugging Face datasets, which wrote an
    Arrow copy of every file into its cache (1.07 GB for a 1 GB field)."""
    files = _big_files(tmp_path, 10)
    code = ("import sys; from evalpipe.questions import load_questions; "
            f"[load_questions(p) for p in {[str(files[f]) for f in ('csv', 'parquet')]!r}]; "
            "print('datasets' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, check=False, env={**os.environ, "PYTHONPATH": str(REPO),
                                                      "HF_HOME": str(tmp_path / "hf")})
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "False"
    assert not (tmp_path / "hf").exists()
