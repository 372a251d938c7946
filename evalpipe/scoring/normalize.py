"""Text normalisation for answer matching.

`text_key` is the form two strings are compared in: NFC, casefold, Vietnamese
tone marks moved to one canonical place in their word (so "hòa" == "hoà" and
"thuý" == "thúy"), every character that is not a letter, digit or combining
mark turned into a space, runs of spaces folded. Diacritics are kept: "ho" and
"hồ" stay different words. `loose_key` additionally drops every diacritic
(and maps "đ" to "d"); it backs the lenient exact-match variant only.

Everything is precompiled and ASCII text takes a fast path, because the scorer
runs over hundreds of thousands of replies.
"""

from __future__ import annotations

import re
import unicodedata

# The five Vietnamese tone marks as combining characters: grave, acute, tilde,
# hook above, dot below. Vowel-quality marks (circumflex U+0302, breve U+0306,
# horn U+031B) stay on their letter; only the tone moves.
TONE_MARKS = "\u0300\u0301\u0303\u0309\u0323"
_TONE_SET = frozenset(TONE_MARKS)
_WORD_WITH_TONE = re.compile(
    r"(?:[^\W_]|[\u0300-\u036f])*[" + TONE_MARKS + r"](?:[^\W_]|[\u0300-\u036f])*")
_NOT_WORD = re.compile(r"(?:[^\w\u0300-\u036f]|_)+")
_COMBINING = re.compile(r"[\u0300-\u036f]+")


def _move_tones(match: re.Match[str]) -> str:
    word = match.group(0)
    tones = "".join(ch for ch in word if ch in _TONE_SET)
    return "".join(ch for ch in word if ch not in _TONE_SET) + tones


def canonical_tones(text: str) -> str:
    """NFC text whose tone marks sit on the last letter of their word.

    Old-style ("hòa", "thuý") and new-style ("hoà", "thúy") placements map to
    one form; which form does not matter, only that both sides agree."""
    if text.isascii():
        return text
    decomposed = unicodedata.normalize("NFD", text)
    return unicodedata.normalize("NFC", _WORD_WITH_TONE.sub(_move_tones, decomposed))


def fold_space(text: str) -> str:
    """Punctuation and whitespace runs become one space; trimmed."""
    return _NOT_WORD.sub(" ", text).strip()


def text_key(text: str) -> str:
    """The comparison form of a text: NFC, casefold, canonical tone placement,
    punctuation and space folded. Diacritics are kept."""
    if text.isascii():
        return fold_space(text.casefold())
    text = unicodedata.normalize("NFC", text).casefold()
    return fold_space(canonical_tones(text))


def strip_diacritics(text: str) -> str:
    """Remove every combining mark; "đ" becomes "d"."""
    if text.isascii():
        return text
    text = unicodedata.normalize("NFD", text).replace("đ", "d").replace("Đ", "D")
    return _COMBINING.sub("", text)


def loose_key(text: str) -> str:
    """`text_key` without any diacritics: the lenient comparison form."""
    return strip_diacritics(text_key(text))


def contains_phrase(haystack_key: str, needle_key: str) -> bool:
    """Whether a normalised phrase occurs in a normalised text on word boundaries."""
    if not needle_key:
        return False
    return f" {needle_key} " in f" {haystack_key} "
