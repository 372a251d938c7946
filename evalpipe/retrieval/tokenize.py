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
from functools import lru_cache

# Letters/digits (not "_") followed by letters, digits or combining marks. NFC
# leaves a mark uncombined where no precomposed letter exists; keep it in the word.
_MARKS = "\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f"
_WORD = re.compile(rf"(?:[^\W_]|[{_MARKS}])+")

# The five Vietnamese tone marks as combining characters (NFD).
_TONES = {"\u0300", "\u0301", "\u0303", "\u0309", "\u0323"}
# Vowel-quality marks that belong to the letter: circumflex, breve, horn.
_QUALITY = {"\u0302", "\u0306", "\u031b"}
_VOWELS = set("aeiouy")
# Open two-vowel clusters whose tone sits on the first vowel in the old style
# ("hòa", "hòe", "thúy") and on the second in the new style ("hoà", "hoè", "thuý").
_NEW_STYLE_SECOND = {"oa", "oe", "uy"}


def _letters(nfd: str) -> list[tuple[str, str]] | None:
    """Split an NFD word into (base, quality marks) letters; None if not Latin+marks."""
    out: list[tuple[str, str]] = []
    for ch in nfd:
        if ch in _QUALITY:
            if not out:
                return None
            base, marks = out[-1]
            out[-1] = (base, marks + ch)
        elif ch.isascii() and ch.isalpha() or ch == "đ":
            out.append((ch, ""))
        else:
            return None
    return out


def _tone_position(letters: list[tuple[str, str]]) -> int | None:
    """Index of the letter that carries the tone in the new (2017 "modern") style."""
    n = len(letters)
    start = 0
    while start < n and letters[start][0] not in _VOWELS:
        start += 1
    if start == n:
        return None
    # "qu" and "gi" before another vowel are consonants: "quả", "già", "giữa".
    if start + 1 < n and letters[start + 1][0] in _VOWELS:
        head = "".join(b for b, _ in letters[:start + 1])
        if head.endswith("qu") or (head.endswith("gi") and start == 1):
            start += 1
    end = start
    while end < n and letters[end][0] in _VOWELS:
        end += 1
    cluster = list(range(start, end))
    marked = [i for i in cluster if letters[i][1]]
    if marked:  # ê, ơ, ô, â, ă, ư take the tone; in "ươ" the ơ does
        return marked[-1]
    if end < n:  # a final consonant: tone on the last vowel ("hoàng", "tuyết")
        return cluster[-1]
    if len(cluster) >= 3:  # "oai", "oay", "uya", "khuỷu"
        return cluster[1]
    if len(cluster) == 2:
        pair = "".join(letters[i][0] for i in cluster)
        return cluster[1] if pair in _NEW_STYLE_SECOND else cluster[0]
    return cluster[0]


@lru_cache(maxsize=1 << 16)
def normalize_tone(word: str) -> str:
    """Put a Vietnamese syllable's tone mark on its canonical vowel (new style).

    "hòa" -> "hoà", "thúy" -> "thuý", "qủa" -> "quả"; words that are not a
    Latin syllable with exactly one tone mark come back unchanged. Input and
    output are NFC.
    """
    nfd = unicodedata.normalize("NFD", word)
    tones = [ch for ch in nfd if ch in _TONES]
    if len(tones) != 1:
        return word
    letters = _letters("".join(ch for ch in nfd if ch not in _TONES))
    if not letters:
        return word
    pos = _tone_position(letters)
    if pos is None:
        return word
    base, marks = letters[pos]
    letters[pos] = (base, marks + tones[0])
    return unicodedata.normalize("NFC", "".join(b + m for b, m in letters))


def strip_accents(text: str) -> str:
    """Remove every combining mark and map đ to d (what an uncased BERT vocabulary does)."""
    nfd = unicodedata.normalize("NFD", text)
    return "".join(ch for ch in nfd if not unicodedata.combining(ch)).replace("đ", "d").replace(
        "Đ", "D")


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
            toks = [strip_accents(t) for t in toks]
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
