"""Text normalisation for answer matching.

`text_key` is the form two strings are compared in: NFC, casefold, Vietnamese
tone placement made canonical (evalpipe.vietnamese: "hòa" == "hoà",
"thuý" == "thúy" and the misplaced "qủa" == "quả"), every
character that is not a letter, digit or combining mark turned into a space,
runs of spaces folded. Diacritics are kept: "ho" and
"hồ" stay different words. `loose_key` additionally drops every diacritic
(and maps "đ" to "d"); it backs the lenient exact-match variant only.

Everything is precompiled and ASCII text takes a fast path, because the scorer
runs over hundreds of thousands of replies.
"""

from __future__ import annotations

import re

from evalpipe.vietnamese import canonical_tones, strip_diacritics

_NOT_WORD = re.compile(r"[^\w\u0300-\u036f]+")


def fold_space(text: str) -> str:
    """Punctuation and whitespace runs become one space; trimmed."""
    if "_" in text:
        text = text.replace("_", " ")
    return _NOT_WORD.sub(" ", text).strip()


def text_key(text: str) -> str:
    """The comparison form of a text: NFC, casefold, canonical tone placement,
    punctuation and space folded. Diacritics are kept."""
    if text.isascii():
        return fold_space(text.casefold())
    return fold_space(canonical_tones(text.casefold()))


def loose_key(text: str) -> str:
    """`text_key` without any diacritics: the lenient comparison form."""
    return strip_diacritics(text_key(text))


def contains_phrase(haystack_key: str, needle_key: str) -> bool:
    """Whether a normalised phrase occurs in a normalised text on word boundaries."""
    if not needle_key:
        return False
    return f" {needle_key} " in f" {haystack_key} "
