"""Intervals against known values, and aggregate over scored samples."""

from __future__ import annotations

import math

import pytest
from scipy import stats as sps
from synth import call, chunk, make_sample

from evalpipe.questions import Question
from evalpipe.scoring import aggregate, mean_interval, score_sample, wilson


@pytest.mark.parametrize("k, n, lo, hi", [
    # Published values (e.g. Newcombe 1998, Table I; Brown, Cai & DasGupta 2001)
    (81, 263, 0.2553, 0.3662),
    (15, 148, 0.0624, 0.1605),
    (0, 20, 0.0, 0.1611),
    (1, 29, 0.0061, 0.1718),
    (8, 10, 0.4902, 0.9433),
])
def test_wilson_known_values(k, n, lo, hi):
    got = wilson(k, n)
    assert got == pytest.approx((lo, hi), abs=6e-5)


@pytest.mark.parametrize("k, n", [(0, 1), (1, 1), (3, 7), (50, 100), (999, 1000), (12, 12)])
def test_wilson_matches_scipy(k, n):
    ci = sps.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    assert wilson(k, n) == pytest.approx((ci.low, ci.high), abs=1e-12)


def test_wilson_empty_and_exact_ends():
    assert wilson(0, 0) == (None, None)
    assert wilson(0, 100)[0] == 0.0
    assert wilson(100, 100)[1] == 1.0


def test_t_interval_matches_scipy():
    values = [0.0, 0.5, 1.0, 1.0, 0.25, 0.75, 0.5]
    got = mean_interval(values, "t")
    lo, hi = sps.t.interval(0.95, len(values) - 1, loc=sum(values) / len(values),
                            scale=sps.sem(values))
    assert (got["rate"], got["n"]) == (pytest.approx(0.5714285714), 7)
    assert (got["lo"], got["hi"]) == pytest.approx((max(0, lo), min(1, hi)))


def test_bootstrap_is_seeded_and_sensible():
    values = [1.0] * 30 + [0.0] * 20 + [0.5] * 10
    a = mean_interval(values, "bootstrap", seed=7)
    assert a == mean_interval(values, "bootstrap", seed=7)
    t = mean_interval(values, "t")
    assert a["lo"] == pytest.approx(t["lo"], abs=0.03)
    assert a["hi"] == pytest.approx(t["hi"], abs=0.03)
    assert mean_interval([1.0, 1.0, 1.0], "bootstrap") == {
        "rate": 1.0, "n": 3, "lo": 1.0, "hi": 1.0}


def test_mean_interval_edges():
    assert mean_interval([]) == {"rate": None, "n": 0, "lo": None, "hi": None}
    assert mean_interval([0.5]) == {"rate": 0.5, "n": 1, "lo": None, "hi": None}
    with pytest.raises(ValueError):
        mean_interval([0.1, 0.2], "jackknife")


PLAN = [{"id": "s1", "name": "add", "arguments": {"a": 2, "b": 2}}]
Q_PLAN = Question(id="p1", suite="plan", question="2 + 2?", answer=4, answer_type="number",
                  lang="en", gold_calls=PLAN)
SPAN = {"doc": "d.md", "start": 0, "end": 50}
Q_RAG = Question(id="r1", suite="site_rag", question="When?", answer="Monday",
                 answer_type="text", lang="en", gold_passages=[SPAN])


def scored_set():
    right = [[call("add", {"a": 2, "b": 2}, 4)]]
    samples = [
        (make_sample(Q_PLAN, "The answer is 4.", steps=right), Q_PLAN),
        (make_sample(Q_PLAN, "4", steps=right, wall_ms=400.0), Q_PLAN),
        (make_sample(Q_PLAN, "The answer is 5.", steps=[[call("add", {"a": 2, "b": 3}, 5)]]),
         Q_PLAN),
        (make_sample(Q_PLAN, "", steps=[{"raw": "<tool_call>{", "parse_errors": [
            {"kind": "not_json", "message": "x", "snippet": "{"}]}], stop_reason="turn_limit"),
         Q_PLAN),
        (make_sample(Q_PLAN, stop_reason="infra_error"), Q_PLAN),
        (make_sample(Q_RAG, "On Monday.", toolset="none", retrieval_mode="prepend",
                     retrieved=[chunk("d.md", 0, 60, 1), chunk("e.md", 0, 60, 2)]), Q_RAG),
        (make_sample(Q_RAG, "On Friday.", toolset="none", retrieval_mode="prepend",
                     retrieved=[chunk("e.md", 0, 60, 1), chunk("d.md", 0, 60, 2)]), Q_RAG),
    ]
    return [score_sample(s, q) for s, q in samples]


def test_aggregate_rows_and_rates():
    rows = aggregate(scored_set())
    assert [(r["cell_id"], r["suite"]) for r in rows] == [
        ("cell-1", "plan"), ("cell-1", "site_rag"), ("cell-1", "all")]
    plan, rag, everything = rows
    assert (plan["n"], plan["n_infra"]) == (5, 1)
    # the infra sample is out of the denominators
    assert plan["rates"]["exact"]["n"] == 4
    assert plan["rates"]["exact"]["rate"] == 0.5
    exact = plan["rates"]["exact"]
    assert (exact["lo"], exact["hi"]) == pytest.approx(wilson(2, 4))
    assert plan["rates"]["exact_strict"]["rate"] == 0.25
    # format validity: sample-level over samples with attempts, call-level over calls
    assert plan["rates"]["format_valid"] == {"rate": 0.75, "n": 4, **dict(zip(("lo", "hi"),
                                                                             wilson(3, 4)))}
    assert plan["rates"]["call_valid"]["rate"] == 0.75 and plan["rates"]["call_valid"]["n"] == 4
    assert plan["rates"]["plan_exact"]["rate"] == 0.5
    # one attempt in each of the four counted samples (a parse error is an attempt)
    assert plan["rates"]["calls_per_question"]["rate"] == 1.0
    assert plan["rates"]["calls_per_question"]["n"] == 4
    assert plan["categories"] == {"correct": 2, "infra_error": 1, "malformed_call": 1,
                                  "wrong_plan": 1}
    assert plan["subtypes"] == {"wrong_arguments": 1}
    assert plan["rates"]["recall@k"]["n"] == 0 and plan["rates"]["recall@k"]["rate"] is None

    assert rag["k"] == 3
    assert rag["rates"]["recall@k"]["rate"] == 1.0
    assert rag["rates"]["hit@k"]["rate"] == 1.0 and rag["rates"]["hit@k"]["n"] == 2
    assert rag["rates"]["mrr"]["rate"] == pytest.approx(0.75)
    assert rag["rates"]["format_valid"]["n"] == 0
    assert rag["rates"]["calls_per_question"]["n"] == 0  # no tools offered: not 0 calls
    assert rag["categories"] == {"correct": 1, "misread_context": 1}

    assert everything["n"] == 7 and everything["rates"]["exact"]["n"] == 6
    assert everything["categories"]["correct"] == 3


def test_aggregate_cost():
    rows = aggregate(scored_set(), by=("cell_id",))
    (row,) = rows
    wall = row["cost"]["wall_ms"]
    assert wall["n"] == 6  # infra out
    assert wall["p50"] == 250.0 and wall["mean"] == pytest.approx((250 * 5 + 400) / 6)
    assert row["cost"]["ttft_ms"]["mean"] == 12.0
    assert row["cost"]["turns"]["p95"] == pytest.approx(2.0)
    assert set(row["cost"]) >= {"prompt_tokens", "completion_tokens", "turns", "ttft_ms",
                                "wall_ms"}


def test_aggregate_all_rates_present_and_finite():
    for row in aggregate(scored_set()):
        for name, r in row["rates"].items():
            assert set(r) == {"rate", "n", "lo", "hi"}, name
            if r["n"] >= 2:
                assert 0.0 <= r["lo"] <= r["rate"] <= r["hi"] <= 1.0, name
                assert not math.isnan(r["lo"])


def test_aggregate_empty_and_other_groupings():
    assert aggregate([]) == []
    rows = aggregate(scored_set(), by=("suite",))
    assert [r["suite"] for r in rows] == ["plan", "site_rag", "all"]
    rows = aggregate(scored_set(), by=("question_id",))
    assert [r["question_id"] for r in rows] == ["p1", "r1"]
    boot = aggregate(scored_set(), by=("suite",), mean_interval_method="bootstrap", seed=3)
    assert boot == aggregate(scored_set(), by=("suite",), mean_interval_method="bootstrap",
                             seed=3)
    assert boot[1]["rates"]["mrr"]["rate"] == pytest.approx(0.75)


def test_aggregate_is_json():
    import json

    json.dumps(aggregate(scored_set()))
