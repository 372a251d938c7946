"""The regression gate never says "no regression" about nothing: when it has nothing it
could judge, `compare --fail-on-regression` exits 4 with one line saying why."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from report_fixtures import write_run
from synth import make_sample

from evalpipe._report.compare import MIN_PAIRS, compare_runs
from evalpipe._report.load import load_run
from evalpipe.cli import main
from evalpipe.questions import Question

CELL = "m/hermes/none/no-rag"


def questions(n: int, prefix: str = "q") -> list[Question]:
    return [Question(id=f"{prefix}{i:02d}", suite="arithmetic", question=f"What is {i} + 1?",
                     answer=i + 1, answer_type="number") for i in range(n)]


def run(path, qs, *, cells=(CELL,), infra=0, run_id=None):
    """A run of `qs` in `cells`, every answer right, the first `infra` samples of each
    cell infrastructure errors."""
    samples = [make_sample(q, str(q.answer), cell_id=cell, run_id=run_id or path.name,
                           toolset="none", tools_offered=[],
                           **({"stop_reason": "infra_error", "error": "HTTP 500: boom"}
                              if i < infra else {}))
               for cell in cells for i, q in enumerate(qs)]
    return write_run(path, samples, run_id=run_id or path.name, questions=qs,
                     settings={c: {"model": {"id": "m"}} for c in cells})


def gate(a, b) -> tuple[int, str]:
    res = CliRunner().invoke(main, ["compare", str(a), str(b), "--fail-on-regression"])
    return res.exit_code, res.output


@pytest.fixture
def baseline(tmp_path):
    return run(tmp_path / "a", questions(40))


def test_a_comparable_pair_still_passes(tmp_path, baseline):
    code, out = gate(baseline, run(tmp_path / "b", questions(40)))
    assert code == 0 and "verdict: no significant regression" in out


def test_no_shared_question_is_not_compared(tmp_path, baseline):
    code, out = gate(baseline, run(tmp_path / "b", questions(40, prefix="other")))
    assert code == 4
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert errors == ["error: regression gate: not compared: the runs share no question"]
    assert "verdict: NOT COMPARED" in out


def test_a_run_that_is_all_infra_errors_is_not_compared(tmp_path, baseline):
    """The server returned 500 all night: the candidate has no answer at all."""
    code, out = gate(baseline, run(tmp_path / "b", questions(40), infra=40))
    assert code == 4
    assert "40 of 40 samples of B in the matched cells are infrastructure errors" in out


def test_a_run_that_is_mostly_infra_errors_is_not_compared(tmp_path, baseline):
    code, out = gate(baseline, run(tmp_path / "b", questions(40), infra=21))
    assert code == 4 and "21 of 40 samples of B" in out
    code, out = gate(baseline, run(tmp_path / "c", questions(40), infra=20))
    assert code == 0, out  # half is not "mostly": the other half is judged


def test_too_few_pairs_are_not_compared(tmp_path):
    few = MIN_PAIRS - 1
    code, out = gate(run(tmp_path / "a", questions(few)), run(tmp_path / "b", questions(few)))
    assert code == 4 and f"only {few} question(s) were paired; the gate needs at least " \
                         f"{MIN_PAIRS}" in out
    code, _ = gate(run(tmp_path / "c", questions(MIN_PAIRS)),
                   run(tmp_path / "d", questions(MIN_PAIRS)))
    assert code == 0


def test_the_minimum_comes_from_the_widest_noise_floor():
    from evalpipe.scoring.stats import detectable_difference

    def widest(n):  # half right in both runs: the largest spread a binary metric has
        return detectable_difference([1.0, 0.0] * (n // 2), [1.0, 0.0] * (n // 2))

    assert widest(MIN_PAIRS) <= 0.5 + 0.02 < widest(MIN_PAIRS - 2)


def test_grids_that_differ_are_not_compared(tmp_path, baseline):
    other = "m/hermes/calculator/no-rag"
    code, out = gate(baseline, run(tmp_path / "b", questions(40), cells=(CELL, other)))
    assert code == 4 and f"the grids differ (cells only in B: {other})" in out
    code, out = gate(baseline, run(tmp_path / "c", questions(40), cells=(other,)))
    assert code == 4 and "no cell of B matches a cell of A" in out


def test_a_matched_cell_without_samples_is_not_compared(tmp_path, baseline):
    import json

    b = run(tmp_path / "b", questions(40), cells=(CELL, "m/hermes/calculator/no-rag"))
    a = run(tmp_path / "a2", questions(40), cells=(CELL, "m/hermes/calculator/no-rag"))
    kept = [line for line in (b / "samples.jsonl").read_text().splitlines()
            if json.loads(line)["cell_id"] == CELL]  # the second cell's samples are lost
    (b / "samples.jsonl").write_text("\n".join(kept) + "\n")
    (b / "scores.json").unlink()
    cmp = compare_runs(load_run(a), load_run(b))
    assert cmp.not_compared == ["matched cell(s) without samples in B: m/hermes/calculator/no-rag"]


def test_without_the_gate_compare_reports_and_exits_0(tmp_path, baseline):
    res = CliRunner().invoke(main, ["compare", str(baseline),
                                    str(run(tmp_path / "b", questions(40), infra=40))])
    assert res.exit_code == 0 and "verdict: NOT COMPARED" in res.output
    res = CliRunner().invoke(main, ["compare", str(baseline),
                                    str(run(tmp_path / "c", questions(40), infra=40)),
                                    "--format", "json"])
    import json

    assert json.loads(res.output)["not_compared"][0].startswith("40 of 40 samples of B")
