"""Retrieval metrics over character spans: recall@k, hit@k, MRR, nDCG@k.

Pure functions, no corpus needed: a retrieved chunk and a gold passage are both
(doc, start, end) spans in the NFC text of a corpus document, so the scores
survive re-chunking and can be recomputed from samples.jsonl alone.

A chunk *covers* a gold span when it is in the same document and holds at
least half of the span's characters (a chunk boundary that cuts a passage in
two still counts for the larger half; exactly half counts).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from evalpipe.records import DEFAULT_K

Span = tuple[str, int, int]


def _span(item: Any) -> Span:
    """(doc, start, end) from a dict, a (doc, start, end) tuple, or a Chunk-like object."""
    if isinstance(item, Mapping):
        return str(item["doc"]), int(item["start"]), int(item["end"])
    if isinstance(item, tuple | list):
        doc, start, end = item
        return str(doc), int(start), int(end)
    return str(item.doc), int(item.start), int(item.end)


def covers(chunk_span: Any, gold: Any) -> bool:
    """True when the chunk holds at least half of the gold span's characters."""
    cdoc, cstart, cend = _span(chunk_span)
    gdoc, gstart, gend = _span(gold)
    if cdoc != gdoc or gend <= gstart:
        return False
    overlap = min(cend, gend) - max(cstart, gstart)
    return overlap > 0 and 2 * overlap >= gend - gstart


def _ordered(ranked: Sequence[Any]) -> list[Any]:
    """Best first: by rank when every item has one (the retriever already broke ties),
    else by score then chunk id when every item has a score, else as given."""
    items = list(ranked)
    if items and all(isinstance(r, Mapping) and r.get("rank") is not None for r in items):
        return sorted(items, key=lambda r: r["rank"])
    if items and all(isinstance(r, Mapping) and r.get("score") is not None for r in items):
        return sorted(items, key=lambda r: (-float(r["score"]),
                                            str(r.get("chunk_id", r.get("id", "")))))
    return items


def retrieval_scores(ranked: Sequence[Any], gold: Sequence[Any], k: int = DEFAULT_K
                     ) -> dict[str, float] | None:
    """recall@k, hit@k, MRR and nDCG@k of one ranked list against gold spans.

    - recall: distinct gold spans covered by the top k / distinct gold spans
    - hit: 1.0 when any top-k chunk covers any gold span
    - mrr: 1 / rank of the first chunk (whole list) covering any gold span, else 0
    - ndcg: binary gain; a chunk is relevant when it covers a gold span that no
      higher-ranked chunk covered, so repeats of one passage earn nothing. The
      ideal puts min(k, #gold) relevant chunks first.
    None when there are no gold spans (the question does not count).
    """
    golds = list(dict.fromkeys(_span(g) for g in gold))  # distinct, in order
    if not golds:
        return None
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    spans = [_span(r) for r in _ordered(ranked)]

    covered: set[int] = set()
    first_rank = 0
    dcg = 0.0
    recall_hits: set[int] = set()
    for rank, span in enumerate(spans, start=1):
        hits = {i for i, g in enumerate(golds) if covers(span, g)}
        if hits and not first_rank:
            first_rank = rank
        if rank <= k:
            recall_hits |= hits
            if hits - covered:
                dcg += 1.0 / math.log2(rank + 1)
        covered |= hits
        if rank >= k and first_rank:
            break  # nothing later can change any of the four scores
    ideal = sum(1.0 / math.log2(r + 1) for r in range(1, min(k, len(golds)) + 1))
    return {
        "recall": len(recall_hits) / len(golds),
        "hit": 1.0 if recall_hits else 0.0,
        "mrr": 1.0 / first_rank if first_rank else 0.0,
        "ndcg": dcg / ideal,
    }
