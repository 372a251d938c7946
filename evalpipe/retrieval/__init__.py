"""Retrievers over corpus chunks: BM25, dense (MiniLM), and their fusions.

    retriever = build_retriever({"method": "bm25"}, chunks)
    hits = retriever.search("máy chủ ở đâu?", k=3)   # best first, rank from 1

Settings are `RetrieverSettings` below, the one home of their defaults and ranges
(docs/retrieval.md says what each does); all are optional, and unknown keys such as
chunk_size or k are ignored, so a config's whole retrieval section can be passed.
A method is one line of RETRIEVERS: its name and its `Method` (how its retriever is
built, and which settings it reads): bm25 | dense | hybrid (reciprocal rank fusion)
| hybrid_weighted (min-max normalised scores, `weight` on the dense side). Ties in
every method break by score, then chunk id.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Protocol, runtime_checkable

from pydantic import ConfigDict, Field, ValidationError

from evalpipe.corpus import Chunk
from evalpipe.records import RetrievedChunk
from evalpipe.registry import Registry
from evalpipe.schema import Section, input_error, one_of


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


@dataclass(frozen=True)
class Method:
    """A retrieval method: how its retriever is built from checked settings, and the
    settings it reads (the others do not change it: reports leave them out of its name)."""

    build: Callable[[RetrieverSettings, list[Chunk]], Retriever]
    uses: tuple[str, ...]


SPARSE = ("bm25", "bigrams", "tone_norm", "fold_accents")  # what the BM25 side reads

RETRIEVERS: Registry[Method] = Registry("retrieval method", "retrieval.method")
RETRIEVERS.add("bm25", "evalpipe.retrieval.bm25:METHOD")
RETRIEVERS.add("dense", "evalpipe.retrieval.dense:METHOD")
RETRIEVERS.add("hybrid", "evalpipe.retrieval.hybrid:RRF")
RETRIEVERS.add("hybrid_weighted", "evalpipe.retrieval.hybrid:WEIGHTED")


# Registries of the modules that implement them, read when a value is checked (so that
# reading a config does not load numpy).
def _bm25_variants() -> tuple[str, ...]:
    from evalpipe.retrieval.bm25 import VARIANTS

    return VARIANTS


def _dense_models() -> list[str]:
    from evalpipe.retrieval.dense import MODELS

    return list(MODELS)


class BM25Settings(Section):
    variant: Annotated[str, one_of(_bm25_variants, "BM25 variant")] = "lucene"
    k1: float = Field(1.5, ge=0)
    b: float = Field(0.75, ge=0, le=1)


class RetrieverSettings(Section):
    """What builds a retriever: the one home of these settings' defaults and ranges
    (the config's retrieval sections add mode, k and a name to them)."""

    method: Annotated[str, RETRIEVERS.check()] = "bm25"
    bm25: BM25Settings = BM25Settings()
    bigrams: bool = True
    tone_norm: bool = True
    fold_accents: bool = False
    rrf_k: float = Field(60.0, ge=0)
    weight: float = Field(0.5, ge=0, le=1)  # the dense side's, in hybrid_weighted
    model: Annotated[str, one_of(_dense_models, "dense model")] = "minilm"
    depth: int = Field(50, ge=1)


class _LooseSettings(RetrieverSettings):
    model_config = ConfigDict(extra="ignore")  # a config's whole retrieval section may come


def retriever_settings(settings: dict[str, Any] | RetrieverSettings | None
                       ) -> RetrieverSettings:
    """Settings as given (a config's retrieval section) or from a mapping, checked, with
    the defaults filled in."""
    if isinstance(settings, RetrieverSettings):
        return settings
    try:
        return _LooseSettings.model_validate(settings or {})
    except ValidationError as exc:
        raise input_error(exc, _LooseSettings, prefix="retrieval") from None


def resolve_settings(settings: dict[str, Any] | RetrieverSettings | None) -> dict[str, Any]:
    """Settings with defaults filled in and checked; the retriever's identity."""
    return retriever_settings(settings).model_dump(include=set(RetrieverSettings.model_fields))


def build_retriever(settings: dict[str, Any] | RetrieverSettings | None,
                    chunks: list[Chunk]) -> Retriever:
    """A retriever over chunks for the given settings: its method's, from RETRIEVERS. A
    method that is not there is an error, whatever else the settings say."""
    s = retriever_settings(settings)
    return RETRIEVERS[s.method].build(s, chunks)


__all__ = ["RETRIEVERS", "BM25Settings", "Hit", "Method", "Retriever", "RetrieverSettings",
           "build_retriever", "resolve_settings", "retriever_settings"]
