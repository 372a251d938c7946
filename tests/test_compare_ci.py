"""`evalpipe compare` for a CI job: a comparison that is refused (--strict) or not
compared still writes its report with the reason first and the differences it could
compute, keeping its exit code (2, 4); `--junit` writes one test per matched cell and
gated metric (a regression fails, a refused comparison errs, one not compared is
skipped, each with the reason); `--summary` and $GITHUB_STEP_SUMMARY get a Markdown
table of the same entries. Text from the runs (cell ids) is data in both."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest
from click.testing import CliRunner
from report_fixtures import write_run
from synth import make_sample

from evalpipe._report.compare import METRICS, compare_runs
from evalpipe._report.load import load_run
from evalpipe.cli import main
from evalpipe.questions import Question

HOSTILE = "m|<b>&amp;\x1b[31m]]>`x`"  # a model id that is markup, a pipe and an escape
CELLS = (f"{HOSTILE}/hermes/none/no-rag", "m/json/none/no-rag")


def questions(n: int) -> list[Question]:
    return [Question(id=f"q{i:02d}", suite="arithmetic", question=f"What is {i} + 1?",
                     answer=i + 1, answer_type="number") for i in range(n)]


def run(path, n=40, *, right=lambda cell, i: True, fingerprints=None, cells=CELLS):
    """n questions in each cell; `right(cell, i)` says which are answered right."""
    qs = questions(n)
    samples = [make_sample(q, str(q.answer if right(cell, i) else q.answer + 7), cell_id=cell,
                           run_id=path.name, toolset="none", tools_offered=[])
               for cell in cells for i, q in enumerate(qs)]
    return write_run(path, samples, run_id=path.name, questions=qs,
                     fingerprints=fingerprints, settings={c: {"model": {"id": "m"}} for c in cells})


def compare(*args, env=None):
    return CliRunner().invoke(main, ["compare", *map(str, args)], env=env)


def junit(path):
    root = ET.parse(path).getroot()
    cases = root.findall("./testsuite/testcase")
    return root, cases


def status_of(case) -> str:
    for tag in ("failure", "error", "skipped"):
        if case.find(tag) is not None:
            return tag
    return "passed"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("ci")
    base = run(root / "base")
    worse = run(root / "worse", right=lambda cell, i: cell != CELLS[0] or i < 28)  # 12 lost
    few = run(root / "few", n=5)
    return base, worse, few


def test_a_refused_comparison_still_writes_its_reports_with_the_reason_first(runs, tmp_path):
    base = runs[0]
    changed = run(tmp_path / "changed", right=lambda cell, i: cell != CELLS[0] or i < 28,
                  fingerprints={CELLS[1]: "another-experiment"})
    for fmt in ("text", "md", "json"):
        out = tmp_path / f"report.{fmt}"
        res = compare(base, changed, "--strict", "--fail-on-regression", "--format", fmt,
                      "--out", out, "--junit", tmp_path / "j.xml", "--summary", tmp_path / "s.md")
        assert res.exit_code == 2, res.output  # refused, whatever else it found
        assert "--strict: cells are not the same experiment" in res.output
        text = out.read_text()
        if fmt == "text":
            assert text.startswith("verdict: REFUSED (--strict): not the same experiment: cell "
                                   f"'{CELLS[1]}': fingerprints differ")
            # the difference it could compute
            assert re.search(r"exact +40 +100\.0 +70\.0 +-30\.0 ", text)
        elif fmt == "md":
            assert text.splitlines()[2].startswith(":warning: **REFUSED (--strict)")
            assert "| exact | 40 | 100.0 | 70.0 | -30.0 |" in text
        else:
            data = json.loads(text)
            assert "fingerprints differ" in data["refused"][0]
            assert data["regressions"][0]["diff"] == pytest.approx(-0.3)
    root, cases = junit(tmp_path / "j.xml")
    assert len(cases) == 3 * len(METRICS) and {status_of(c) for c in cases} == {"error"}
    error = cases[0].find("error")
    assert error.get("type") == "refused" and "fingerprints differ" in error.get("message")
    assert "A 100.0% -> B 70.0%: -30.0 pts" in error.text
    assert root.get("errors") == str(len(cases))
    summary = (tmp_path / "s.md").read_text()
    assert ":no_entry: verdict: REFUSED (--strict)" in summary
    assert "| refused |" in summary and "| 40 | 100.0 | 70.0 | -30.0 |" in summary


def test_a_comparison_not_compared_writes_its_report_with_the_reason_first(runs, tmp_path):
    few = runs[2]
    fewer = run(tmp_path / "fewer", n=5, right=lambda cell, i: i < 3)
    res = compare(few, fewer, "--fail-on-regression", "--out", tmp_path / "r.txt",
                  "--junit", tmp_path / "j.xml")
    assert res.exit_code == 4, res.output
    text = (tmp_path / "r.txt").read_text()
    assert text.startswith("verdict: NOT COMPARED: only 5 question(s) were paired")
    assert "-40.0" in text  # 5 -> 3 right: computed, not gated
    root, cases = junit(tmp_path / "j.xml")
    assert len(cases) == 3 * len(METRICS)
    assert {status_of(c) for c in cases} == {"skipped"} and root.get("skipped") == "12"
    assert all("only 5 question(s) were paired" in c.find("skipped").get("message")
               for c in cases)


def test_junit_has_one_test_per_cell_and_metric_and_fails_the_regression(runs, tmp_path):
    base, worse, _ = runs
    res = compare(base, worse, "--fail-on-regression", "--junit", tmp_path / "j.xml")
    assert res.exit_code == 3
    root, cases = junit(tmp_path / "j.xml")
    seen = {(c.get("classname"), c.get("name")): status_of(c) for c in cases}
    expected_cells = ["m|<b>&amp;\\u001b[31m]]>`x`/hermes/none/no-rag", CELLS[1],
                      "(all matched cells)"]
    assert list(seen) == [(c, m.replace("@k", "@3")) for c in expected_cells for m in METRICS]
    assert seen[(expected_cells[0], "exact")] == "failure"
    assert seen[(CELLS[1], "exact")] == "passed"
    assert seen[(expected_cells[0], "plan_exact")] == "skipped"  # no pair it applies to
    failure = cases[0].find("failure")
    assert failure.get("type") == "regression" and "whole 95% interval is below zero" in \
        failure.get("message")
    assert root.get("failures") == str(sum(s == "failure" for s in seen.values()))
    assert root.get("tests") == str(len(cases))


def test_the_step_summary_is_a_table_of_each_cell_and_metric_and_appends(runs, tmp_path):
    base, worse, _ = runs
    steps = tmp_path / "steps.md"
    steps.write_text("## an earlier step\n")
    env = {"GITHUB_STEP_SUMMARY": str(steps)}
    res = compare(base, worse, "--summary", tmp_path / "s.md", env=env)
    assert res.exit_code == 0
    page = (tmp_path / "s.md").read_text()
    assert steps.read_text() == "## an earlier step\n" + page
    rows = [line for line in page.splitlines() if line.startswith("| ")][1:]
    assert len(rows) == 3 * len(METRICS)
    for row in rows:  # the pipe in the cell id is escaped: every row has 8 cells
        assert len(row.replace("\\|", "").split("|")[1:-1]) == 8, row
    assert "| exact | 40 | 100.0 | 70.0 | -30.0 | [" in rows[0] and rows[0].endswith(
        "| REGRESSION |")
    assert "m\\|\\<b>\\&amp;" in page  # markup and the pipe as text (escape.md)
    # --summary naming the step summary itself: appended to, not written over
    compare(base, base, "--summary", steps, env=env)
    assert steps.read_text().startswith("## an earlier step\n" + page)
    assert steps.read_text().count("### evalpipe compare") == 2


def test_ci_outputs_hold_text_xml_cannot(tmp_path):
    """A lone surrogate and control characters in a cell id: the XML parses and shows
    them as escapes; the summary holds them as text a file can hold."""
    from evalpipe._report.ci import junit_xml, step_summary

    a = run(tmp_path / "a", cells=(CELLS[1],))
    b = run(tmp_path / "b", cells=(CELLS[1],))
    cmp = compare_runs(load_run(a), load_run(b))
    for cc in cmp.cells:  # a cell id no run file would hold as it is
        cc.a_cell = cc.b_cell = "m\ud800\x00\x07/hermes/none/no-rag"
    root = ET.fromstring(junit_xml(cmp))
    names = {c.get("classname") for c in root.iter("testcase")}
    assert names == {"m\\ud800\\u0000\\u0007/hermes/none/no-rag"}
    page = step_summary(cmp)
    page.encode("utf-8")  # a file can hold it
    assert "m\\\\ud800" in page  # the escape itself, as text
