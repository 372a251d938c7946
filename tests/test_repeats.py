"""pass@k, pass^k, flip rate and the noise floor, against hand-computed values; the
cluster bootstrap over questions with repeats inside, against a known variance."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evalpipe.scoring.aggregate import aggregate
from evalpipe.scoring.repeats import pass_at_k, pass_hat_k, repeat_scores
from evalpipe.scoring.stats import Z80, Z95, cluster_bootstrap, detectable_difference


def test_estimators_by_hand():
    # 5 repeats, 2 right. pass@2 = 1 - C(3,2)/C(5,2) = 1 - 3/10; pass^2 = C(2,2)/C(5,2) = 1/10
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_hat_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    assert pass_hat_k(5, 2, 2) == pytest.approx(0.1)
    assert pass_at_k(5, 2, 3) == pytest.approx(0.9)  # 1 - C(3,3)/C(5,3) = 1 - 1/10
    assert pass_at_k(5, 2, 4) == 1.0  # fewer than 4 wrong: some of any 4 is right
    assert pass_hat_k(5, 2, 3) == 0.0
    assert pass_hat_k(5, 5, 5) == 1.0 and pass_at_k(5, 0, 5) == 0.0
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)  # unbiased only from N >= k


def _rows(verdicts: dict[str, list[bool]], cell: str = "c") -> list[dict]:
    return [{"cell_id": cell, "question_id": q, "repeat": r, "exact": v, "infra": False}
            for q, vs in verdicts.items() for r, v in enumerate(vs)]


def test_repeat_scores_by_hand():
    rows = _rows({"q1": [True] * 5, "q2": [True, False, False, True, False], "q3": [False] * 5})
    s = repeat_scores(rows)
    assert s["repeats"] == 5 and s["questions"] == 3
    assert s["pass^k"]["1"]["rate"] == pytest.approx((1 + 0.4 + 0) / 3)
    assert s["pass@k"]["1"]["rate"] == pytest.approx((1 + 0.4 + 0) / 3)
    assert s["pass^k"]["2"]["rate"] == pytest.approx((1 + 0.1 + 0) / 3)
    assert s["pass@k"]["2"]["rate"] == pytest.approx((1 + 0.7 + 0) / 3)
    assert s["pass^k"]["5"]["rate"] == pytest.approx(1 / 3)
    assert s["pass@k"]["5"]["rate"] == pytest.approx(2 / 3)
    assert s["pass^k"]["2"]["n"] == 3 and s["pass^k"]["2"]["lo"] is not None
    assert s["flip_rate"]["rate"] == pytest.approx(1 / 3) and s["flip_rate"]["n"] == 3
    assert s["flipping"] == ["q2"]
    means = [1.0, 0.4, 0.0]
    sd2 = float(np.var(means, ddof=1))
    # 115 points by the formula: three questions cannot show any difference
    assert (Z95 + Z80) * math.sqrt(2 * sd2 / 3) > 1 and s["noise_floor"] == 1.0


def test_infra_repeats_are_left_out_and_k_uses_questions_with_enough_repeats():
    rows = _rows({"q1": [True, True, False], "q2": [False, True]})
    rows.append({"cell_id": "c", "question_id": "q2", "repeat": 2, "exact": True, "infra": True})
    s = repeat_scores(rows)
    assert s["repeats"] == 3
    assert s["pass^k"]["3"]["n"] == 1 and s["pass^k"]["3"]["rate"] == 0.0
    assert s["pass^k"]["2"]["rate"] == pytest.approx((1 / 3 + 0) / 2)


def test_one_repeat_has_no_flip_rate_and_pass1_is_exact_match():
    rows = _rows({"q1": [True], "q2": [False], "q3": [True]})
    s = repeat_scores(rows)
    assert s["repeats"] == 1 and s["flip_rate"] is None and s["flipping"] == []
    assert s["pass@k"]["1"]["rate"] == pytest.approx(2 / 3)


def test_aggregate_carries_repeat_scores_per_group():
    rows = _rows({"q1": [True, False], "q2": [True, True]})
    for r in rows:
        r["suite"] = "arithmetic"
    groups = aggregate(rows)
    assert [g["suite"] for g in groups] == ["arithmetic", "all"]
    assert groups[0]["repeats"]["flipping"] == ["q1"]
    assert groups[0]["rates"]["exact"]["rate"] == pytest.approx(0.75)
    assert groups[0]["repeats"]["pass^k"]["2"]["rate"] == pytest.approx(0.5)


def test_cluster_bootstrap_with_repeats_matches_the_known_variance():
    # B - A per question is the same in all its repeats (fully correlated inside a
    # question): the variance of the mean difference is p(1-p)/m over m questions,
    # not over m x repeats samples.
    m, repeats = 200, 5
    d_q = np.array([1.0] * (m // 2) + [0.0] * (m // 2))
    sums = d_q * repeats  # a question's sum of differences over its repeats
    counts = np.full(m, repeats)
    lo, hi = cluster_bootstrap(sums, counts, resamples=4000, seed=2)
    expected_half = Z95 * math.sqrt(0.25 / m)
    assert (hi - lo) / 2 == pytest.approx(expected_half, rel=0.12)
    # Treating the m x repeats samples as independent pairs would be sqrt(5) too narrow.
    flat = np.repeat(d_q, repeats)
    lo_f, hi_f = cluster_bootstrap(flat, np.ones_like(flat), resamples=4000, seed=2)
    assert (hi_f - lo_f) / (hi - lo) == pytest.approx(1 / math.sqrt(repeats), rel=0.15)


def test_cluster_bootstrap_with_independent_repeats():
    # Independent Bernoulli(0.5) repeats inside each question: the variance of the mean
    # over m questions x r repeats is 0.25 / (m r), and the cluster bootstrap finds it.
    rng = np.random.default_rng(0)
    m, repeats = 300, 4
    x = rng.integers(0, 2, size=(m, repeats)).astype(float)
    lo, hi = cluster_bootstrap(x.sum(axis=1), np.full(m, repeats), resamples=4000, seed=1)
    assert (hi - lo) / 2 == pytest.approx(Z95 * math.sqrt(0.25 / (m * repeats)), rel=0.15)


def test_detectable_difference():
    a = [1, 0] * 50
    assert detectable_difference(a) == pytest.approx(
        (Z95 + Z80) * math.sqrt(2 * np.var(a, ddof=1) / 100))
    assert detectable_difference([1.0]) is None
    # more questions, a lower floor
    assert detectable_difference([1, 0] * 200) < detectable_difference(a)


# -- compare with repeats ----------------------------------------------------------------------

def _repeat_run(tmp_path, name: str, right: dict[str, list[bool]]):
    from report_fixtures import Q, base_sample, write_run

    from evalpipe._report.load import load_run

    gold = {q.id: str(q.answer) for q in Q.values()}
    samples = []
    for r in range(max(len(v) for v in right.values())):
        for qid, verdicts in right.items():
            s = base_sample(qid, gold[qid] if verdicts[r] else "I am not sure.", name)
            samples.append({**s, "repeat": r, "seed": 100 + r})
    return load_run(write_run(tmp_path / name, samples, run_id=name))


def test_compare_treats_the_question_as_the_unit(tmp_path):
    from evalpipe._report.compare import compare_runs, render_markdown, render_text

    ids = ["a1", "a2", "a3", "a4", "r1", "r2"]
    a = _repeat_run(tmp_path, "a", {q: [True, True, True, False] for q in ids})
    b = _repeat_run(tmp_path, "b", {q: [True, True, True, True] for q in ids})
    assert a.repeats == 4
    cmp = compare_runs(a, b, resamples=500)
    exact = next(m for m in cmp.cells[0].metrics if m.metric == "exact")
    assert exact.n == 6  # questions, not 24 samples
    assert exact.a == pytest.approx(0.75) and exact.diff == pytest.approx(0.25)
    assert exact.p_mcnemar is None  # repeats are not pairs
    assert exact.noise_floor == pytest.approx(detectable_difference([0.75] * 6, [1.0] * 6))
    text = render_text(cmp)
    assert "repeats: 4 in A, 4 in B" in text and "noise floor" in text
    assert "Repeats: 4 in A, 4 in B" in render_markdown(cmp)


def test_gate_does_not_count_repeats_as_independent_evidence(tmp_path):
    # One of six questions goes from always right to always wrong, ten repeats each:
    # ten lost samples, but one question's worth of evidence; a bootstrap over the
    # 60 samples as if independent would call it a regression.
    from evalpipe._report.compare import compare_runs

    ids = ["a1", "a2", "a3", "a4", "r1", "r2"]
    a = _repeat_run(tmp_path, "a", {q: [True] * 10 for q in ids})
    b = _repeat_run(tmp_path, "b", {q: [q != "a1"] * 10 for q in ids})
    cmp = compare_runs(a, b, resamples=2000)
    exact = next(m for m in cmp.cells[0].metrics if m.metric == "exact")
    assert exact.diff == pytest.approx(-1 / 6)
    assert exact.hi == pytest.approx(0.0) and not exact.regression
    assert cmp.cells[0].right_to_wrong == ["a1"]
    flat = cluster_bootstrap(np.array([-1.0] * 10 + [0.0] * 50), np.ones(60), 2000, 0)
    assert flat[1] < 0  # the naive interval excludes zero


def test_report_shows_repeats_and_flipping_questions(tmp_path):
    from evalpipe._report.build import build_report
    from evalpipe._report.html import render_html
    from evalpipe._report.render import render_markdown

    run = _repeat_run(tmp_path, "a", {"a1": [True, False, True], "a2": [True] * 3,
                                      "r1": [False] * 3})
    data = build_report(run)
    (row,) = data["repeats"]
    assert row["repeats"] == 3 and row["flipping"] == ["a1"]
    md = render_markdown(data)
    assert "## Repeats" in md and "pass^3" in md and "flipping in" in md and "a1" in md
    assert "Questions that flip" in render_html(run, data)


def test_tidy_csv_carries_pass_k_flip_rate_and_noise_floor(tmp_path):
    from evalpipe._report.build import build_report
    from evalpipe._report.render import tidy_rows

    run = _repeat_run(tmp_path, "a", {"a1": [True, False], "a2": [True, True]})
    rows = {r["metric"]: r for r in tidy_rows(build_report(run))}
    assert rows["pass^2"]["value"] == pytest.approx(0.5)
    assert rows["pass@2"]["value"] == pytest.approx(1.0)
    assert rows["flip_rate"]["value"] == pytest.approx(0.5) and rows["flip_rate"]["n"] == 2
    assert rows["noise_floor"]["n"] == 2


def test_noise_floor_is_at_most_100_points_and_not_zero_without_spread():
    # three questions, one right: the formula gives more than 1 (it printed 114.4 points)
    assert (Z95 + Z80) * math.sqrt(2 * np.var([1, 0, 0], ddof=1) / 3) > 1
    assert detectable_difference([1, 0, 0]) == 1.0
    # both runs 0% (it printed 0.0): a proportion with one right and one wrong added
    p = 1 / 18
    floor = detectable_difference([0.0] * 16, [0.0] * 16)
    assert floor == pytest.approx((Z95 + Z80) * math.sqrt(2 * p * (1 - p) / 16))
    assert 0.2 < floor < 0.3
    assert detectable_difference([1.0] * 16) == pytest.approx(floor)  # all right: by symmetry
