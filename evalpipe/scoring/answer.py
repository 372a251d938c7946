"""Exact match of a final reply against a question's gold answer.

Three variants are reported side by side; by construction
strict => exact => lenient.

number
  exact    the last number of the reply (read with the question's language, see
           extract.py) equals the gold. Integers compare exactly; otherwise a
           relative tolerance of 1e-6. A reply written with d >= 2 decimals also
           matches a gold with more decimals that rounds to it (gold 0.333333,
           reply 0.33): models are told to answer briefly and round.
  strict   the reply is that one number and nothing else but punctuation or
           symbols ("294", "294.", "**294**", "$294").
  lenient  any number of the reply, in either reading of an ambiguous
           "1,234"/"1.234", matches.
text
  exact    the answer or an alias occurs as a whole phrase in the reply, both in
           text_key form (NFC, casefold, tone placement, punctuation folded;
           diacritics kept).
  strict   the whole reply equals the answer or an alias in text_key form.
  lenient  the phrase test with every diacritic removed ("Ha Noi" for "Hà Nội").
abstain
  exact    a don't-know phrase (vi or en) occurs, or the gold text itself does.
  strict   the whole reply equals the gold text (or an alias) in text_key form.
  lenient  also a don't-know phrase written without diacritics ("khong biet").
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from evalpipe.scoring.extract import (
    Number,
    abstain_phrase,
    abstain_phrase_loose,
    extract_numbers,
    has_number_words,
)
from evalpipe.scoring.normalize import contains_phrase, strip_diacritics, text_key

REL_TOL = 1e-6
_LETTER_OR_DIGIT = re.compile(r"[^\W_]")
MIN_ROUNDED_DECIMALS = 2


@dataclass(frozen=True, slots=True)
class Gold:
    """The question-side half of a comparison, computed once per question."""

    answer_type: str
    lang: str
    number: int | float | None
    number_decimals: int
    keys: tuple[str, ...]  # text_key of the answer and aliases
    loose: tuple[str, ...]  # the same without diacritics


@dataclass(slots=True)
class AnswerMatch:
    exact: bool
    strict: bool
    lenient: bool
    extracted: Any  # the number read, the phrase found, or None
    abstained: bool
    number_words: bool
    reply_key: str
    rule: str | None = None  # which extraction rule read the answer (docs/scoring.md)


def _decimals(value: float) -> int:
    exponent = Decimal(repr(float(value))).as_tuple().exponent
    return -exponent if isinstance(exponent, int) and exponent < 0 else 0


def make_gold(answer: Any, answer_type: str, aliases: list[str], lang: str) -> Gold:
    number = None
    decimals = 0
    if answer_type == "number":
        number = answer if isinstance(answer, (int, float)) else float(answer)
        if isinstance(number, float) and number.is_integer() and abs(number) < 2**63:
            number = int(number)
        decimals = 0 if isinstance(number, int) else _decimals(number)
    texts = [str(answer), *aliases]
    keys = tuple(k for k in dict.fromkeys(text_key(t) for t in texts) if k)
    loose = tuple(dict.fromkeys(strip_diacritics(k) for k in keys))
    return Gold(answer_type, lang, number, decimals, keys, loose)


def numbers_match(got: int | float, decimals: int, gold: Gold) -> bool:
    """One number read from a reply (with the decimals it was written with) against the
    gold. Never raises: a number beyond float range (1e400, a 5,000-digit integer,
    read as inf) matches only an integer gold it equals exactly."""
    want = gold.number
    if want is None:
        return False
    if isinstance(got, int) and isinstance(want, int):
        return got == want
    try:
        got_integral = isinstance(got, int) or (math.isfinite(got) and got.is_integer())
        if isinstance(want, int) and got_integral:
            return int(got) == want
        got = float(got)
        if not math.isfinite(got):
            return False
        if abs(got - want) <= REL_TOL * max(abs(got), abs(want)):
            return True
    except OverflowError:  # an int beyond float range is no near miss of a float
        return False
    if decimals >= MIN_ROUNDED_DECIMALS and gold.number_decimals > decimals:
        return abs(got - want) <= 0.5 * 10.0 ** -decimals * (1 + 1e-9)
    return False


def _number_match(reply: str, reply_key: str, gold: Gold) -> AnswerMatch:
    numbers = extract_numbers(reply, gold.lang)
    last: Number | None = numbers[-1] if numbers else None
    words = has_number_words(reply, reply_key, last)
    exact = last is not None and numbers_match(last.value, last.decimals, gold)
    strict = (exact and len(numbers) == 1
              and not _LETTER_OR_DIGIT.search(reply, 0, last.start)
              and not _LETTER_OR_DIGIT.search(reply, last.end))
    lenient = exact or any(
        numbers_match(n.value, n.decimals, gold)
        or (n.alt is not None and numbers_match(n.alt, 0 if isinstance(n.alt, int) else 3, gold))
        for n in numbers)
    abstained = abstain_phrase(reply_key) is not None
    extracted = None if last is None else last.value
    if isinstance(extracted, float) and not math.isfinite(extracted):
        # beyond float range: report it as written (clipped), since JSON has no inf
        written = reply[last.start:last.end]
        extracted = written if len(written) <= 40 else written[:40] + "..."
    return AnswerMatch(exact, strict, lenient, extracted, abstained, words, reply_key)


def _text_match(reply_key: str, gold: Gold) -> AnswerMatch:
    found = next((k for k in gold.keys if contains_phrase(reply_key, k)), None)
    strict = reply_key in gold.keys
    exact = found is not None
    lenient = exact
    if not lenient:
        loose = strip_diacritics(reply_key)
        lenient = any(contains_phrase(loose, k) for k in gold.loose)
    abstained = abstain_phrase(reply_key) is not None
    return AnswerMatch(exact, strict, lenient, found, abstained, False, reply_key)


def _abstain_match(reply_key: str, gold: Gold) -> AnswerMatch:
    phrase = abstain_phrase(reply_key)
    strict = reply_key in gold.keys
    if phrase is None:
        phrase = next((k for k in gold.keys if contains_phrase(reply_key, k)), None)
    exact = phrase is not None
    lenient = exact or abstain_phrase_loose(strip_diacritics(reply_key)) is not None
    return AnswerMatch(exact, strict, lenient, phrase, exact, False, reply_key)


def match_answer(reply: str, gold: Gold) -> AnswerMatch:
    """Compare a final reply (reasoning already stripped) with the gold answer."""
    reply = reply or ""
    reply_key = text_key(reply)
    if gold.answer_type == "number":
        return _number_match(reply, reply_key, gold)
    if gold.answer_type == "abstain":
        return _abstain_match(reply_key, gold)
    return _text_match(reply_key, gold)
