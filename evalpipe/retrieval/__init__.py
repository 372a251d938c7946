"""Retrievers over corpus chunks: BM25, dense (MiniLM), and their fusions.

    retriever = build_retriever({"method": "bm25"}, chunks)
    hits = retriever.search("máy chủ ở đâu?", k=3)   # best first, rank from 1

Settings (all optional; unknown keys such as chunk_size or k are ignored, so a
config's whole retrieval section can be passed):
    method: bm25 (default) | dense | hybrid (reciprocal rank fusion) | hybrid_weighted
    bm25: {variant: lucene (default) | robertson, k1: 1.5, b: 0.75}
    bigrams: true        syllable bigrams in the sparse tokenizer
    tone_norm: true      "hòa" == "hoà" in the sparse tokenizer
    fold_accents: false  drop every accent ("hoà" == "hoa") for queries typed without them
    rrf_k: 60            RRF constant for hybrid
    weight: 0.5          dense weight in hybrid_weighted (min-max normalised scores)
    model: minilm        dense model (only the offline all-MiniLM-L6-v2 for now)
    depth: 50            candidates each side contributes to a fusion
Ties in every method break by score, then chunk id.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from evalpipe.corpus import Chunk
from evalpipe.errors import InputError
from evalpipe.records import RetrievedChunk

METHODS = ("bm25", "dense", "hybrid", "hybrid_weighted")


@dataclass(frozen=True)
class Hit:
    chunk: Chunk
    score: float
    rank: int  # 1 = best

    def to_record(self) -> RetrievedChunk:
        """The sample-record form (chunk id, span, rank, score, text)."""
        c = self.chunk
        return RetrievedChunk(c.id, c.doc, c.start, c.end, self.rank, self.score, c.text)


@runtime_checkable
class Retriever(Protocol):
    name: str

    def search(self, query: str, k: int) -> list[Hit]:
        """The k best chunks, best first; ties broken by score then chunk id."""
        ...


def _number(section: dict, key: str, default: float, field: str, lo: float = 0.0,
            hi: float | None = None) -> float:
    value = section.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < lo or (
            hi is not None and value > hi):
        bound = f"a number >= {lo}" + (f" and <= {hi}" if hi is not None else "")
        raise InputError(f"got {value!r}", field=field, expected=bound)
    return float(value)


def _flag(settings: dict, key: str, default: bool) -> bool:
    value = settings.get(key, default)
    if not isinstance(value, bool):
        raise InputError(f"got {value!r}", field=f"retrieval.{key}", expected="true or false")
    return value


def resolve_settings(settings: dict[str, Any] | None) -> dict[str, Any]:
    """Settings with defaults filled in and checked; the retriever's identity."""
    settings = dict(settings or {})
    method = settings.get("method", "bm25")
    if method not in METHODS:
        raise InputError(f"unknown method {method!r}", field="retrieval.method",
                         expected=" | ".join(METHODS))
    bm25 = settings.get("bm25") or {}
    if not isinstance(bm25, dict):
        raise InputError(f"got {bm25!r}", field="retrieval.bm25",
                         expected="a mapping {variant, k1, b}")
    from evalpipe.retrieval.bm25 import VARIANTS

    variant = bm25.get("variant", "lucene")
    if variant not in VARIANTS:
        raise InputError(f"unknown variant {variant!r}", field="retrieval.bm25.variant",
                         expected=" | ".join(VARIANTS))
    return {
        "method": method,
        "bm25": {"variant": variant, "k1": _number(bm25, "k1", 1.5, "retrieval.bm25.k1"),
                 "b": _number(bm25, "b", 0.75, "retrieval.bm25.b", hi=1.0)},
        "bigrams": _flag(settings, "bigrams", True),
        "tone_norm": _flag(settings, "tone_norm", True),
        "fold_accents": _flag(settings, "fold_accents", False),
        "rrf_k": _number(settings, "rrf_k", 60, "retrieval.rrf_k"),
        "weight": _number(settings, "weight", 0.5, "retrieval.weight", hi=1.0),
        "model": settings.get("model", "minilm"),
        "depth": int(_number(settings, "depth", 50, "retrieval.depth", lo=1)),
    }


def build_retriever(settings: dict[str, Any] | None, chunks: list[Chunk]) -> Retriever:
    """A retriever over chunks for the given settings (see module docstring)."""
    s = resolve_settings(settings)
    method = s["method"]
    if method == "bm25":
        from evalpipe.retrieval.bm25 import BM25Retriever

        return BM25Retriever(chunks, **s["bm25"], bigrams=s["bigrams"], tone_norm=s["tone_norm"],
                             fold_accents=s["fold_accents"])
    if method == "dense":
        from evalpipe.retrieval.dense import DenseRetriever

        return DenseRetriever(chunks, model=s["model"])
    from evalpipe.retrieval.hybrid import HybridRetriever

    sparse = build_retriever({**s, "method": "bm25"}, chunks)
    dense = build_retriever({**s, "method": "dense"}, chunks)
    if method == "hybrid":
        return HybridRetriever(sparse, dense, fusion="rrf", rrf_k=s["rrf_k"], depth=s["depth"])
    return HybridRetriever(sparse, dense, fusion="weighted", weight=s["weight"], depth=s["depth"])


__all__ = ["METHODS", "Hit", "Retriever", "build_retriever", "resolve_settings"]
