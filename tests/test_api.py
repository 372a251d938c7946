"""The public Python API (evalpipe.run, score, report, compare, validate) on a tiny
model built here; the command line wraps the same functions."""

from __future__ import annotations

import importlib
import inspect
import json
import subprocess
import sys

import pytest
from helpers import write_jsonl

import evalpipe
from evalpipe.errors import InputError


def test_importing_evalpipe_stays_cheap():
    code = ("import sys, evalpipe; heavy = [m for m in ('torch', 'transformers', 'pydantic', "
            "'evalpipe.api', 'evalpipe.runner') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, tiny_model_dir):
    root = tmp_path_factory.mktemp("api")
    write_jsonl(root / "q.jsonl", [
        {"id": f"q{i}", "suite": "arithmetic", "lang": "en", "question": f"What is {i} plus 2?",
         "answer": i + 2, "gold_calls": [{"id": "s1", "name": "add",
                                          "arguments": {"a": i, "b": 2}}]} for i in range(3)])
    config = {"name": "api", "questions": [str(root / "q.jsonl")],
              "models": [{"id": str(tiny_model_dir)}], "toolsets": ["calculator"],
              "retrieval": ["none"], "max_turns": 2,
              "generation": {"max_new_tokens": 4, "batch_size": 4}}
    return evalpipe.run(config, out=root / "out", use_cache=False, limit=2), root


def test_run_returns_the_run_and_its_scores(finished_run):
    result, _ = finished_run
    assert result.run_dir.is_dir() and not result.helper_rank
    scores = result.scores
    assert len(scores["samples"]) == 2  # limit=2 of 3 questions
    assert "/hermes/calculator/no-rag" in result.table
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert manifest["config"]["limit"] == 2  # the normalised config, overrides applied


def test_a_runs_scores_are_read_through_their_type(tmp_path):
    """RunResult.scores reads scores.json as records.Scores: a file that does not fit is
    an error naming the file and the field, not a dict that fails later."""
    from evalpipe.api import RunResult

    fits = {"run_id": "r", "scorer_version": "6", "groups": [], "samples": []}
    (tmp_path / "scores.json").write_text(json.dumps(fits))
    assert RunResult(tmp_path).scores == fits
    (tmp_path / "scores.json").write_text(json.dumps({**fits, "samples": 3}))
    with pytest.raises(InputError) as err:
        _ = RunResult(tmp_path).scores
    assert err.value.file == str(tmp_path / "scores.json") and "samples" in str(err.value)


def test_score_report_compare_on_a_finished_run(finished_run):
    result, _ = finished_run
    rescored = evalpipe.score(result.run_dir)
    assert [s["question_id"] for s in rescored["samples"]] == [
        s["question_id"] for s in result.scores["samples"]]
    from evalpipe._report.render import CSV_HEADER

    csv = evalpipe.report(result.run_dir, "csv").splitlines()
    assert csv[0] == ",".join(CSV_HEADER) and any(result.scores["samples"][0]["cell_id"] in row
                                                  for row in csv[1:])
    importlib.import_module("evalpipe._report.load")
    importlib.import_module("evalpipe._validate")
    # each public name is the API function, whatever was imported before
    assert evalpipe.report is evalpipe.api.report and evalpipe.validate is evalpipe.api.validate
    assert inspect.isfunction(evalpipe.report) and inspect.isfunction(evalpipe.validate)

    assert evalpipe.report(result.run_dir, "md") == evalpipe.report(result.run_dir)
    same = evalpipe.compare(result.run_dir, result.run_dir)
    assert isinstance(same, evalpipe.Comparison) and same.regressions == []
    with pytest.raises(InputError, match="unknown report format"):
        evalpipe.report(result.run_dir, "pdf")


def test_resume_refuses_overrides(finished_run):
    result, _ = finished_run
    with pytest.raises(InputError, match="recorded config"):
        evalpipe.run(resume=result.run_dir, limit=1)


def test_validate_lists_every_problem(tmp_path):
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"id": "x", "suite": "arithmetic"}])
    problems = evalpipe.validate(bad)
    assert problems and all(str(bad) in p for p in problems)
    assert evalpipe.validate(["datasets/sample/arithmetic.jsonl"]) == []


def test_a_typo_fails_before_any_model_loads(tmp_path):
    with pytest.raises(InputError, match="did you mean max_turns") as err:
        evalpipe.run({"questions": ["q.jsonl"], "max_turn": 2}, out=tmp_path)
    assert err.value.field == "max_turn" and not (tmp_path).joinpath("latest").exists()


def test_every_record_carries_the_schema_version_and_old_runs_still_read(finished_run, tmp_path):
    import shutil

    from evalpipe.records import SCHEMA_VERSION

    result, _ = finished_run
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    lines = [json.loads(x) for x in (result.run_dir / "samples.jsonl").read_text().splitlines()]
    assert manifest["schema_version"] == SCHEMA_VERSION
    assert {s["schema_version"] for s in lines} == {SCHEMA_VERSION}
    assert {s["schema_version"] for s in result.scores["samples"]} == {SCHEMA_VERSION}
    # a run written before schema versions: the same records without the field
    old = tmp_path / "old"
    shutil.copytree(result.run_dir, old)
    manifest.pop("schema_version")
    (old / "manifest.json").write_text(json.dumps(manifest))
    (old / "samples.jsonl").write_text("".join(
        json.dumps({k: v for k, v in s.items() if k != "schema_version"}) + "\n" for s in lines))
    (old / "scores.json").unlink()
    rescored = evalpipe.score(old)
    assert [s["category"] for s in rescored["samples"]] == [
        s["category"] for s in result.scores["samples"]]


def test_run_prints_nothing_unless_the_caller_asks(tmp_path, tiny_model_dir, capfd):
    """No progress bar (evalpipe's, transformers' "Loading weights"), no log line: output
    is the caller's choice (echo=, progress=)."""
    write_jsonl(tmp_path / "q.jsonl", [{"id": "q1", "suite": "arithmetic", "lang": "en",
                                        "question": "What is 1 plus 2?", "answer": 3}])
    config = {"name": "quiet", "questions": [str(tmp_path / "q.jsonl")],
              "models": [{"id": str(tiny_model_dir)}], "toolsets": ["none"],
              "retrieval": ["none"], "generation": {"max_new_tokens": 2}}
    capfd.readouterr()
    evalpipe.run(config, out=tmp_path / "out", use_cache=False)
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")
    lines: list[str] = []
    evalpipe.run(config, out=tmp_path / "out", use_cache=False, echo=lines.append,
                 progress=True)
    out, err = capfd.readouterr()
    assert lines and lines[0].startswith("run ") and out == ""
    assert "1/1 samples" in err and "Loading weights" not in err
