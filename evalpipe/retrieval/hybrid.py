"""Fusing a sparse and a dense ranking.

- rrf: reciprocal rank fusion, score = sum over rankings of 1 / (rrf_k + rank)
  (Cormack et al. 2009, rrf_k = 60). Needs only ranks, so BM25's unbounded scores
  and cosine similarities never have to be put on one scale.
- weighted: each side's scores min-max normalised over its own candidates, then
  weight x dense + (1 - weight) x sparse; a chunk missing from one side gets 0 there.
Each side contributes its `depth` best chunks as candidates.
"""

from __future__ import annotations

from evalpipe.corpus import Chunk
from evalpipe.retrieval import RETRIEVERS, SPARSE, Hit, Method, Retriever, RetrieverSettings


def rrf(rankings: list[list[Hit]], rrf_k: float = 60.0) -> dict[str, tuple[float, Chunk]]:
    """chunk id -> (fused score, chunk) by reciprocal rank fusion."""
    fused: dict[str, tuple[float, Chunk]] = {}
    for hits in rankings:
        for h in hits:
            prev = fused.get(h.chunk.id, (0.0, h.chunk))[0]
            fused[h.chunk.id] = (prev + 1.0 / (rrf_k + h.rank), h.chunk)
    return fused


def minmax(hits: list[Hit]) -> dict[str, float]:
    """chunk id -> score scaled to [0, 1] over these hits (all equal -> 1)."""
    if not hits:
        return {}
    lo, hi = min(h.score for h in hits), max(h.score for h in hits)
    span = hi - lo
    return {h.chunk.id: (h.score - lo) / span if span > 0 else 1.0 for h in hits}


def weighted(sparse: list[Hit], dense: list[Hit], weight: float) -> dict[str, tuple[float, Chunk]]:
    """chunk id -> (weight x dense + (1 - weight) x sparse, chunk), min-max normalised."""
    s, d = minmax(sparse), minmax(dense)
    chunks = {h.chunk.id: h.chunk for h in sparse + dense}
    return {cid: (weight * d.get(cid, 0.0) + (1.0 - weight) * s.get(cid, 0.0), c)
            for cid, c in chunks.items()}


def ranked(fused: dict[str, tuple[float, Chunk]], k: int) -> list[Hit]:
    """Best k by fused score, ties by chunk id."""
    order = sorted(fused.items(), key=lambda item: (-item[1][0], item[0]))[:k]
    return [Hit(chunk, score, r) for r, (_, (score, chunk)) in enumerate(order, start=1)]


class HybridRetriever:
    def __init__(self, sparse: Retriever, dense: Retriever, *, fusion: str = "rrf",
                 rrf_k: float = 60.0, weight: float = 0.5, depth: int = 50):
        if fusion not in ("rrf", "weighted"):
            raise ValueError(f"unknown fusion {fusion!r}")
        self.sparse, self.dense = sparse, dense
        self.fusion, self.rrf_k, self.weight, self.depth = fusion, rrf_k, weight, depth
        tag = f"rrf{rrf_k:g}" if fusion == "rrf" else f"w{weight:g}"
        self.name = f"hybrid-{tag}({sparse.name},{dense.name})"

    def search(self, query: str, k: int) -> list[Hit]:
        depth = max(k, self.depth)
        s, d = self.sparse.search(query, depth), self.dense.search(query, depth)
        fused = rrf([s, d], self.rrf_k) if self.fusion == "rrf" else weighted(s, d, self.weight)
        return ranked(fused, k)


def _sides(settings: RetrieverSettings, chunks: list[Chunk]) -> tuple[Retriever, Retriever]:
    return (RETRIEVERS["bm25"].build(settings, chunks),
            RETRIEVERS["dense"].build(settings, chunks))


def _rrf(settings: RetrieverSettings, chunks: list[Chunk]) -> HybridRetriever:
    return HybridRetriever(*_sides(settings, chunks), fusion="rrf", rrf_k=settings.rrf_k,
                           depth=settings.depth)


def _weighted(settings: RetrieverSettings, chunks: list[Chunk]) -> HybridRetriever:
    return HybridRetriever(*_sides(settings, chunks), fusion="weighted",
                           weight=settings.weight, depth=settings.depth)


RRF = Method(_rrf, uses=(*SPARSE, "model", "rrf_k", "depth"))
WEIGHTED = Method(_weighted, uses=(*SPARSE, "model", "weight", "depth"))
