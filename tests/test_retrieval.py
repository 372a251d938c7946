"""Retrievers: the interface, BM25 against reference implementations, hybrid fusion."""

from __future__ import annotations

import unicodedata

import numpy as np
import pytest

from evalpipe.corpus import Chunk, Document, chunk_corpus
from evalpipe.errors import InputError
from evalpipe.retrieval import Hit, Retriever, RetrieverSettings, build_retriever, resolve_settings
from evalpipe.retrieval.bm25 import BM25Index, select_top
from evalpipe.retrieval.hybrid import HybridRetriever, minmax, rrf, weighted
from evalpipe.retrieval.tokenize import tokenize

DOCS = [
    Document("vi/may-chu.md", "Máy chủ của công ty đặt ở Hòa Bình. Nó chạy Linux và được "
             "sao lưu mỗi đêm.\n\nThủy điện Hòa Bình cấp điện cho máy chủ."),
    Document("vi/suc-khoe.md", "Sức khỏe của nhân viên được kiểm tra mỗi năm. Quả táo mỗi ngày."),
    Document("en/server.md", "The server runs Linux in Hanoi. Backups run every night at 2am."),
    Document("en/cats.md", "Cats sleep most of the day. Dogs like walks."),
    Document("en/tea.md", "Green tea is grown in Thai Nguyen. The tea is dried in the sun."),
]
CHUNKS = chunk_corpus(DOCS, size=60)


def chunk(cid: str, text: str = "x") -> Chunk:
    return Chunk(cid, cid.split("#")[0], 0, len(text), text)


# ---------------------------------------------------------------- interface


def test_build_retriever_default_is_bm25_and_satisfies_protocol() -> None:
    r = build_retriever({}, CHUNKS)
    assert isinstance(r, Retriever)
    assert r.name.startswith("bm25-lucene")
    hits = r.search("Linux server backups", 3)
    assert [h.rank for h in hits] == [1, 2, 3][:len(hits)]
    assert all(isinstance(h, Hit) for h in hits)
    assert hits[0].chunk.doc == "en/server.md"
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_unknown_method_and_variant_are_input_errors() -> None:
    with pytest.raises(InputError) as err:
        build_retriever({"method": "splade"}, CHUNKS)
    assert err.value.field == "retrieval.method"
    with pytest.raises(InputError) as err:
        build_retriever({"bm25": {"variant": "bm25+"}}, CHUNKS)
    assert err.value.field == "retrieval.bm25.variant"
    with pytest.raises(InputError) as err:
        resolve_settings({"bm25": {"k1": -1}})
    assert err.value.field == "retrieval.bm25.k1"


def test_a_method_not_registered_is_an_error_even_in_settings_made_unchecked() -> None:
    """Settings can reach build_retriever without being checked (model_copy with an
    update checks nothing): an unknown method there is an error naming the closest one,
    never some other retriever (it once ran as a weighted hybrid)."""
    from evalpipe.config import RetrievalSection

    for made in (RetrieverSettings().model_copy(update={"method": "bm26"}),
                 RetrievalSection(mode="prepend").model_copy(update={"method": "bm26"})):
        with pytest.raises(InputError) as err:
            build_retriever(made, CHUNKS)
        assert err.value.field == "retrieval.method"
        assert "unknown retrieval method 'bm26' (did you mean bm25?)" in str(err.value)
        assert err.value.expected == "bm25 | dense | hybrid | hybrid_weighted"


def test_unrelated_settings_keys_are_ignored() -> None:
    assert resolve_settings({"chunk_size": 400, "k": 3})["method"] == "bm25"


def test_query_without_known_tokens_returns_nothing() -> None:
    r = build_retriever({}, CHUNKS)
    assert r.search("zzzz qqqq", 3) == []
    assert r.search("", 3) == []
    assert r.search("...", 3) == []


def test_only_matching_chunks_are_returned() -> None:
    hits = build_retriever({}, CHUNKS).search("cats", 5)
    assert [h.chunk.doc for h in hits] == ["en/cats.md"]


def test_hit_to_record() -> None:
    h = build_retriever({}, CHUNKS).search("tea", 1)[0]
    rec = h.to_record()
    assert (rec.chunk_id, rec.doc, rec.start, rec.end, rec.rank) == (
        h.chunk.id, h.chunk.doc, h.chunk.start, h.chunk.end, 1)


def test_ties_break_by_chunk_id() -> None:
    # Identical texts score identically; order must follow chunk ids, whatever the input order.
    chunks = [chunk(f"d{i}.md#0-5", "alpha beta") for i in (3, 1, 2, 0)] + [
        chunk("z.md#0-5", "gamma")]
    hits = build_retriever({}, chunks).search("alpha", 3)
    assert [h.chunk.id for h in hits] == ["d0.md#0-5", "d1.md#0-5", "d2.md#0-5"]


def test_select_top_resolves_boundary_ties_by_key() -> None:
    scores = np.array([1.0, 2.0, 2.0, 2.0, 0.5])
    key = np.array([0, 3, 1, 2, 4])
    assert select_top(scores, np.arange(5), 2, key) == [(2, 2.0), (3, 2.0)]
    assert select_top(scores, np.arange(5), 10, key)[-1] == (4, 0.5)


@pytest.mark.parametrize("form", ["NFD", "old_tone"])
def test_vietnamese_query_forms_find_the_same_chunks(form: str) -> None:
    r = build_retriever({}, CHUNKS)
    query = "thủy điện Hòa Bình sức khỏe"
    variant = (unicodedata.normalize("NFD", query) if form == "NFD"
               else "thuỷ điện Hoà Bình sức khoẻ")
    expect = [(h.chunk.id, h.score) for h in r.search(query, 5)]
    got = [(h.chunk.id, h.score) for h in r.search(variant, 5)]
    assert got == expect and expect


def test_nfd_corpus_matches_nfc_query() -> None:
    nfd_chunks = [Chunk(c.id, c.doc, c.start, c.end, unicodedata.normalize("NFD", c.text))
                  for c in CHUNKS]
    a = build_retriever({}, CHUNKS).search("Hòa Bình", 3)
    b = build_retriever({}, nfd_chunks).search("Hoà Bình", 3)
    assert [h.chunk.id for h in a] == [h.chunk.id for h in b]


# ---------------------------------------------------------------- BM25 references

REF_TEXTS = [c.text for c in CHUNKS] + [
    "the the the cat", "a cat and a dog", "dog dog dog", "the end", "máy chủ máy chủ máy",
]
QUERIES = ["the cat", "máy chủ Hòa Bình", "dog the the", "Linux backups night", "tea sun",
           "unknownword cat", "the"]


@pytest.mark.parametrize("k1, b", [(1.5, 0.75), (1.2, 0.4), (0.9, 1.0), (2.0, 0.0)])
def test_robertson_agrees_with_rank_bm25(k1: float, b: float) -> None:
    rank_bm25 = pytest.importorskip("rank_bm25")
    tokens = [tokenize(t) for t in REF_TEXTS]
    ours = BM25Index(tokens, variant="robertson", k1=k1, b=b)
    ref = rank_bm25.BM25Okapi(tokens, k1=k1, b=b)
    for q in QUERIES:
        qt = tokenize(q)
        np.testing.assert_allclose(ours.get_scores(qt), ref.get_scores(qt), atol=1e-6, rtol=0)


@pytest.mark.parametrize("k1, b", [(1.5, 0.75), (1.2, 0.4), (0.9, 1.0)])
def test_lucene_agrees_with_bm25s(k1: float, b: float) -> None:
    bm25s = pytest.importorskip("bm25s")
    tokens = [tokenize(t) for t in REF_TEXTS]
    ours = BM25Index(tokens, variant="lucene", k1=k1, b=b)
    ref = bm25s.BM25(method="lucene", k1=k1, b=b)
    ref.index(tokens, show_progress=False)
    for q in QUERIES:
        qt = [t for t in tokenize(q) if t in ref.vocab_dict]
        if not qt:
            continue
        np.testing.assert_allclose(ours.get_scores(qt), ref.get_scores(qt), atol=1e-6, rtol=0)


def test_bm25_edge_cases() -> None:
    idx = BM25Index([[], ["a"], ["a", "a", "b"]])
    assert idx.get_scores([]).tolist() == [0.0, 0.0, 0.0]
    assert idx.get_scores(["zz"]).tolist() == [0.0, 0.0, 0.0]
    s = idx.get_scores(["a"])
    assert s[0] == 0.0 and s[1] > 0 and s[2] > 0
    assert BM25Index([]).get_scores(["a"]).shape == (0,)
    assert idx.top_k(["b"], 5) == [(2, pytest.approx(idx.get_scores(["b"])[2]))]


def test_robertson_zero_idf_term_still_matches() -> None:
    # df = N/2 gives idf ln(1) = 0: the documents match with score 0 and are returned,
    # while documents without the term are not.
    idx = BM25Index([["a"], ["a", "x"], ["b"], ["c"]], variant="robertson")
    assert idx.idf[idx.vocab["a"]] == 0.0
    assert idx.top_k(["a"], 3) == [(0, 0.0), (1, 0.0)]
    assert [d for d, _ in idx.top_k(["a", "x"], 3)] == [1, 0]


def test_bm25_repeated_query_term_counts_twice() -> None:
    idx = BM25Index([["a", "b"], ["b", "c"], ["c"]])
    np.testing.assert_allclose(idx.get_scores(["a", "a"]), 2 * idx.get_scores(["a"]))


def test_bigrams_favour_the_phrase() -> None:
    chunks = [chunk("a#0", "máy tính và chủ nhà"), chunk("b#0", "máy chủ ở đây"),
              chunk("c#0", "nhà")]
    assert build_retriever({}, chunks).search("máy chủ", 1)[0].chunk.id == "b#0"


# ---------------------------------------------------------------- hybrid


class FixedRetriever:
    """Returns a fixed ranking, whatever the query."""

    def __init__(self, name: str, ranking: list[tuple[str, float]]):
        self.name = name
        self.ranking = ranking

    def search(self, query: str, k: int) -> list[Hit]:
        return [Hit(chunk(cid), s, r) for r, (cid, s) in enumerate(self.ranking[:k], start=1)]


def test_rrf_hand_computed() -> None:
    sparse = FixedRetriever("s", [("a", 9.0), ("b", 5.0), ("c", 1.0)])
    dense = FixedRetriever("d", [("c", 0.9), ("a", 0.8), ("d", 0.1)])
    fused = rrf([sparse.search("", 3), dense.search("", 3)], 60)
    assert fused["a"][0] == pytest.approx(1 / 61 + 1 / 62)
    assert fused["c"][0] == pytest.approx(1 / 63 + 1 / 61)
    assert fused["b"][0] == pytest.approx(1 / 62)
    hits = HybridRetriever(sparse, dense, fusion="rrf").search("q", 4)
    assert [h.chunk.id for h in hits] == ["a", "c", "b", "d"]
    assert [h.rank for h in hits] == [1, 2, 3, 4]


def test_rrf_ties_break_by_chunk_id() -> None:
    sparse = FixedRetriever("s", [("b", 1.0), ("a", 0.5)])
    dense = FixedRetriever("d", [("a", 1.0), ("b", 0.5)])
    hits = HybridRetriever(sparse, dense).search("q", 2)
    assert [h.chunk.id for h in hits] == ["a", "b"]
    assert hits[0].score == hits[1].score


def test_weighted_fusion_hand_computed() -> None:
    s = FixedRetriever("s", [("a", 10.0), ("b", 6.0), ("c", 2.0)]).search("", 3)
    d = FixedRetriever("d", [("c", 0.9), ("d", 0.5), ("a", 0.1)]).search("", 3)
    assert minmax(s) == {"a": 1.0, "b": 0.5, "c": 0.0}
    fused = weighted(s, d, 0.25)
    assert fused["a"][0] == pytest.approx(0.75 * 1.0 + 0.25 * 0.0)
    assert fused["c"][0] == pytest.approx(0.75 * 0.0 + 0.25 * 1.0)
    assert fused["d"][0] == pytest.approx(0.25 * 0.5)
    assert fused["b"][0] == pytest.approx(0.75 * 0.5)


def test_hybrid_on_a_small_corpus_uses_both_sides() -> None:
    # BM25 finds the lexical match; a fake "dense" side knows a paraphrase.
    chunks = CHUNKS
    cats = next(c for c in chunks if c.doc == "en/cats.md")
    tea = next(c for c in chunks if c.doc == "en/tea.md")

    class Dense:
        name = "fake-dense"

        def search(self, query: str, k: int) -> list[Hit]:
            return [Hit(cats, 0.9, 1), Hit(tea, 0.2, 2)][:k]

    sparse = build_retriever({}, chunks)
    hits = HybridRetriever(sparse, Dense(), fusion="rrf").search("green tea", 2)
    assert {h.chunk.doc for h in hits} == {"en/tea.md", "en/cats.md"}
    assert hits[0].chunk.doc == "en/tea.md"  # on both lists
    w = HybridRetriever(sparse, Dense(), fusion="weighted", weight=1.0).search("green tea", 1)
    assert w[0].chunk.doc == "en/cats.md"


def test_fold_accents_matches_unaccented_queries() -> None:
    plain = build_retriever({}, CHUNKS).search("may chu hoa binh", 1)
    folded = build_retriever({"fold_accents": True}, CHUNKS).search("may chu hoa binh", 1)
    assert plain == []
    assert folded[0].chunk.doc == "vi/may-chu.md"
