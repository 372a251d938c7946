"""The document corpus: NFC text, chunks with character spans, stable ids.

A chunk's text is always `document.text[start:end]`, so gold passages given as
spans stay valid however the corpus is re-chunked.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import asdict, dataclass
from pathlib import Path

from evalpipe.errors import InputError

CORPUS_SUFFIXES = (".md", ".txt")


@dataclass(frozen=True)
class Document:
    id: str  # path relative to the corpus root, POSIX style
    text: str  # NFC-normalised


@dataclass(frozen=True)
class Chunk:
    id: str
    doc: str
    start: int
    end: int
    text: str

    def to_dict(self) -> dict:
        return asdict(self)


def load_corpus(root: str | Path) -> list[Document]:
    """Every Markdown/text file below root, NFC-normalised, in path order."""
    root = Path(root)
    if not root.is_dir():
        raise InputError("corpus folder not found", file=str(root),
                         expected="a folder of .md files")
    docs = []
    for path in sorted(p for p in root.rglob("*") if p.suffix in CORPUS_SUFFIXES):
        if path.name.lower() == "readme.md":
            continue
        try:
            raw = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"not UTF-8 ({exc.reason})", file=str(path)) from exc
        docs.append(Document(path.relative_to(root).as_posix(), unicodedata.normalize("NFC", raw)))
    if not docs:
        raise InputError("corpus folder holds no documents", file=str(root),
                         expected="*.md or *.txt files")
    return docs


def corpus_version(docs: list[Document]) -> str:
    """A hash of every document's id and text: changes when any byte changes."""
    h = hashlib.sha256()
    for d in docs:
        h.update(d.id.encode() + b"\0" + d.text.encode() + b"\0")
    return h.hexdigest()[:16]


_BREAKS = [re.compile(r"\n\s*\n"), re.compile(r"\n"), re.compile(r"(?<=[.!?。])\s+"),
           re.compile(r"\s+")]


def _cut(text: str, start: int, size: int) -> int:
    """End of a chunk starting at start: the last paragraph, line, sentence or
    word boundary within size characters, else a hard cut."""
    hard = min(len(text), start + size)
    if hard == len(text):
        return hard
    window = text[start:hard]
    for pattern in _BREAKS:
        ends = [m.end() for m in pattern.finditer(window) if m.end() >= size // 2]
        if ends:
            return start + ends[-1]
    return hard


CHUNK_SIZE = 800  # characters per chunk, unless the config's chunking says otherwise


def chunk_document(doc: Document, size: int = CHUNK_SIZE, overlap: int = 0) -> list[Chunk]:
    """Chunks of at most size characters that end on a paragraph, line, sentence or
    word boundary where one exists, with no leading or trailing whitespace.

    With overlap, the next chunk starts about overlap characters before the
    previous end, moved forward to the next word start so that no chunk begins
    mid-word; it always starts after the previous chunk's start.
    """
    if size <= 0 or not 0 <= overlap < size:
        raise InputError(f"chunk size {size}, overlap {overlap}", field="retrieval.chunk_size",
                         expected="size > 0 and 0 <= overlap < size")
    chunks: list[Chunk] = []
    text = doc.text
    n = len(text)
    start = 0
    while start < n:
        # Skip leading whitespace so chunks start on content.
        while start < n and text[start].isspace():
            start += 1
        if start >= n:
            break
        cut = _cut(text, start, size)
        end = cut
        # Trailing whitespace carries no content; the next chunk starts after it anyway.
        while end > start and text[end - 1].isspace():
            end -= 1
        chunks.append(Chunk(f"{doc.id}#{start}-{end}", doc.id, start, end, text[start:end]))
        if cut >= n:
            break
        nxt = cut
        if overlap:
            nxt = max(end - overlap, start + 1)
            # Snap forward to a word start, but never past the cut.
            while nxt < cut and not (text[nxt - 1].isspace() and not text[nxt].isspace()):
                nxt += 1
        start = nxt
    return chunks


def chunk_corpus(docs: list[Document], size: int = CHUNK_SIZE, overlap: int = 0) -> list[Chunk]:
    return [c for d in docs for c in chunk_document(d, size, overlap)]
