"""Retrieval metrics, checked against hand-computed values."""

from __future__ import annotations

import math

import pytest

from evalpipe.scoring.retrieval_metrics import covers, retrieval_scores


def s(doc: str, start: int, end: int, **extra) -> dict:
    return {"doc": doc, "start": start, "end": end, **extra}


L2, L3, L4 = math.log2(2), math.log2(3), math.log2(4)


@pytest.mark.parametrize("chunk, gold, expect", [
    (("a", 0, 100), s("a", 10, 20), True),      # holds all of it
    (("a", 0, 15), s("a", 10, 20), True),       # exactly half: counts
    (("a", 0, 14), s("a", 10, 20), False),      # 4 of 10 chars
    (("a", 15, 40), s("a", 10, 20), True),      # second half
    (("a", 16, 40), s("a", 10, 20), False),
    (("b", 0, 100), s("a", 10, 20), False),     # other document
    (("a", 20, 30), s("a", 10, 20), False),     # touching, no overlap
    (("a", 12, 17), s("a", 10, 20), True),      # inside, half of it
    (("a", 12, 16), s("a", 10, 21), False),     # 4 of 11
])
def test_covers(chunk, gold, expect) -> None:
    assert covers(chunk, gold) is expect
    assert covers(s(*chunk), gold) is expect


def test_no_gold_is_none() -> None:
    assert retrieval_scores([s("a", 0, 10)], []) is None


def test_first_rank_hit() -> None:
    r = retrieval_scores([s("a", 0, 50), s("b", 0, 50), s("c", 0, 50)], [s("a", 5, 15)])
    assert r == {"recall": 1.0, "hit": 1.0, "mrr": 1.0, "ndcg": 1.0}


def test_second_rank_hit() -> None:
    r = retrieval_scores([s("b", 0, 50), s("a", 0, 50)], [s("a", 5, 15)])
    assert r == pytest.approx({"recall": 1.0, "hit": 1.0, "mrr": 0.5, "ndcg": 1 / L3})


def test_hit_beyond_k_counts_only_for_mrr() -> None:
    ranked = [s("x", 0, 9), s("y", 0, 9), s("z", 0, 9), s("w", 0, 9), s("a", 0, 50)]
    r = retrieval_scores(ranked, [s("a", 5, 15)], k=3)
    assert r == pytest.approx({"recall": 0.0, "hit": 0.0, "mrr": 0.2, "ndcg": 0.0})


def test_two_gold_one_found() -> None:
    # gold g1 found at rank 3; g2 never. ideal DCG for 2 golds at k=3: 1 + 1/log2(3).
    ranked = [s("x", 0, 9), s("y", 0, 9), s("a", 0, 30)]
    gold = [s("a", 10, 20), s("b", 0, 10)]
    r = retrieval_scores(ranked, gold, k=3)
    assert r == pytest.approx({"recall": 0.5, "hit": 1.0, "mrr": 1 / 3,
                               "ndcg": (1 / L4) / (1 + 1 / L3)})


def test_repeated_passage_earns_no_second_gain() -> None:
    # Two overlapping chunks both cover g1; only the first is relevant for nDCG.
    ranked = [s("a", 0, 20), s("a", 10, 30), s("b", 0, 20)]
    gold = [s("a", 10, 20), s("b", 5, 10)]
    r = retrieval_scores(ranked, gold, k=3)
    ideal = 1 + 1 / L3
    assert r == pytest.approx({"recall": 1.0, "hit": 1.0, "mrr": 1.0,
                               "ndcg": (1 + 1 / L4) / ideal})


def test_one_chunk_covering_two_golds() -> None:
    ranked = [s("a", 0, 100)]
    r = retrieval_scores(ranked, [s("a", 0, 10), s("a", 50, 60)], k=3)
    assert r == pytest.approx({"recall": 1.0, "hit": 1.0, "mrr": 1.0, "ndcg": 1 / (1 + 1 / L3)})


def test_duplicate_gold_spans_count_once() -> None:
    r = retrieval_scores([s("a", 0, 10)], [s("a", 0, 10), s("a", 0, 10)], k=3)
    assert r["recall"] == 1.0 and r["ndcg"] == 1.0


def test_k_larger_than_list_and_empty_list() -> None:
    assert retrieval_scores([], [s("a", 0, 10)], k=3) == {
        "recall": 0.0, "hit": 0.0, "mrr": 0.0, "ndcg": 0.0}
    r = retrieval_scores([s("b", 0, 10), s("a", 0, 10)], [s("a", 0, 10)], k=10)
    assert r == pytest.approx({"recall": 1.0, "hit": 1.0, "mrr": 0.5, "ndcg": 1 / L3})


def test_order_follows_rank_field_when_given() -> None:
    ranked = [s("a", 0, 10, rank=2, score=1.0), s("b", 0, 10, rank=1, score=1.0)]
    assert retrieval_scores(ranked, [s("a", 0, 10)], k=1)["mrr"] == 0.5


def test_score_ties_break_by_chunk_id_when_no_rank() -> None:
    # Equal scores: "a.md#0-10" sorts before "b.md#0-10", so the gold chunk is first.
    ranked = [s("b.md", 0, 10, score=0.7, chunk_id="b.md#0-10"),
              s("a.md", 0, 10, score=0.7, chunk_id="a.md#0-10"),
              s("c.md", 0, 10, score=0.9, chunk_id="c.md#0-10")]
    r = retrieval_scores(ranked, [s("a.md", 0, 10)], k=2)
    assert r == pytest.approx({"recall": 1.0, "hit": 1.0, "mrr": 0.5, "ndcg": 1 / L3})


def test_tuples_and_objects_are_accepted() -> None:
    class C:
        doc, start, end = "a", 0, 10

    assert retrieval_scores([C()], [("a", 0, 10)])["hit"] == 1.0


def test_bad_k() -> None:
    with pytest.raises(ValueError):
        retrieval_scores([], [s("a", 0, 1)], k=0)
