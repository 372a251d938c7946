"""Exact match of a final reply against a question's gold answer.

Three variants are reported side by side; by construction
strict => exact => lenient. Which part of the reply is its answer is decided
by an extraction variant (VARIANTS; the default was picked by agreement with
a labelled set of replies, docs/scoring.md): a final-answer line first, then
the rules of candidates.py (answer-first numbers, restatements, conflicting
candidates, negation, hedged guesses).

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

from evalpipe.answer_line import final_answer_span
from evalpipe.scoring.answers import candidates, latex, quantities
from evalpipe.scoring.answers.abstention import abstention, premise_words, states_something
from evalpipe.scoring.answers.extract import (
    Number,
    abstain_phrase,
    abstain_phrase_loose,
    extract_numbers,
)
from evalpipe.scoring.answers.magnitude import SCALE_WORDS, spelled_as_digits
from evalpipe.scoring.answers.normalize import contains_phrase, strip_diacritics, text_key
from evalpipe.scoring.answers.quantities import Amount, Date

REL_TOL = 1e-6
_LETTER_OR_DIGIT = re.compile(r"[^\W_]")
MIN_ROUNDED_DECIMALS = 2


@dataclass(frozen=True, slots=True)
class Variant:
    """How the answer is found in a reply."""

    final_line: bool  # a final-answer line ("Answer: ...") is the answer when present
    rules: bool  # the rules of candidates.py; without them: the last number, any phrase


VARIANTS = {
    "last": Variant(final_line=False, rules=False),  # scorer version 1
    "line": Variant(final_line=True, rules=False),
    "rules": Variant(final_line=False, rules=True),
    "line+rules": Variant(final_line=True, rules=True),
}
DEFAULT_VARIANT = "line+rules"  # highest agreement with labels/extraction_labels.jsonl


@dataclass(frozen=True, slots=True)
class Gold:
    """The question-side half of a comparison, computed once per question."""

    answer_type: str
    lang: str
    number: int | float | None
    number_decimals: int
    keys: tuple[str, ...]  # text_key of the answer and aliases
    loose: tuple[str, ...]  # the same without diacritics
    question_numbers: frozenset = frozenset()  # numbers the question states (echoes)
    question_words: frozenset = frozenset()  # its words, text_key form ("how many requests")
    texts: tuple[str, ...] = ()  # the answer and aliases as written (names, identifiers)
    value: GoldValue | None = None  # a date, duration or amount: compared by value
    question_scales: frozenset[int] = frozenset()  # the unit asked in: "how many million"
    premise: frozenset[str] = frozenset()  # words a reply may reject as the premise


@dataclass(frozen=True, slots=True)
class GoldValue:
    """A text gold that is a value (quantities.py): its dates, durations or amounts (the
    answer's and its aliases'), and the years the question names."""

    dates: tuple[Date, ...] = ()
    durations: tuple[float, ...] = ()
    clock: bool = False  # a duration gold written "2:40": read "H:MM" in replies as one
    amounts: tuple[Amount, ...] = ()
    question_years: frozenset[int] = frozenset()
    times: tuple[frozenset[int], ...] = ()  # times of day (quantities.find_times)
    hours_alone: bool = False  # the question asks a time of day: "3 giờ" is 3 o'clock


def gold_value(texts: list[str], lang: str, question: str) -> GoldValue | None:
    dates, durations, amounts, clock = [], [], [], False
    times: list[frozenset[int]] = []
    asks_time = quantities.asks_time_of_day(question)
    for text in texts:
        found = quantities.find_dates(text, lang)
        if len(found) == 1 and quantities.whole(text, found[0].start, found[0].end):
            dates.append(found[0])
            continue
        # "2 giờ 40 phút" is a time of day or a duration: the question says which, and
        # when it says neither, the reply may give either
        clocks = quantities.find_times(text, hours_alone=True) if asks_time is not False else []
        if len(clocks) == 1 and quantities.whole(text, clocks[0].start, clocks[0].end):
            times.append(clocks[0].minutes)
            if asks_time:
                continue
        spans = quantities.find_durations(text, clock=True)
        if len(spans) == 1 and quantities.whole(text, spans[0].start, spans[0].end):
            durations.append(spans[0].seconds)
            clock |= ":" in text
            continue
        amount = quantities.gold_amount(text, lang)
        if amount is not None:
            amounts.append(amount)
    if not (dates or durations or amounts or times):
        return None
    years = frozenset(int(y) for y in re.findall(r"(?<!\d)\d{4}(?!\d)", question))
    return GoldValue(tuple(dates), tuple(durations), clock, tuple(amounts), years,
                     tuple(times), bool(asks_time))


@dataclass(slots=True)
class AnswerMatch:
    exact: bool
    strict: bool
    lenient: bool
    extracted: Any  # the number read, the phrase found, or None
    abstained: bool
    number_words: bool
    reply_key: str
    rule: str = "none"  # which extraction rule read the answer (docs/scoring.md)
    decided: bool = True  # False: the rules abstain; `exact` is their best reading
    answered: bool = True  # says something beyond the question (read for abstain golds)


def _decimals(value: float) -> int:
    exponent = Decimal(repr(float(value))).as_tuple().exponent
    return -exponent if isinstance(exponent, int) and exponent < 0 else 0


def _gold_number(text: str) -> int | float:
    """A number gold given as a string: an integer keeps every digit ("12345678901234567"
    is not rounded through a float); anything else is read by float()."""
    stripped = text.strip()
    if re.fullmatch(r"[-+]?\d+", stripped):
        return int(stripped)
    return float(stripped)


def make_gold(answer: Any, answer_type: str, aliases: list[str], lang: str,
              question: str = "") -> Gold:
    number = None
    decimals = 0
    if answer_type == "number":
        number = answer if isinstance(answer, (int, float)) else _gold_number(str(answer))
        if isinstance(number, float) and number.is_integer() and abs(number) < 2**63:
            number = int(number)
        decimals = 0 if isinstance(number, int) else _decimals(number)
    texts = [str(answer), *aliases]
    keys = tuple(k for k in dict.fromkeys(text_key(t) for t in texts) if k)
    loose = tuple(dict.fromkeys(strip_diacritics(k) for k in keys))
    numbers = frozenset(n.value for n in extract_numbers(question, lang))
    value = gold_value(texts, lang, question) if answer_type == "text" else None
    return Gold(answer_type, lang, number, decimals, keys, loose, numbers,
                frozenset(text_key(question).split()), tuple(texts), value,
                question_scales(question), premise_words(question))


_UNIT_SCALE = re.compile(r"\b(hundreds|thousands|millions|billions|hundred|thousand|million|"
                         r"billion|trăm|nghìn|ngàn|triệu|tỷ|tỉ)\b", re.IGNORECASE)


def question_scales(question: str) -> frozenset[int]:
    """The magnitudes the question asks its answer in ("bao nhiêu triệu đồng", "in
    thousands of dollars"): a scale word not written after a number of the question
    ("1,2 triệu" is an operand)."""
    out = set()
    for m in _UNIT_SCALE.finditer(question):
        if not question[:m.start()].rstrip()[-1:].isdigit():
            out.add(SCALE_WORDS[m.group(1).lower().removesuffix("s")])
    return frozenset(out)


def numbers_match(got: float, decimals: int, gold: Gold) -> bool:
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


def number_matches(n: Number, gold: Gold) -> bool:
    """A number read from a reply against the gold: its value (numbers_match); an exact
    fraction ("1/3") also matches a gold of two or more decimals it rounds to ("0.33");
    a percentage ("25%") also as its fraction (0.25); a value also in the unit the
    question asks in ("6,9 triệu" for "bao nhiêu triệu đồng?", gold 6.9)."""
    if numbers_match(n.value, n.decimals, gold):
        return True
    want = gold.number
    if want is None or not (n.fraction or n.percent or gold.question_scales):
        return False
    try:
        got = float(n.value)
    except OverflowError:  # beyond float range: no fraction, share or unit of any gold
        return False
    if not math.isfinite(got):
        return False
    if (n.fraction and isinstance(want, float) and gold.number_decimals >= MIN_ROUNDED_DECIMALS
            and abs(got - want) <= 0.5 * 10.0 ** -gold.number_decimals * (1 + 1e-9)):
        return True
    if n.percent and numbers_match(got / 100, n.decimals + 2, gold):
        return True
    return any(numbers_match(got / scale, n.decimals, gold) for scale in gold.question_scales)


def _answer_text(reply: str, variant: Variant,
                 boxed: tuple[int, int] | None = None) -> tuple[str, bool]:
    """The part of the reply that holds its answer, and whether it is a final-answer line:
    the later of the last final-answer line and the last boxed value ("\\boxed{42}"),
    with a correction written after it ("Answer: 1390 / Correction: ... 1309"), which
    then replaces it; else the whole reply."""
    if not variant.final_line:
        return reply, False
    spans = [s for s in (final_answer_span(reply), boxed) if s is not None]
    if not spans:
        return reply, False
    start, end = max(spans)
    text = reply[start:end]
    if variant.rules:
        after = reply[end:]
        fixed = candidates.correction_point(after)
        if fixed and _LETTER_OR_DIGIT.search(after, fixed):
            text = f"{text}\n{after}"  # read as a self-correction: what follows replaces it
    return text, True


def _abstained(reply: str, reply_key: str, gold: Gold, variant: Variant) -> str | None:
    """What shows that the reply abstains, or None. With the rules: the clause that says
    the information is missing (abstention.py: by meaning, and not when an answer is
    stated after it); without them (version 1): any don't-know phrase."""
    if variant.rules:
        found = abstention(reply, gold.question_numbers, gold.premise)
        return found.evidence if found.abstained else None
    return abstain_phrase(reply_key)


def _number_match(reply: str, reply_key: str, gold: Gold, variant: Variant,
                  boxed: tuple[int, int] | None) -> AnswerMatch:
    fractions = isinstance(gold.number, float)  # "1/3" is a third only for such a gold
    numbers = extract_numbers(reply, gold.lang, fractions)
    text, on_line = _answer_text(reply, variant, boxed)
    pool = extract_numbers(text, gold.lang, fractions) if on_line else numbers
    if variant.rules:
        chosen, rule = candidates.answer_number(text, pool, gold.question_numbers,
                                                gold.question_words)
        # two counts of the same thing and nothing marks one as the answer: ambiguous
        if rule.endswith("last") and chosen is not None and candidates.conflicting(
                text, pool, chosen):
            rule = "conflict"
        elif (chosen is not None and not rule.endswith("equals")
              and candidates.range_or_alternative(text, pool, chosen)):
            rule = "range"  # "20-40", "42 hoặc 43": no single answer
    else:
        chosen, rule = (pool[-1], "last") if pool else (None, "none")
    words = chosen is not None and (chosen.spelled or chosen.scale > 1)
    exact = (chosen is not None and rule not in ("conflict", "range")
             and number_matches(chosen, gold))
    # The rules abstain when only the last-number fallback chose and another candidate
    # would change the verdict: a grader (or the judge) has to read it.
    decided = not (variant.rules and rule.endswith("last") and any(
        number_matches(n, gold) != exact
        for n in candidates.candidate_numbers(text, pool, gold.question_numbers,
                                              gold.question_words) if n is not chosen))
    if on_line:
        rule = "final_line+" + rule
    last: Number | None = numbers[-1] if numbers else None
    strict = (exact and len(numbers) == 1 and last is not None and not words
              and not _LETTER_OR_DIGIT.search(reply, 0, last.start)
              and not _LETTER_OR_DIGIT.search(reply, last.end))
    lenient = exact or any(
        number_matches(n, gold)
        or (n.alt is not None and numbers_match(n.alt, 0 if isinstance(n.alt, int) else 3, gold))
        for n in numbers)
    abstained = _abstained(reply, reply_key, gold, variant) is not None
    extracted: int | float | str | None = None if chosen is None else chosen.value
    if chosen is not None and isinstance(chosen.value, float) and not math.isfinite(chosen.value):
        # beyond float range: report it as written (clipped), since JSON has no inf
        written = text[chosen.start:chosen.end]
        extracted = written if len(written) <= 40 else written[:40] + "..."
    return AnswerMatch(exact, strict, lenient, extracted, abstained, words, reply_key, rule,
                       decided)


_JOINER = re.compile(r"(?<=[^\W_])[-_](?=[^\W_])")  # "promote-replica", "max_memory"


def _separator_swapped(text: str, raw: str) -> bool:
    """The reply names the gold identifier with its hyphens and underscores swapped
    ("promote_replica.yml" for "promote-replica.yml") and never as written. Text keys
    fold both to a space, but in a file, host or variable name they are different
    characters: another name."""
    if not _JOINER.search(raw):
        return False
    swapped = _JOINER.sub(lambda m: "_" if m.group() == "-" else "-", raw)
    def named(name: str) -> bool:
        return re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text, re.IGNORECASE) is not None
    return named(swapped) and not named(raw)


def _text_stated(text: str, key: str, phrase: str, gold: Gold) -> bool:
    """The phrase is stated: not negated, and a number not contradicted by another."""
    if not candidates.stated(text, key, phrase):
        return False
    if phrase.isdigit():
        numbers = extract_numbers(text, gold.lang)
        mine = [n for n in numbers if n.value == int(phrase)]
        return not (mine and candidates.conflicting(text, numbers, mine[0]))
    return True


def _value_match(text: str, gold: Gold) -> tuple[bool, bool, Any] | None:
    """(matches, decided, the value read) for a gold that is a date, duration or amount,
    from the values the reply states outside parentheses; None when it states none."""
    value = gold.value
    assert value is not None
    text = spelled_as_digits(text)  # "two hours and forty minutes"
    def kept(items):
        return [i for i in items if not candidates.inside_parentheses(text, i.start)
                and not candidates.negated_before(text, i.start)]

    if value.dates:
        found = kept(quantities.find_dates(text, gold.lang))
        if found:
            verdicts = [quantities.date_matches(d, g, value.question_years)
                        for d in found for g in value.dates]
            if True in verdicts:
                return True, True, _date_text(found[verdicts.index(True) // len(value.dates)])
            return False, None not in verdicts, _date_text(found[-1])
    if value.times:
        clocks = kept(quantities.find_times(text, value.hours_alone))
        if clocks:
            readings = [_time_verdict(t.minutes, value.times) for t in clocks]
            best = True if True in readings else (None if None in readings else False)
            at = clocks[readings.index(best)]
            return best is not False, best is not None, _time_text(at.minutes)
    if value.durations:
        spans = kept(quantities.find_durations(text, clock=value.clock))
        if spans:
            hit = next((d for d in spans if any(abs(d.seconds - g) < 0.5
                                                for g in value.durations)), None)
            return hit is not None, True, (hit or spans[-1]).seconds
    if value.amounts:
        amounts = kept(quantities.find_amounts(text, gold.lang))
        units = {a.unit for a in value.amounts}
        fitting = [a for a in amounts if a.unit is None or a.unit in units]
        if fitting:
            # with its currency named, "$1,480" is 1480 whatever the question's language
            hit = next((a for a in fitting if any(
                a.value == g.value or (a.unit is not None and a.alt == g.value)
                for g in value.amounts)), None)
            return hit is not None, True, (hit or fitting[-1]).value
    return None


def _time_verdict(reply: frozenset[int], golds: tuple[frozenset[int], ...]) -> bool | None:
    """True when every reading of the reply's time is a reading of a gold time, False when
    none is, None when it reads two ways ("2:40" for a gold "14:40")."""
    if any(reply <= g for g in golds):
        return True
    return False if all(not reply & g for g in golds) else None


def _time_text(minutes: frozenset[int]) -> str:
    return " | ".join(f"{m // 60:02d}:{m % 60:02d}" for m in sorted(minutes))


def _date_text(d: Date) -> str:
    return f"{d.year or '????'}-{d.month:02d}-{d.day:02d}"


def _text_match(reply: str, reply_key: str, gold: Gold, variant: Variant,
                boxed: tuple[int, int] | None) -> AnswerMatch:
    text, on_line = _answer_text(reply, variant, boxed)
    key = text_key(text) if on_line else reply_key
    decided = True
    if variant.rules:
        rule = ""
        corrected = candidates.correction_point(text)
        if corrected and _LETTER_OR_DIGIT.search(text, corrected):
            text, rule = text[corrected:], "corrected+"  # the correction replaces the rest
        key = text_key(text)
        by_value = _value_match(text, gold) if gold.value is not None else None
        found = None
        for raw in gold.texts:  # each accepted answer on the reply without its other names
            masked = candidates.mask_other_names(text, raw, gold.keys, gold.question_words)
            k = text_key(raw)
            if k and not _separator_swapped(text, raw) and _text_stated(
                    masked, text_key(masked), k, gold):
                found = k
                break
        if by_value is not None and found is None:
            matched, decided, read = by_value
            found = read if matched else None
            rule += "value" if decided else "value_ambiguous"
        else:
            rule += "phrase" if found is not None else (
                "other_separator" if any(_separator_swapped(text, raw) for raw in gold.texts)
                else "negated_or_conflict" if any(contains_phrase(key, k) for k in gold.keys)
                else "none")
    else:
        found = next((k for k in gold.keys if contains_phrase(key, k)), None)
        rule = "phrase" if found is not None else "none"
    if on_line:
        rule = "final_line+" + rule
    exact = found is not None
    strict = exact and reply_key in gold.keys
    lenient = exact
    if not lenient:
        loose = strip_diacritics(reply_key)
        lenient = any(contains_phrase(loose, k) for k in gold.loose)
    abstained = _abstained(reply, reply_key, gold, variant) is not None
    return AnswerMatch(exact, strict, lenient, found, abstained, False, reply_key, rule, decided)


def _abstain_match(reply: str, reply_key: str, gold: Gold, variant: Variant,
                   boxed: tuple[int, int] | None) -> AnswerMatch:
    text, on_line = _answer_text(reply, variant, boxed)
    key = text_key(text) if on_line else reply_key
    strict = reply_key in gold.keys
    phrase = _abstained(text, key, gold, variant)
    rule = "abstain_clause" if variant.rules else "abstain_phrase"
    if phrase is None and abstain_phrase(key) is not None:
        rule = "guess"  # a don't-know phrase, then an answer: an answer after all
    elif phrase is None:
        phrase = next((k for k in gold.keys if contains_phrase(key, k)), None)
        rule = "gold_phrase" if phrase is not None else "none"
    if strict and phrase is None:
        phrase = reply_key
    exact = phrase is not None
    lenient = exact or (rule != "guess"
                        and abstain_phrase_loose(strip_diacritics(key)) is not None)
    if on_line:
        rule = "final_line+" + rule
    return AnswerMatch(exact, strict, lenient, phrase, exact, False, reply_key, rule,
                       answered=exact or states_something(reply, gold.question_words))


def match_answer(reply: str, gold: Gold, variant: str = DEFAULT_VARIANT) -> AnswerMatch:
    """Compare a final reply (reasoning already stripped) with the gold answer, finding
    the answer in it as the named extraction variant says (VARIANTS)."""
    read = latex.plain(reply or "")  # "\(\boxed{42}\)", "\frac{1}{3}", "1{,}234"
    reply = read.text
    reply_key = text_key(reply)
    v = VARIANTS[variant]
    if gold.answer_type == "number":
        return _number_match(reply, reply_key, gold, v, read.boxed)
    if gold.answer_type == "abstain":
        return _abstain_match(reply, reply_key, gold, v, read.boxed)
    return _text_match(reply, reply_key, gold, v, read.boxed)
