"""Vietnamese spelling variants, in one home for scoring and retrieval.

Vietnamese writes a syllable's tone mark in two styles for "oa", "oe" and "uy"
(old "hòa", "thúy"; new "hoà", "thuý"), and hurried typing misplaces it
("qủa", "gìa"). `normalize_tone` puts the tone where the new (2017) style puts
it, so every variant of a syllable is one spelling. Decision: "qủa" IS "quả".
The u of "qu" and the i of "gi" are consonants and never carry the tone, so
no word is spelled "qủa"; a reply that writes it means "quả", and both an
answer match and a retrieval query read it so.

`strip_diacritics` drops every combining mark and maps đ to d: the lenient
answer match and the accent-folding tokenizer use it.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

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
        elif (ch.isascii() and ch.isalpha()) or ch in "đĐ":
            out.append((ch, ""))
        else:
            return None
    return out


def _tone_position(letters: list[tuple[str, str]]) -> int | None:
    """Index of the letter that carries the tone in the new (2017 "modern") style."""
    n = len(letters)
    start = 0
    while start < n and letters[start][0].lower() not in _VOWELS:
        start += 1
    if start == n:
        return None
    # "qu" and "gi" before another vowel are consonants: "quả", "già", "giữa".
    if start + 1 < n and letters[start + 1][0].lower() in _VOWELS:
        head = "".join(b for b, _ in letters[:start + 1]).lower()
        if head.endswith("qu") or (head.endswith("gi") and start == 1):
            start += 1
    end = start
    while end < n and letters[end][0].lower() in _VOWELS:
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
        pair = "".join(letters[i][0] for i in cluster).lower()
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


# Letters/digits (not "_") followed by letters, digits or combining marks: one
# syllable. NFC leaves a mark uncombined where no precomposed letter exists.
_MARKS = "\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f"
SYLLABLE = re.compile(rf"(?:[^\W_]|[{_MARKS}])+")
_COMBINING = re.compile(f"[{_MARKS}]+")


def canonical_tones(text: str) -> str:
    """NFC text with every syllable's tone where `normalize_tone` puts it."""
    if text.isascii():
        return text
    return SYLLABLE.sub(lambda m: m.group() if m.group().isascii() else normalize_tone(m.group()),
                         unicodedata.normalize("NFC", text))


def strip_diacritics(text: str) -> str:
    """Remove every combining mark; "đ" becomes "d" ("Đường Hoà" -> "Duong Hoa")."""
    if text.isascii():
        return text
    text = unicodedata.normalize("NFD", text).replace("đ", "d").replace("Đ", "D")
    return _COMBINING.sub("", text)
