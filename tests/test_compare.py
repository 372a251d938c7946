"""evalpipe compare: statistics against known cases, matching, flips, category moves,
the regression gate and the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from report_fixtures import BASE, MODEL, TOOLS, make_run_a, samples_a, settings_of, write_run
from synth import call, make_sample

from evalpipe import api
from evalpipe._report.compare import (
    CompareRefused,
    cluster_bootstrap,
    compare_runs,
    mcnemar_exact,
    paired_bootstrap,
    render_markdown,
    render_text,
    settings_diff,
    summary_line,
)
from evalpipe._report.load import load_run
from evalpipe.cli import main
from evalpipe.questions import Question

# -- statistics ------------------------------------------------------------------------------

@pytest.mark.parametrize("b, c, p", [
    (10, 2, 0.03857421875),  # 2 * (1 + 12 + 66) / 4096
    (2, 10, 0.03857421875),
    (5, 0, 0.0625),          # 2 / 32
    (6, 6, 1.0),
    (0, 0, 1.0),
    (1, 0, 1.0),
])
def test_mcnemar_exact_known_values(b, c, p):
    assert mcnemar_exact(b, c) == pytest.approx(p, rel=1e-9)


def test_paired_bootstrap_matches_normal_approximation():
    # 400 pairs: 40 lost (-1), 20 gained (+1): mean -0.05, sd 0.384, se 0.0192
    a = np.array([1] * 40 + [0] * 20 + [1] * 340, dtype=float)
    b = np.array([0] * 40 + [1] * 20 + [1] * 340, dtype=float)
    lo, hi = paired_bootstrap(a, b, resamples=4000, seed=1)
    d = b - a
    se = d.std(ddof=0) / np.sqrt(d.size)
    assert lo == pytest.approx(-0.05 - 1.96 * se, abs=0.006)
    assert hi == pytest.approx(-0.05 + 1.96 * se, abs=0.006)
    assert (lo, hi) == paired_bootstrap(a, b, resamples=4000, seed=1)  # seeded


def test_bootstrap_degenerate_and_cluster_cases():
    assert paired_bootstrap([1, 1, 1], [0, 0, 0]) == (-1.0, -1.0)
    assert paired_bootstrap([], []) is None
    d = np.array([-1.0, 0.0, 1.0, 0.0, -1.0])
    single = cluster_bootstrap(d, np.ones_like(d), 2000, 3)
    assert single == paired_bootstrap(np.zeros(5), d, 2000, 3)
    # big resample counts go in blocks and still give the same answer per seed
    many = cluster_bootstrap(np.arange(3000) % 3 - 1.0, np.ones(3000), 2000, 0)
    assert many == cluster_bootstrap(np.arange(3000) % 3 - 1.0, np.ones(3000), 2000, 0)
    assert many[0] < 0 < many[1]


def test_settings_diff():
    a = {"model": {"id": "m"}, "generation": {"max_new_tokens": 256}, "k": 3}
    b = {"model": {"id": "m"}, "generation": {"max_new_tokens": 128}, "format": "json"}
    assert settings_diff(a, b) == ["format: '<absent>' -> 'json'",
                                   "generation.max_new_tokens: 256 -> 128",
                                   "k: 3 -> '<absent>'"]


# -- runs --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def run_a(tmp_path_factory):
    return make_run_a(tmp_path_factory.mktemp("a") / "run-a")


def samples_b():
    """Run B: the tools cell loses a1 (misreported result) and a2 (no call, wrong), and
    wins r2; the baseline is unchanged."""
    from report_fixtures import chunk, tools_sample

    s = samples_a("run-b")
    s[6] = tools_sample("a1", "41", [[call("add", {"a": 12, "b": 30}, 42)]], run_id="run-b")
    s[7] = tools_sample("a2", "31", run_id="run-b")
    s[11] = tools_sample("r2", "Postgres", retrieved=[chunk("db.md", 0, 100, 1, text="Postgres")],
                         run_id="run-b")
    return s


@pytest.fixture(scope="module")
def run_b(tmp_path_factory):
    return write_run(tmp_path_factory.mktemp("b") / "run-b", samples_b(), run_id="run-b")


def test_pairs_flips_and_category_moves(run_a, run_b):
    cmp = compare_runs(load_run(run_a), load_run(run_b))
    assert cmp.warnings == []
    cells = {c.b_cell: c for c in cmp.cells}
    assert cells[BASE].matched_by == "fingerprint"
    assert cells[BASE].right_to_wrong == [] and cells[BASE].wrong_to_right == []
    tools = cells[TOOLS]
    assert tools.n_pairs == 6
    assert tools.right_to_wrong == ["a1", "a2"] and tools.wrong_to_right == ["r2"]
    assert {(f, t): n for f, t, n in tools.category_moves} == {
        ("correct", "misreported_result"): 1, ("correct", "no_tool_call"): 1,
        ("retrieval_miss", "correct"): 1}
    exact = next(m for m in tools.metrics if m.metric == "exact")
    assert (exact.a, exact.b, exact.a_only, exact.b_only) == (pytest.approx(4 / 6),
                                                             pytest.approx(3 / 6), 2, 1)
    assert exact.diff == pytest.approx(-1 / 6)
    assert exact.p_mcnemar == pytest.approx(1.0)
    assert not exact.regression  # 6 pairs: the interval reaches above 0
    by_suite = dict(tools.by_suite)
    assert by_suite["arithmetic"].diff == pytest.approx(-0.5)
    assert by_suite["site_rag"].diff == pytest.approx(0.5)
    assert not any(m.regression for m in by_suite.values())  # never gated
    recall = next(m for m in tools.metrics if m.metric == "recall@k")
    assert (recall.n, recall.diff) == (2, pytest.approx(0.5))
    assert cmp.pooled is not None and cmp.pooled.n_pairs == 12
    text = render_text(cmp)
    assert "right -> wrong (2): a1, a2" in text
    assert "verdict: NOT COMPARED: only 6 question(s) were paired" in text  # too few to gate
    md = render_markdown(cmp)
    assert "| exact | 6 | 66.7 | 50.0 | -16.7 |" in md
    assert "| exact [arithmetic] | 4 | 75.0 | 25.0 | -50.0 |" in md
    assert "| correct | no_tool_call | 1 |" in md


def test_fingerprint_mismatch_warns_or_refuses(run_a, tmp_path):
    settings = {TOOLS: {**settings_of(TOOLS), "generation": {"max_new_tokens": 128}}}
    b = write_run(tmp_path / "b", samples_a("run-b"), run_id="run-b",
                  fingerprints={TOOLS: "changed"}, settings=settings)
    cmp = compare_runs(load_run(run_a), load_run(b))
    assert len(cmp.warnings) == 1
    assert "fingerprints differ" in cmp.warnings[0]
    assert "generation.max_new_tokens: '<absent>' -> 128" in cmp.warnings[0]
    assert {c.matched_by for c in cmp.cells} == {"fingerprint", "cell_id"}
    assert cmp.refused == []
    strict = compare_runs(load_run(run_a), load_run(b), strict=True)
    assert len(strict.refused) == 1 and "fingerprints differ" in strict.refused[0]
    assert strict.warnings == [] and len(strict.cells) == 2  # paired anyway, for the report
    assert summary_line(strict).startswith("verdict: REFUSED (--strict)")
    with pytest.raises(CompareRefused) as refused:
        api.compare(run_a, b, strict=True)
    assert refused.value.comparison.refused == strict.refused


def test_renamed_cell_matches_by_fingerprint(run_a, tmp_path):
    renamed = []
    for s in samples_a("run-b"):
        s = dict(s)
        if s["cell_id"] == BASE:
            s["cell_id"] = "renamed"
        renamed.append(s)
    b = write_run(tmp_path / "b", renamed, run_id="run-b",
                  fingerprints={"renamed": "fp-" + BASE.replace("/", "_")},
                  settings={"renamed": settings_of(BASE)})
    cmp = compare_runs(load_run(run_a), load_run(b))
    pair = next(c for c in cmp.cells if c.b_cell == "renamed")
    assert pair.a_cell == BASE and pair.matched_by == "fingerprint" and pair.n_pairs == 6
    assert any("matched 'renamed' (B) by fingerprint" in w for w in cmp.warnings)


def test_different_question_sets_warn_with_counts(run_a, tmp_path):
    from report_fixtures import QUESTIONS

    extra = Question(id="a9", suite="arithmetic", question="1 + 1?", answer=2,
                     answer_type="number")
    questions = [q for q in QUESTIONS if q.id != "a4"] + [extra]
    samples = [s for s in samples_a("run-b") if s["question_id"] != "a4"]
    samples.append(make_sample(extra, "2", cell_id=BASE, run_id="run-b", model=MODEL,
                               toolset="none", tools_offered=[]))
    b = write_run(tmp_path / "b", samples, run_id="run-b", questions=questions)
    cmp = compare_runs(load_run(run_a), load_run(b))
    assert cmp.questions_only_a == ["a4"] and cmp.questions_only_b == ["a9"]
    assert any("question sets differ: 5 compared, 1 only in A, 1 only in B" in w
               for w in cmp.warnings)
    assert {c.n_pairs for c in cmp.cells} == {5}


def _big_run(path, run_id, correct):
    """40 closed-book questions in one cell; `correct(i)` says which are answered right."""
    questions = [Question(id=f"q{i:02d}", suite="arithmetic", question=f"What is {i} + 1?",
                          answer=i + 1, answer_type="number") for i in range(40)]
    samples = [make_sample(q, str(q.answer if correct(i) else q.answer + 7), cell_id=BASE,
                           run_id=run_id, model=MODEL, toolset="none", tools_offered=[])
               for i, q in enumerate(questions)]
    return write_run(path, samples, run_id=run_id, questions=questions)


@pytest.fixture(scope="module")
def gate_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("gate")
    good = _big_run(root / "good", "good", lambda i: i < 36)       # 90%
    bad = _big_run(root / "bad", "bad", lambda i: i < 24)          # 60%: 12 lost
    return good, bad


def test_gate_flags_a_significant_drop(gate_runs):
    good, bad = gate_runs
    cmp = compare_runs(load_run(good), load_run(bad))
    exact = next(m for m in cmp.cells[0].metrics if m.metric == "exact")
    assert exact.diff == pytest.approx(-0.3)
    assert exact.hi < 0 and exact.regression
    assert (exact.a_only, exact.b_only) == (12, 0)
    assert exact.p_mcnemar == pytest.approx(2 / 2 ** 12)
    assert [(c, m.metric) for c, m in cmp.regressions] == [(BASE, "exact")]
    # the improvement direction is no regression
    back = compare_runs(load_run(bad), load_run(good))
    assert not back.regressions and back.cells[0].metrics[0].improvement
    # a threshold larger than the drop lets it pass
    assert not compare_runs(load_run(good), load_run(bad), threshold=0.35).regressions


def test_cli_compare_exit_codes_and_formats(gate_runs, run_a, tmp_path):
    good, bad = gate_runs
    runner = CliRunner()
    res = runner.invoke(main, ["compare", str(good), str(bad)])
    assert res.exit_code == 0 and "REGRESSION" in res.output
    res = runner.invoke(main, ["compare", str(good), str(bad), "--fail-on-regression"])
    assert res.exit_code == 3 and "verdict: REGRESSION in 1 metric(s)" in res.output
    res = runner.invoke(main, ["compare", str(good), str(good), "--fail-on-regression"])
    assert res.exit_code == 0 and "no significant regression" in res.output
    res = runner.invoke(main, ["compare", str(good), str(bad), "--format", "md"])
    assert res.exit_code == 0 and res.output.startswith("## evalpipe compare")
    res = runner.invoke(main, ["compare", str(good), str(bad), "--format", "json"])
    assert json.loads(res.output)["regressions"][0]["metric"] == "exact"
    b = write_run(tmp_path / "b", samples_a("run-b"), run_id="run-b",
                  fingerprints={TOOLS: "changed"})
    res = runner.invoke(main, ["compare", str(run_a), str(b), "--strict"])
    assert res.exit_code == 2 and "--strict" in res.output


def test_runs_without_fingerprints_pair_by_cell_id(run_a, tmp_path):
    import json as _json

    b = write_run(tmp_path / "b", samples_a("run-b"), run_id="run-b")
    manifest = _json.loads((b / "manifest.json").read_text())
    for info in manifest["cells"].values():
        info.pop("fingerprint")
    (b / "manifest.json").write_text(_json.dumps(manifest))
    cmp = compare_runs(load_run(run_a), load_run(b))
    assert {c.matched_by for c in cmp.cells} == {"cell_id"}
    assert all("no fingerprint recorded in B" in w for w in cmp.warnings)
    assert len(cmp.warnings) == 2
    assert len(compare_runs(load_run(run_a), load_run(b), strict=True).refused) == 2


def test_compare_help_prints_95_percent_once():
    from click.testing import CliRunner

    from evalpipe.cli import main

    res = CliRunner().invoke(main, ["compare", "--help"])
    assert res.exit_code == 0
    assert "95% interval" in res.output and "%%" not in res.output
