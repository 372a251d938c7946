"""Damaged run and input files fail cleanly: a corrupt line is a file:line error (exit 2)
from every reader, a torn last record and a record written twice are read around with
a warning and counted once, an empty question file is a one-line error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import ScriptedBackend, last_user, write_jsonl

import evalpipe
from evalpipe import runner
from evalpipe.cli import main
from evalpipe.config import parse_config
from evalpipe.errors import DataWarning, InputError
from evalpipe.store import RunStore


def right(prompt: str) -> str:
    return f"The answer is {int(last_user(prompt).split()[2]) + 1}."


def config(tmp_path: Path, n: int = 6):
    write_jsonl(tmp_path / "q.jsonl", [{"id": f"q{i}", "suite": "arithmetic",
                                        "question": f"What is {i} plus 1?", "answer": i + 1}
                                       for i in range(n)])
    return parse_config({"name": "files", "questions": [str(tmp_path / "q.jsonl")],
                         "models": [{"id": "scripted"}], "formats": ["hermes"],
                         "toolsets": ["none"], "retrieval": ["none"]},
                        source=str(tmp_path / "files.yaml"))


@pytest.fixture
def finished(tmp_path, monkeypatch):
    """A finished run of 6 questions, all answered right."""
    return runner.execute_run(config(tmp_path), tmp_path / "o", use_cache=False,
                              echo=lambda line: None,
                              backends=lambda model: ScriptedBackend(right))


def cli(*args) -> tuple[int, str]:
    res = CliRunner().invoke(main, [str(a) for a in args])
    return res.exit_code, res.output


def spoil_line(run_dir: Path, index: int, spoil) -> None:
    path = run_dir / "samples.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines[index] = spoil(lines[index])
    path.write_bytes(b"".join(lines))


@pytest.mark.parametrize("spoil", [
    lambda line: line[:40] + b"\xff\xfe" + line[40:],  # not UTF-8
    lambda line: b"\x00" * 64 + b"\n",  # a block of NULs, as a crash on some file systems leaves
    lambda line: line[:40] + b"\x00" + line[40:],  # a NUL inside a string
], ids=["invalid-utf8", "nul-block", "nul-inside"])
def test_a_corrupt_line_is_a_file_line_error_everywhere(finished, spoil):
    spoil_line(finished, 2, spoil)
    where = f"{finished / 'samples.jsonl'}:3: corrupt record"
    for args in (["score", finished], ["report", finished], ["show", finished, "q0"],
                 ["compare", finished, finished], ["run", "--resume", finished]):
        code, out = cli(*args)
        assert code == 2, (args, out)
        assert out.strip().splitlines()[-1].startswith(f"error: {where}"), (args, out)


def test_a_torn_last_record_of_a_finished_run_is_scored_with_a_warning_and_resume_repairs_it(
        finished, monkeypatch):
    path = finished / "samples.jsonl"
    raw = path.read_bytes()
    path.write_bytes(raw[:-30])  # the last record lost its end
    with pytest.warns(DataWarning, match=r"samples.jsonl:6: the last record is cut short"):
        code, out = cli("score", finished)
    assert code == 0 and "(5/5)" in out
    with pytest.warns(DataWarning):
        evalpipe.run(resume=finished, use_cache=False,
                     backends=lambda model: ScriptedBackend(right))
    lines = path.read_text().splitlines()  # cut back, and the lost sample written again whole
    assert [json.loads(line)["question_id"] for line in lines] == [f"q{i}" for i in range(6)]
    assert lines[:5] == raw.decode().splitlines()[:5]
    assert json.loads((finished / "manifest.json").read_text())["status"] == "finished"


def test_a_record_written_twice_is_counted_once_everywhere(finished):
    path = finished / "samples.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines + [lines[1]]))  # q1 again, at the end
    with pytest.warns(DataWarning, match=r"samples.jsonl:7: a second record of cell .*"
                                         r"question 'q1' \(the first is on line 2\)"):
        code, out = cli("score", finished)
    assert code == 0 and "| 6 | 100.0% (6/6)" in out
    scores = json.loads((finished / "scores.json").read_text())
    assert len(scores["samples"]) == 6
    with pytest.warns(DataWarning):
        assert RunStore(finished).read_samples() == [json.loads(line) for line in lines]
    with pytest.warns(DataWarning):
        code, out = cli("show", finished, "q1")
    assert out.count("===== cell") == 1
    with pytest.warns(DataWarning):
        code, out = cli("report", finished, "--format", "json")
    assert json.loads(out)["accuracy"][0]["n"] == 6


def test_the_warning_is_one_line_on_the_command_line(finished):
    path = finished / "samples.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines + [lines[0]]))
    res = subprocess.run([sys.executable, "-m", "evalpipe", "score", str(finished)],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0
    assert res.stderr.splitlines() == [(
        f"warning: {path}:7: a second record of cell 'scripted/-/none/no-rag', question "
        "'q0' (the first is on line 1); only the first is counted")]


def test_a_record_that_is_not_a_sample_names_its_line(finished):
    with open(finished / "samples.jsonl", "a") as f:
        f.write('[1, 2]\n{"cell_id": "c", "question_id": "q0"}\n')
    code, out = cli("score", finished)
    assert code == 2 and "samples.jsonl:7: not a sample record" in out


def test_an_unreadable_manifest_is_a_file_error(finished):
    (finished / "manifest.json").write_bytes(b'{"run_id": "\xff')
    code, out = cli("report", finished)
    assert code == 2 and out.startswith(f"error: {finished / 'manifest.json'}: not UTF-8")


@pytest.mark.parametrize("content, message", [
    (b"", "q.jsonl: no questions"),
    (b"\n  \n", "q.jsonl: no questions"),
    (b'{"id": "a", "suite": "s", "question": "?", "answer": 1}\n\xff\n', "q.jsonl:2: not UTF-8"),
    (b'{"id": "a", "suite": "s", "question": "?", "answer": 1}\n\x00\x00\n',
     "q.jsonl:2: not valid JSON"),
])
def test_a_bad_question_file_is_one_line_and_exit_2(tmp_path, content, message):
    (tmp_path / "q.jsonl").write_bytes(content)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(json.dumps({"name": "x", "questions": [str(tmp_path / "q.jsonl")],
                               "models": [{"id": "scripted"}]}))
    env = dict(os.environ, EVALPIPE_GENERATION_CACHE=str(tmp_path / "gen.sqlite"))
    res = subprocess.run([sys.executable, "-m", "evalpipe", "run", "--config", str(cfg),
                          "--out", str(tmp_path / "o")], capture_output=True, text=True,
                         env=env, check=False)
    assert res.returncode == 2, res.stderr
    assert res.stderr.splitlines() == [res.stderr.strip()]  # one line, no traceback
    assert message in res.stderr and not (tmp_path / "o").exists()


def test_an_empty_parquet_file_is_one_line(tmp_path):
    from evalpipe.questions import load_questions

    (tmp_path / "q.parquet").write_bytes(b"")
    with pytest.raises(InputError, match=r"q\.parquet: not a readable Parquet file"):
        load_questions(tmp_path / "q.parquet")
