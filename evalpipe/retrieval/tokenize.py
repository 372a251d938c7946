"""Sparse tokenizer for Vietnamese and English text.

Steps: NFC, casefold, words as runs of letters/digits (combining marks kept
inside words), Vietnamese tone placement made canonical ("hòa" and "hoà" give
the same token), optional syllable bigrams ("máy chủ" -> "máy_chủ") for pairs
where at least one syllable carries a Vietnamese (non-ASCII) letter.

Vietnamese writes one syllable per space-separated word, so a compound such as
"máy chủ" (server) is two tokens; bigrams let BM25 reward the phrase without
a word segmenter. Underscore is a separator inside tokens, so a bigram can
never collide with a unigram.
"""

from __future__ import annotations

import re
import unicodedata

from evalpipe.vietnamese import SYLLABLE as _WORD
from evalpipe.vietnamese import normalize_tone, strip_diacritics


def fold(text: str) -> str:
    """NFC, casefold, NFC again (casefold can decompose, e.g. "İ" -> "i̇")."""
    return unicodedata.normalize("NFC", unicodedata.normalize("NFC", text).casefold())


def words(text: str) -> list[re.Match[str]]:
    """The word matches of fold(text), before tone handling."""
    return list(_WORD.finditer(fold(text)))


class Tokenizer:
    """Callable text -> tokens; settings are part of the retrieval fingerprint."""

    def __init__(self, bigrams: bool = True, tone_norm: bool = True, fold_accents: bool = False):
        self.bigrams = bigrams
        self.tone_norm = tone_norm
        self.fold_accents = fold_accents

    def settings(self) -> dict:
        return {"bigrams": self.bigrams, "tone_norm": self.tone_norm,
                "fold_accents": self.fold_accents}

    def __call__(self, text: str) -> list[str]:
        norm = fold(text)
        spans = list(_WORD.finditer(norm))
        toks = [m.group() for m in spans]
        if self.fold_accents:
            toks = [strip_diacritics(t) for t in toks]
        elif self.tone_norm:
            toks = [normalize_tone(t) for t in toks]
        if not self.bigrams or len(toks) < 2:
            return toks
        out = list(toks)
        # Pair neighbours separated only by spaces (a comma or full stop ends a phrase),
        # and only where one of the two has a non-ASCII letter: Vietnamese compounds
        # ("máy chủ") gain, English word pairs ("how much") only dilute the query.
        # On the site_rag set this rule beat both "every pair" and "no pairs" for each
        # language (docs/retrieval.md).
        viet = [not m.group().isascii() for m in spans]
        for i in range(len(toks) - 1):
            if not (viet[i] or viet[i + 1]):
                continue
            gap = norm[spans[i].end():spans[i + 1].start()]
            if gap.isspace() and "\n\n" not in gap:
                out.append(toks[i] + "_" + toks[i + 1])
        return out


def tokenize(text: str, bigrams: bool = True) -> list[str]:
    """Tokens of text with the default settings (tone normalisation on)."""
    return Tokenizer(bigrams=bigrams)(text)
