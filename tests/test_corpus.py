"""Corpus loading and chunking: spans round-trip, ids stable, boundaries sensible."""

from __future__ import annotations

import itertools
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalpipe.corpus import (
    Chunk,
    Document,
    chunk_corpus,
    chunk_document,
    corpus_version,
    load_corpus,
)
from evalpipe.errors import InputError

SITE = Path(__file__).resolve().parents[1] / "datasets" / "site"

VI = ("Máy chủ của công ty đặt ở Hòa Bình. Nó chạy Linux và được sao lưu mỗi đêm.\n\n"
      "## Giám sát\n\nThủy điện Hòa Bình cấp điện cho máy chủ! Sức khỏe hệ thống tốt?\n"
      "Một dòng rất dài " + "không có dấu chấm " * 20 + "\n\nHết.")


def check_chunks(doc: Document, chunks: list[Chunk], size: int) -> None:
    assert chunks or not doc.text.strip()
    prev_start = -1
    for c in chunks:
        assert c.text == doc.text[c.start:c.end]
        assert c.doc == doc.id and c.id == f"{doc.id}#{c.start}-{c.end}"
        assert 0 < c.end - c.start <= size
        assert not c.text[0].isspace() and not c.text[-1].isspace()
        assert c.start > prev_start
        prev_start = c.start
    # Every non-space character is in some chunk.
    covered = set()
    for c in chunks:
        covered.update(range(c.start, c.end))
    assert all(i in covered for i, ch in enumerate(doc.text) if not ch.isspace())


@pytest.mark.parametrize("size, overlap", [(800, 0), (100, 0), (100, 30), (40, 39), (7, 3), (1, 0)])
def test_spans_round_trip(size: int, overlap: int) -> None:
    doc = Document("vi.md", VI)
    check_chunks(doc, chunk_document(doc, size, overlap), size)


def test_overlap_repeats_text_and_starts_on_a_word() -> None:
    doc = Document("vi.md", VI)
    chunks = chunk_document(doc, 100, 40)
    assert any(b.start < a.end for a, b in itertools.pairwise(chunks))
    for c in chunks:
        assert c.start == 0 or doc.text[c.start - 1].isspace()


def test_prefers_paragraph_then_sentence_boundaries() -> None:
    doc = Document("a.md", "First sentence here. Second one.\n\nNew paragraph starts here.")
    chunks = chunk_document(doc, 45)
    assert chunks[0].text == "First sentence here. Second one."
    assert chunks[1].text == "New paragraph starts here."
    chunks = chunk_document(Document("b.md", "Alpha beta gamma. Delta epsilon zeta eta."), 30)
    assert chunks[0].text == "Alpha beta gamma."


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(list("ab cđáờ\n.!?\t")) | st.characters(),
                    max_size=400),
       size=st.integers(1, 120), overlap_frac=st.floats(0, 0.99))
def test_spans_round_trip_hypothesis(text: str, size: int, overlap_frac: float) -> None:
    doc = Document("h.md", unicodedata.normalize("NFC", text))
    overlap = min(size - 1, int(size * overlap_frac))
    check_chunks(doc, chunk_document(doc, size, overlap), size)


def test_bad_sizes_are_input_errors() -> None:
    for size, overlap in [(0, 0), (10, 10), (10, -1)]:
        with pytest.raises(InputError) as err:
            chunk_document(Document("a", "x"), size, overlap)
        assert err.value.field == "retrieval.chunk_size"


def test_empty_and_blank_documents() -> None:
    assert chunk_document(Document("a", ""), 10) == []
    assert chunk_document(Document("a", " \n\n "), 10) == []


def test_load_corpus_nfc_and_version(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.md").write_text(unicodedata.normalize("NFD", "Hòa Bình"), "utf-8")
    (tmp_path / "a.txt").write_text("hello", "utf-8")
    (tmp_path / "README.md").write_text("skip me", "utf-8")
    (tmp_path / "c.json").write_text("{}", "utf-8")
    docs = load_corpus(tmp_path)
    assert [d.id for d in docs] == ["a.txt", "sub/b.md"]
    assert docs[1].text == unicodedata.normalize("NFC", "Hòa Bình")
    v1 = corpus_version(docs)
    assert v1 == corpus_version(load_corpus(tmp_path))
    (tmp_path / "a.txt").write_text("hello!", "utf-8")
    assert corpus_version(load_corpus(tmp_path)) != v1


def test_load_corpus_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError):
        load_corpus(tmp_path / "missing")
    with pytest.raises(InputError):
        load_corpus(tmp_path)  # empty
    (tmp_path / "bad.md").write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(InputError) as err:
        load_corpus(tmp_path)
    assert err.value.file and err.value.file.endswith("bad.md")


@pytest.mark.skipif(not SITE.is_dir(), reason="datasets/site not present")
def test_bundled_site_corpus_chunks_cleanly() -> None:
    docs = load_corpus(SITE)
    for size, overlap in [(800, 0), (400, 100)]:
        chunks = chunk_corpus(docs, size, overlap)
        assert len({c.id for c in chunks}) == len(chunks)
        for d in docs:
            check_chunks(d, [c for c in chunks if c.doc == d.id], size)
