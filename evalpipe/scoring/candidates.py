"""Which of the things a reply says is its answer: the rules a careful grader applies.

extract.py reads every number and phrase; this module decides which one the
reply gives as its answer (docs/scoring.md, "Which number is the answer"):

- a final-answer line ("Answer: ...", "Đáp án: ...") is the answer, when there is one;
- a number restated as an approximation ("13358 bao, tức khoảng 13 nghìn bao") or
  with a scale word is not a second answer;
- numbers: the number after the last "=", else the number the reply opens with
  ("42. Note: see step 3", "Có 27 request bị lỗi 502", "60 minutes in 1 hour"),
  else the number after the last answer cue ("is", "là", "bằng"), else the last;
- an answer stated beside a conflicting candidate of the same kind ("12 people,
  including 10 people") is not an answer;
- a phrase that is negated ("It is not Caddy") is not stated;
- a don't-know phrase followed by a guess ("không chắc, nhưng có lẽ là ngày 12")
  is a guess, not an abstention.
"""

from __future__ import annotations

import re

from evalpipe.scoring.extract import Number
from evalpipe.scoring.normalize import contains_phrase, text_key

# Words after which a number is a restatement, not a second answer.
_APPROX = re.compile(
    r"(?:khoảng|tức là|tức|xấp xỉ|gần|chừng|cỡ|about|approximately|approx\.?|roughly|around|"
    r"nearly|almost|some|~|≈)\s*$", re.IGNORECASE)
_SCALE_AFTER = re.compile(
    r"\s*(?:nghìn|ngàn|triệu|tỷ|tỉ|thousand|million|billion|trillion|k\b)", re.IGNORECASE)
# A number the reply itself rejects ("294 is wrong, it is 295").
_REJECTED_AFTER = re.compile(
    r"\s*(?:is|was)\s+(?:wrong|not|incorrect)|\s*(?:isn't|wasn't|là sai|sai|không đúng|"
    r"không phải)\b", re.IGNORECASE)
_EQUALS = re.compile(r"(?:=|==|≈)\s*$")
# The number that follows one of these words is the one the reply gives as its answer.
_CUE = re.compile(
    r"(?:\bis|\bare|\bwas|\bwere|\bequals?|\bequal to|\bgives|\bget|\bhas|\bhave|\bhad|"
    r"\btotal of|\btotal|\bresult|\banswer|\bto|là|bằng|được|có|tổng cộng|tổng|kết quả|"
    r"đáp án|đáp số|lên|thành|:)\s*(?:\*\*|\$|about\s|khoảng\s)?$", re.IGNORECASE)
# What may come before the number a reply opens with.
_LEAD = re.compile(
    r"^[\s*_#>\-\"'(\[]*(?:(?:there (?:are|is|were|was)|it (?:is|was|has|had)|it's|"
    r"có|có tất cả|tổng cộng|exactly|đúng|the answer is|answer|đáp án|kết quả)\s*[:]?\s*)?"
    r"[*_$\"'(\[]*$", re.IGNORECASE)
_OPERATOR_AFTER = re.compile(r"\s*[-+*/×x÷^]\s*\d")
_WORD_AFTER = re.compile(r"[ \u00a0]*([^\W\d_]+)")

# Words that negate the phrase they come before (text_key form).
NEGATIONS = frozenset({
    "not", "no", "never", "nor", "neither", "isn", "wasn", "aren", "weren", "doesn", "didn",
    "instead", "rather", "không", "chẳng", "chưa", "chả", "đâu", "thay",
})
NEGATION_WINDOW = 3  # words before the phrase
# After the phrase: "Caddy is no longer used", "Caddy không còn được dùng".
NEGATIONS_AFTER = frozenset({"not", "no", "never", "isn", "wasn", "aren", "weren", "không",
                             "chưa", "chẳng"})
_CLAUSE = re.compile(r"[,.;:!?\n()\[\]]+(?:\s|$)|\n|\s[-–—]\s")

# After a don't-know phrase, these mean the model guesses anyway.
GUESS_MARKERS = tuple(text_key(w) for w in (
    "probably", "maybe", "perhaps", "might be", "may be", "likely", "i think", "i guess",
    "i believe", "my guess", "có lẽ", "có thể là", "chắc là", "hình như", "khả năng là",
    "tôi nghĩ", "đoán là"))


def restatements(reply: str, numbers: list[Number]) -> set[int]:
    """Indices of numbers that are not candidates: a restatement of another (an
    approximation, a scale word) or one the reply rejects ("294 is wrong")."""
    out = set()
    if len(numbers) < 2:
        return out
    for i, n in enumerate(numbers):
        before = reply[max(0, n.start - 16):n.start]
        if (_APPROX.search(before) or _SCALE_AFTER.match(reply, n.end)
                or _REJECTED_AFTER.match(reply, n.end)):
            out.add(i)
    if len(out) == len(numbers):
        return set()
    return out


def answer_number(reply: str, numbers: list[Number], echoes: frozenset = frozenset(),
                  asked: frozenset = frozenset()) -> tuple[Number | None, str]:
    """The number the reply gives as its answer, and the rule that chose it.

    `echoes` are the numbers the question states (a reply that restates them,
    "868 nhân 60 được 52080", is not answering with them); `asked` are the
    question's words: a number followed by one of them ("27 requests" for "how
    many requests ...") counts what was asked."""
    if not numbers:
        return None, "none"
    skip = restatements(reply, numbers)
    kept = [n for i, n in enumerate(numbers) if i not in skip]
    fresh = [n for n in kept if n.value not in echoes]
    kept = fresh or kept
    for n in reversed(kept):
        if _EQUALS.search(reply, max(0, n.start - 4), n.start):
            return n, "equals"
    first = kept[0]
    if (_LEAD.match(reply[:first.start]) and not _OPERATOR_AFTER.match(reply, first.end)):
        return first, "leading"
    counted = {n.value: n for n in kept if unit_after(reply, n) in asked}
    if len(counted) == 1:
        return next(iter(counted.values())), "asked_unit"
    for n in reversed(kept):
        if _CUE.search(reply[max(0, n.start - 24):n.start]):
            return n, "cue"
    return kept[-1], "last"


def unit_after(reply: str, n: Number) -> str | None:
    m = _WORD_AFTER.match(reply, n.end)
    return text_key(m.group(1)) if m else None


def conflicting(reply: str, numbers: list[Number], chosen: Number) -> bool:
    """Another number (not a restatement) counts the same thing with a different value:
    "a team of 12 people, including 10 people"."""
    unit = unit_after(reply, chosen)
    if unit is None:
        return False
    skip = restatements(reply, numbers)
    return any(i not in skip and n.value != chosen.value and unit_after(reply, n) == unit
               for i, n in enumerate(numbers))


def clauses(reply: str) -> list[str]:
    """The reply's clauses in text_key form (punctuation ends a clause)."""
    return [k for k in (text_key(c) for c in _CLAUSE.split(reply)) if k]


def negated_in(clause_key: str, phrase_key: str) -> bool:
    """Every occurrence of the phrase in the clause has a negation just before it."""
    words = clause_key.split()
    target = phrase_key.split()
    n = len(target)
    found = False
    for i in range(len(words) - n + 1):
        if words[i:i + n] == target:
            found = True
            before = words[max(0, i - NEGATION_WINDOW):i]
            after = words[i + n:i + n + NEGATION_WINDOW]
            if not (NEGATIONS.intersection(before) or NEGATIONS_AFTER.intersection(after)):
                return False
    return found


def stated(reply: str, reply_key: str, phrase_key: str) -> bool:
    """The phrase occurs, and not only negated ("It is not Caddy")."""
    if not contains_phrase(reply_key, phrase_key):
        return False
    in_clauses = [c for c in clauses(reply) if contains_phrase(c, phrase_key)]
    if not in_clauses:  # the phrase spans punctuation ("2.8.4"): nothing to negate
        return True
    return not all(negated_in(c, phrase_key) for c in in_clauses)


def guesses_after(reply_key: str, phrase_key: str) -> bool:
    """A guess marker follows the don't-know phrase: the reply answers after all."""
    at = f" {reply_key} ".find(f" {phrase_key} ")
    rest = f" {reply_key[at + len(phrase_key):]} " if at >= 0 else ""
    return any(f" {g} " in rest for g in GUESS_MARKERS)
