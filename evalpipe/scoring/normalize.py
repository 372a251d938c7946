"""Text normalisation for answer matching.

`text_key` is the form two strings are compared in: NFC, casefold, Vietnamese
tone placement made canonical (so "hòa" == "hoà" and "thuý" == "thúy"), every
character that is not a letter, digit or combining mark turned into a space,
runs of spaces folded. Diacritics are kept: "ho" and
"hồ" stay different words. `loose_key` additionally drops every diacritic
(and maps "đ" to "d"); it backs the lenient exact-match variant only.

Everything is precompiled and ASCII text takes a fast path, because the scorer
runs over hundreds of thousands of replies.
"""

from __future__ import annotations

import re
import unicodedata

# Vietnamese writes the tone of the glides "oa", "oe" and "uy" in two styles: on
# the first vowel (old: "hòa", "thúy") or on the second (new: "hoà", "thuý").
# Those three are the only places the styles differ, so the new style is the
# canonical one and a table of the 60 old-style spellings (5 tones x 3 glides x
# letter case) is rewritten in one regex pass.
TONE_MARKS = "\u0300\u0301\u0303\u0309\u0323"  # grave, acute, tilde, hook above, dot below


def _tone_table() -> dict[str, str]:
    table = {}
    for first, second in (("o", "a"), ("o", "e"), ("u", "y")):
        for f in (first, first.upper()):
            for s in (second, second.upper()):
                for tone in TONE_MARKS:
                    old = unicodedata.normalize("NFC", f + tone) + s
                    table[old] = f + unicodedata.normalize("NFC", s + tone)
    return table


_OLD_STYLE = _tone_table()
_OLD_STYLE_RE = re.compile("|".join(_OLD_STYLE))
_NOT_WORD = re.compile(r"[^\w\u0300-\u036f]+")
_COMBINING = re.compile(r"[\u0300-\u036f]+")


def _new_style(match: re.Match[str]) -> str:
    return _OLD_STYLE[match.group(0)]


def canonical_tones(text: str) -> str:
    """NFC text with the tone of "oa", "oe", "uy" on the second vowel ("hòa" -> "hoà",
    "thúy" -> "thuý"); every other syllable is the same in both styles."""
    if text.isascii():
        return text
    return _OLD_STYLE_RE.sub(_new_style, unicodedata.normalize("NFC", text))


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
