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

import math
import re
from dataclasses import replace
from decimal import Decimal

from evalpipe.scoring.answers.extract import Number
from evalpipe.scoring.answers.normalize import contains_phrase, text_key

# Words after which a number is a restatement, not a second answer.
_APPROX = re.compile(
    r"(?:khoảng|tức là|tức|xấp xỉ|gần|chừng|cỡ|about|approximately|approx\.?|roughly|around|"
    r"nearly|almost|some|~|≈)\s*$", re.IGNORECASE)
# A number the reply itself rejects ("294 is wrong, it is 295").
_REJECTED_AFTER = re.compile(
    r"\s*(?:is|was)\s+(?:wrong|not|incorrect)|\s*(?:isn't|wasn't|là sai|sai|không đúng|"
    r"không phải)\b", re.IGNORECASE)
_EQUALS = re.compile(r"(?:=|==|≈)\s*$")
# The number that follows one of these words is the one the reply gives as its answer.
_CUE = re.compile(
    r"(?:\bis|\bare|\bwas|\bwere|\bequals?|\bequal to|\bgives|\bget|\bhas|\bhave|\bhad|"
    r"\btotal of|\btotal|\bresult|\banswer|\bto|là|bằng|được|có|tổng cộng|tổng|kết quả|"
    r"đáp án|đáp số|lên|thành|còn|xuống|:)\s*(?:\*\*|\$|about\s|khoảng\s)?$", re.IGNORECASE)
# What may come before the number a reply opens with.
_LEAD = re.compile(
    r"^[\s*_#>\-\"'(\[]*(?:(?:there (?:are|is|were|was)|it (?:is|was|has|had)|it's|"
    r"có|có tất cả|tổng cộng|exactly|đúng|the answer is|answer|đáp án|kết quả)\s*[:]?\s*)?"
    r"[*_$\"'(\[]*$", re.IGNORECASE)
_OPERATOR_AFTER = re.compile(r"\s*[-+*/×x÷^]\s*\d")
# An answer the reply opens with goes on as an expression ("12 + 30 = 42"); a glued "4/5"
# ("4/5 stars", "27/30 passed") is a count out of a total, whose first number answers.
_EXPRESSION_AFTER = re.compile(r"\s*[-+*×x÷^]\s*\d|\s+/\s*\d")
_OPERATOR_BEFORE = re.compile(r"[-+*/×x÷^]\s*$")
# A self-correction: what follows replaces what came before.
_CORRECTION = re.compile(
    r"(?:\b(?:no|nope|oh)\s*[,.!]?\s*wait\b|\bwait\s*[,.!]?\s*(?:no|actually)\b"
    r"|\bwait\s*[,:!—–-]|\b(?:sorry|oops)\s*[,!]\s*(?:i\s+mean|i\s+meant|it'?s|that'?s|make that)?"
    r"|\bi\s+mean(?:t)?\b|\bcorrection\s*:|\blet me correct(?: that| myself)?\b"
    r"|\bscratch that\b|\bon second thought\b|\bmake that\b|\bactually\s*,"
    r"|à\s+không\b|à\s+nhầm\b|\bnhầm(?:\s+rồi)?\s*[,.!:]|\bý\s+(?:tôi|mình|em)\s+là\b"
    r"|\bđính chính\s*:?|\bsửa lại\s*:?|\bđúng ra\s+là\b|\bxin lỗi\s*,\s*(?:là|đúng ra là)?"
    # an admitted mistake: "I mis-added", "I made an error", "that was wrong", "the correct
    # result is", "Erratum:", "tôi cộng nhầm", "kết quả đúng là"
    r"|\bmis-?(?:calculated|added|counted|read|typed|computed|multiplied|copied|stated|spoke)\b"
    r"|\b(?:made|make)\s+(?:a|an)\s+(?:\w+\s+)?(?:mistake|error|typo|slip)\b"
    r"|\b(?:that|this|it|which)(?:'s|’s|\s+is|\s+was)\s+(?:wrong|incorrect|a\s+mistake|an\s+error"
    r"|a\s+typo|off)\b"
    r"|\b(?:added|multiplied|subtracted|divided|counted|computed|calculated|summed)\s+"
    r"(?:wrong(?:ly)?|incorrectly)\b"
    r"|\b(?:the\s+)?correct(?:ed)?\s+(?:answer|result|value|total|figure|sum|number|one)"
    r"\s*(?:is|was|should\s+be|would\s+be|:)"
    r"|\bcorrection\b|\berratum\b|\b(?:edit|update)\s*:|\bshould\s+(?:have\s+been|read)\b"
    r"|\b(?:tính|cộng|trừ|nhân|chia|đếm|đọc|ghi|viết|chép)\s+(?:nhầm|sai)\b"
    r"|\b(?:kết quả|đáp án|đáp số|con số|số)\s+đúng\s+(?:phải\s+)?(?:là|bằng)\b"
    r"|\bđúng\s+phải\s+là\b|\bnhầm\s+lẫn\b|\bbị\s+sai\b)"
    r"[\s:,]*", re.IGNORECASE)
_RANGE_GAP = re.compile(
    r"\s*(?:-|–|—|~|to|through|đến|tới|or|hoặc|hay|hay là|and|và|\.\.\.?)\s*"
    r"(?:[^\W\d_]{1,6}\s*)?", re.IGNORECASE)
_BETWEEN_AND = re.compile(r"\b(?:and|và)\b", re.IGNORECASE)
_BETWEEN = re.compile(r"\b(?:between|giữa|từ|from)\s*$", re.IGNORECASE)
_TO = re.compile(r"\b(?:to|đến|tới)\b", re.IGNORECASE)
_DATE_LIKE = re.compile(r"\d{1,4}[-/.]\d{1,2}[-/.]\d{1,4}")
_CHANGE = re.compile(
    r"\b(?:rose|risen|fell|fallen|fall|grew|grown|dropped|increased|decreased|went|gone|"
    r"changed|upgraded|downgraded|moved|cut|raised|reduced|lowered|jumped|climbed|shrank|"
    r"tăng|giảm|nâng|hạ|chuyển|đổi|sụt|lên|xuống)\b", re.IGNORECASE)
# A number marked as an earlier value of the thing asked.
_PREVIOUS = re.compile(
    r"(?:\b(?:previously|formerly|before that|before|used to be|originally|earlier|old|was once)"
    r"|trước đó|trước đây|trước kia|ban đầu|lúc trước|cũ)\b[^.;\n]*$", re.IGNORECASE)
_FROM_BEFORE = re.compile(r"\b(?:from|từ)\s*$", re.IGNORECASE)
_TO_AFTER = re.compile(r"[^\d.;\n]{0,12}?\b(?:to|lên|xuống|thành|sang|đến)\s*\d",
                       re.IGNORECASE)
# Words that say nothing about which value is meant (for the clause overlap of cue_label).
_FUNCTION_WORDS = frozenset(text_key(w) for w in [
    "the", "a", "an", "of", "to", "in", "on", "at", "for", "and", "or", "is", "are", "was", "were",
    "be", "been", "it", "its", "this", "that", "what", "which", "how", "many", "much", "does",
    "did", "do", "after", "before", "with", "by", "from", "as", "now", "still", "than", "then",
    "there", "là", "của", "và", "có", "không", "được", "các", "những", "trong", "cho", "này", "với",
    "một", "bao", "nhiêu", "nào", "gì", "mấy", "khi", "sau", "trước", "đã", "sẽ", "thì", "từ",
    "theo", "về", "đến", "bị", "hiện", "nay", "còn", "lên", "xuống"])
_PAST_WORDS = frozenset(text_key(w) for w in (
    "before", "previously", "originally", "earlier", "old", "former", "trước", "cũ",
    "ban đầu", "lúc đầu"))
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
# Words that offer a phrase as one of alternatives.
ALTERNATIVES = frozenset({"or", "hoặc", "hay"})
_QUESTION_CLAUSE = re.compile(r"(?:^|(?<=[.!?\n]))\s*([^.!?\n]+)\?")
_REJECTION = re.compile(r"\s*(?:no|nope|not|nah|không|chưa|sai|wrong|incorrect)\b",
                        re.IGNORECASE)
_JOINED_AFTER = re.compile(r"[-_.][^\W_]")
_JOINED_BEFORE = re.compile(r"[^\W_][-_]$")
_WORD_BEFORE = re.compile(r"(?<![^\W_])([^\W\d_][^\W_]*)[ \u00a0]+$")
_WORD_AFTER = re.compile(r"[ \u00a0]+([^\W\d_][^\W_]*)")
# Parts of a person's name or titles: a gold name extended by these is the same person.
NAME_PARTS = frozenset(text_key(w) for w in [
    "nguyễn", "trần", "lê", "phạm", "hoàng", "huỳnh", "phan", "vũ", "võ", "đặng", "bùi", "đỗ", "hồ",
    "ngô", "dương", "lý", "đinh", "trịnh", "đoàn", "lâm", "mai", "cao", "lương", "tạ", "hà", "chu",
    "văn", "thị", "anh", "minh", "đức", "hữu", "thanh", "ngọc", "thu", "thúy", "thuý", "quốc",
    "gia", "hồng", "kim", "bảo", "xuân", "thành", "công", "quang", "phương", "tuấn", "hải", "khánh",
    "tường", "diệu", "linh", "ánh", "bích", "cẩm", "châu", "hoài", "hương", "lan", "loan", "mỹ",
    "nhật", "phúc", "tâm", "thảo", "trung", "tú", "vân", "việt", "nguyen", "tran", "le", "pham",
    "hoang", "huynh", "vu", "vo", "dang", "bui", "do", "ho", "ngo", "duong", "ly", "dinh", "van",
    "thi", "duc", "huu", "ngoc", "thuy", "quoc", "hong", "bao", "xuan", "thanh", "cong", "tuan",
    "hai", "khanh", "anh", "chị", "em", "ông", "bà", "cô", "chú", "bác", "bạn", "thầy", "sếp", "mr",
    "mrs", "ms", "miss", "dr", "sir"])
_LABEL_CLAUSE = re.compile(r"[,.;!?\n()\[\]]+(?:\s|$)|\n|\s[-–—]\s")
_CLAUSE = re.compile(r"[,.;:!?\n()\[\]]+(?:\s|$)|\n|\s[-–—]\s")

# After a don't-know phrase, these mean the model guesses anyway.
GUESS_MARKERS = tuple(text_key(w) for w in (
    "probably", "maybe", "perhaps", "might be", "may be", "likely", "i think", "i guess",
    "i believe", "my guess", "có lẽ", "có thể là", "chắc là", "hình như", "khả năng là",
    "tôi nghĩ", "đoán là"))


def restatements(reply: str, numbers: list[Number]) -> set[int]:
    """Indices of numbers that are not candidates: a restatement of another (an
    approximation, a scale word) or one the reply rejects ("294 is wrong")."""
    out: set[int] = set()
    if len(numbers) < 2:
        return out
    for i, n in enumerate(numbers):
        before = reply[max(0, n.start - 16):n.start]
        if (_APPROX.search(before) or _rounded(n, numbers)
                or _REJECTED_AFTER.match(reply, n.end)):
            out.add(i)
    if len(out) == len(numbers):
        return set()
    return out


def _rounded(n: Number, numbers: list[Number]) -> bool:
    """A number written with a magnitude that rounds another one ("13358 bao, tức 13
    nghìn"): a restatement."""
    if n.scale == 1:
        return False
    target = Decimal(n.value) if isinstance(n.value, int) or math.isfinite(n.value) else None
    return target is not None and any(
        m is not n and m.scale == 1 and isinstance(m.value, int) and m.value
        and abs(m.value - target) < Decimal(m.value) / 10 for m in numbers)


def answer_number(reply: str, numbers: list[Number], echoes: frozenset = frozenset(),
                  asked: frozenset = frozenset()) -> tuple[Number | None, str]:
    """The number the reply gives as its answer, and the rule that chose it.

    `echoes` are the numbers the question states (a reply that restates them,
    "868 nhân 60 được 52080", is not answering with them); `asked` are the
    question's words: a number followed by one of them ("27 requests" for "how
    many requests ...") counts what was asked, and among several numbers after a cue
    the one whose clause shares most of them ("p99 to 95 ms" for a p99 question)."""
    if not numbers:
        return None, "none"
    corrected = correction_point(reply)
    if corrected and any(n.start >= corrected for n in numbers):
        chosen, rule = answer_number(reply[corrected:], [_shifted(n, -corrected) for n in numbers
                                                          if n.start >= corrected],
                                     echoes, asked)
        return (None if chosen is None else _shifted(chosen, corrected)), "corrected+" + rule
    kept = candidate_numbers(reply, numbers, echoes, asked)
    for n in reversed(kept):
        if _EQUALS.search(reply, max(0, n.start - 4), n.start):
            left = _left_of_equals(reply, kept, n)
            return (left, "equals_left") if left is not None else (n, "equals")
    first = kept[0]
    if _LEAD.match(reply[:first.start]) and not _EXPRESSION_AFTER.match(reply, first.end):
        return first, "leading"
    counted = {n.value: n for n in kept if unit_after(reply, n) in asked}
    if len(counted) == 1:
        return next(iter(counted.values())), "asked_unit"
    cued = [n for n in kept if _CUE.search(reply[max(0, n.start - 24):n.start])]
    labelled = _labelled(reply, cued or kept, asked)
    if labelled is not None:
        return labelled, "cue_label" if cued else "label"
    if cued:
        return cued[-1], "cue"
    return kept[-1], "last"


def _labelled(reply: str, numbers: list[Number], asked: frozenset) -> Number | None:
    """Among numbers of different values, the one whose clause alone names most of what
    the question asks ("p99 to 95 ms" for a p99 question, "Single request: 61 tokens/s"),
    or None when no clause stands out."""
    if len({n.value for n in numbers}) < 2:
        return None
    content = asked - _FUNCTION_WORDS
    overlap = [len(content & set(clause_of(reply, n).split())) for n in numbers]
    best = max(overlap)
    return numbers[overlap.index(best)] if best and overlap.count(best) == 1 else None


def candidate_numbers(reply: str, numbers: list[Number], echoes: frozenset = frozenset(),
                      asked: frozenset = frozenset()) -> list[Number]:
    """The numbers that may be the answer: not restatements, asides or echoes of the
    question (unless nothing else is left). A value the reply marks as an earlier one
    ("went from 180 ms to 38 ms") stays an aside wherever it is repeated."""
    skip = restatements(reply, numbers) | aside_numbers(reply, numbers, asked)
    earlier = {numbers[i].value for i in aside_numbers(reply, numbers, asked)}
    kept = [n for i, n in enumerate(numbers) if i not in skip and n.value not in earlier]
    kept = kept or [n for i, n in enumerate(numbers) if i not in skip] or list(numbers)
    fresh = [n for n in kept if n.value not in echoes]
    return fresh or kept


def _shifted(n: Number, by: int) -> Number:
    return replace(n, start=n.start + by, end=n.end + by)


def _left_of_equals(reply: str, numbers: list[Number], right: Number) -> Number | None:
    """In "294 = 42 × 7" the answer is the lone number on the left, not the expression on
    the right: the number just before the "=", when the right side goes on with an
    operator and the left side is no expression."""
    if not _OPERATOR_AFTER.match(reply, right.end):
        return None
    before = [n for n in numbers if n.end <= right.start]
    if not before:
        return None
    left = before[-1]
    if not _EQUALS.search(reply, left.end, right.start) or _OPERATOR_BEFORE.search(
            reply[max(0, left.start - 4):left.start]):
        return None
    return left


def clause_of(reply: str, n: Number) -> str:
    """The clause around a number, text_key form (punctuation and line breaks end it; a
    colon does not, so that "label: value" stays together)."""
    start = max((m.end() for m in _LABEL_CLAUSE.finditer(reply, 0, n.start)), default=0)
    m = _LABEL_CLAUSE.search(reply, n.end)
    return text_key(reply[start:m.start() if m else len(reply)])


def range_or_alternative(reply: str, numbers: list[Number], n: Number) -> bool:
    """The number is one end of a range or one of alternatives ("20-40", "from 20 to 40",
    "between 20 and 40", "42 hoặc 43", "42 or 43"): the reply gives no single answer. A
    change ("fell from 120 to 38 ms", "tăng từ 64 lên 128") is no range."""
    for other in numbers:
        if other is n or other.value == n.value:
            continue
        first, second = (n, other) if n.start < other.start else (other, n)
        gap = reply[first.end:second.start]
        if not _RANGE_GAP.fullmatch(gap):
            continue
        if gap.strip() in ("-", "–", "—", "~") and _DATE_LIKE.search(
                reply, max(0, first.start - 6), second.end + 6):
            continue
        lead = reply[max(0, first.start - 40):first.start]
        if _BETWEEN_AND.search(gap) and not _BETWEEN.search(lead):
            continue  # "and" joins a range only after "between" / "từ"
        if _TO.search(gap) and _CHANGE.search(clause_text(reply, first)):
            continue
        return True
    return False


def clause_text(reply: str, n: Number) -> str:
    start = max((m.end() for m in _CLAUSE.finditer(reply, 0, n.start)), default=0)
    return reply[start:n.start]


def aside_numbers(reply: str, numbers: list[Number], asked: frozenset) -> set[int]:
    """Indices of numbers said in passing: inside parentheses ("128 GB (trước đó là 64
    GB)"), or marked as an earlier value ("previously 64 GB", "trước đây là 64", "from
    64 to 128 GB") when the question does not ask about the past."""
    out = set()
    past_asked = bool(asked & _PAST_WORDS)
    for i, n in enumerate(numbers):
        earlier = not past_asked and (
            _PREVIOUS.search(clause_text(reply, n)[-40:])
            or (_FROM_BEFORE.search(reply[max(0, n.start - 8):n.start])
                and _TO_AFTER.match(reply, n.end)))
        if inside_parentheses(reply, n.start) or earlier:
            out.add(i)
    return out if len(out) < len(numbers) else set()


def inside_parentheses(reply: str, at: int) -> bool:
    depth = 0
    for ch in reply[:at]:
        if ch in "([":
            depth += 1
        elif ch in ")]" and depth:
            depth -= 1
    return depth > 0


def correction_point(reply: str) -> int:
    """Where the reply's last self-correction ends ("42... no, wait: 43", "à không, là 43",
    "sorry, I mean 43"), or 0 when it corrects nothing."""
    last = 0
    for m in _CORRECTION.finditer(reply):
        last = m.end()
    return last


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
    """Every occurrence of the phrase in the clause is negated (a negation just before
    or after it) or is one of alternatives ("Caddy or nginx", "Caddy hoặc nginx")."""
    words = clause_key.split()
    target = phrase_key.split()
    n = len(target)
    found = False
    for i in range(len(words) - n + 1):
        if words[i:i + n] == target:
            found = True
            before = words[max(0, i - NEGATION_WINDOW):i]
            after = words[i + n:i + n + NEGATION_WINDOW]
            alternative = (words[i - 1:i] and words[i - 1] in ALTERNATIVES and i >= 2) or (
                words[i + n:i + n + 1] and words[i + n] in ALTERNATIVES
                and len(words) > i + n + 1)
            if not (NEGATIONS.intersection(before) or NEGATIONS_AFTER.intersection(after)
                    or alternative):
                return False
    return found


def stated(reply: str, reply_key: str, phrase_key: str) -> bool:
    """The phrase occurs, and not only negated ("It is not Caddy"), offered as one of
    alternatives, or named in a question the reply then rejects ("Caddy? No, ...")."""
    if not contains_phrase(reply_key, phrase_key):
        return False
    in_clauses = [c for c in clauses(mask_rejected(reply, phrase_key))
                  if contains_phrase(c, phrase_key)]
    if not in_clauses:  # the phrase spans punctuation ("2.8.4"): nothing to negate
        return not any(contains_phrase(c, phrase_key) for c in clauses(reply)) and \
            contains_phrase(text_key(mask_rejected(reply, phrase_key)), phrase_key)
    return not all(negated_in(c, phrase_key) for c in in_clauses)


def negated_before(reply: str, start: int) -> bool:
    """A negation among the few words before a position, in its clause ("Không phải 45
    triệu" does not state 45 triệu)."""
    clause_start = max((m.end() for m in _CLAUSE.finditer(reply, 0, start)), default=0)
    before = text_key(reply[clause_start:start]).split()[-NEGATION_WINDOW:]
    return bool(NEGATIONS.intersection(before))


def mask_rejected(reply: str, phrase_key: str) -> str:
    """The reply with the phrase blanked out where it is asked about and then rejected:
    in "Caddy? No, it's still nginx." the reply does not state Caddy."""
    out = reply
    for m in _QUESTION_CLAUSE.finditer(reply):
        if contains_phrase(text_key(m.group(1)), phrase_key) and _REJECTION.match(reply, m.end()):
            out = out[:m.start(1)] + " " * (m.end(1) - m.start(1)) + out[m.end(1):]
    return out


def raw_occurrences(reply: str, phrase: str) -> list[tuple[int, int]]:
    """Where a phrase is written in the reply (case, spacing and punctuation between its
    words folded; word boundaries on both sides)."""
    words = [re.escape(w) for w in re.findall(r"[^\W_]+", phrase)]
    if not words:
        return []
    pattern = re.compile(r"(?<![^\W_])" + r"[\W_]+".join(words) + r"(?![^\W_])", re.IGNORECASE)
    return [m.span() for m in pattern.finditer(reply)]


def inside_other_name(reply: str, span: tuple[int, int], phrase: str,
                      keys: tuple[str, ...]) -> bool:
    """The occurrence is part of a longer name: an identifier going on with "-x" / "x-"
    ("ong-tho-3" for "ong-tho"), or, for a gold that is the short form of a longer name
    among its aliases (Trang, alias Lê Thu Trang), a capitalised word joined to it ("Nha
    Trang"). Name parts (family and middle names, titles) and a longer name that is
    itself an accepted answer do not count; "Grafana Loki" still states Loki."""
    start, end = span
    if _JOINED_AFTER.match(reply, end) or _JOINED_BEFORE.search(reply, 0, start):
        return True
    if not (phrase[:1].isupper() and any(
            len(k.split()) > len(text_key(phrase).split()) and contains_phrase(
                k, text_key(phrase)) for k in keys)):
        return False  # only a gold that its aliases show to be part of a longer name
    run_start, run_end = start, end
    while (m := _WORD_BEFORE.search(reply, 0, run_start)) is not None and m.group(1)[0].isupper():
        run_start = m.start(1)
    while (m := _WORD_AFTER.match(reply, run_end)) is not None and m.group(1)[0].isupper():
        run_end = m.end(1)
    if (run_start, run_end) == (start, end) or text_key(reply[run_start:run_end]) in keys:
        return False
    extra = text_key(reply[run_start:start] + " " + reply[end:run_end]).split()
    return not all(w in NAME_PARTS for w in extra)


def mask_other_names(reply: str, phrase: str, keys: tuple[str, ...],
                     asked: frozenset = frozenset()) -> str:
    """The reply with the occurrences of a gold that are inside another name, or that only
    own a relation ("Khoa's colleague Bảo", `possessor`), blanked."""
    out = reply
    for start, end in raw_occurrences(reply, phrase):
        if inside_other_name(reply, (start, end), phrase, keys) or possessor(
                reply, start, end, asked):
            out = out[:start] + " " * (end - start) + out[end:]
    return out


# People (and pets) named by their relation to someone: in "Khoa's colleague Bảo", "the
# manager of Lan", "đồng nghiệp của anh Khoa", Khoa and Lan are not who the reply names.
_RELATIONS_EN = (
    r"colleague|co-?worker|teammate|team-mate|manager|boss|supervisor|deputy|assistant|intern"
    r"|mentor|mentee|wife|husband|partner|spouse|brother|sister|son|daughter|father|mother|dad"
    r"|mom|mum|friend|cousin|neighbou?r|roommate|flatmate|replacement|backup|substitute"
    r"|stand-in|successor|predecessor|report|girlfriend|boyfriend|fianc[ée]e?|uncle|aunt|niece"
    r"|nephew|child|kid|relative|cat|dog|pet|secretary|trainee|apprentice|student|tutor")
_RELATIONS_VI = (
    r"đồng nghiệp|sếp|quản lý|trưởng nhóm|trợ lý|thực tập sinh|người hướng dẫn|vợ|chồng"
    r"|anh trai|chị gái|em trai|em gái|con trai|con gái|con|bố|mẹ|cha|bạn thân|bạn gái"
    r"|bạn trai|bạn|hàng xóm|người thay thế|người thay|người trực thay|cấp dưới|cấp trên|mèo"
    r"|chó|người yêu|phó|cộng sự|học trò|học viên|thư ký")
_POSSESSIVE_AFTER = re.compile(
    r"(?:'s|’s|'|’)\s+(?:[^\W\d_]+\s+)?(?P<rel>" + _RELATIONS_EN + r")s?\b", re.IGNORECASE)
_OF_BEFORE = re.compile(
    r"\b(?P<rel>" + _RELATIONS_EN + r")s?\s+of\s+$|(?:^|(?<=\W))(?P<rel_vi>" + _RELATIONS_VI
    + r")\s+của\s+(?:(?:anh|chị|em|ông|bà|cô|chú|bác|bạn|thầy)\s+)?$", re.IGNORECASE)


def possessor(reply: str, start: int, end: int, asked: frozenset = frozenset()) -> bool:
    """The name at reply[start:end] only owns a relation ("Khoa's colleague", "the manager
    of Lan", "đồng nghiệp của Khoa"): the person meant is someone else. Not when the question
    asks about that relation ("Bảo là đồng nghiệp của ai?")."""
    m = _POSSESSIVE_AFTER.match(reply, end)
    if m is None:
        m = _OF_BEFORE.search(reply, max(0, start - 40), start)
    if m is None:
        return False
    relation = text_key(m.group("rel") or m.group("rel_vi") or "")
    return not set(relation.split()) & asked


def guesses_after(reply_key: str, phrase_key: str) -> bool:
    """A guess marker follows the don't-know phrase: the reply answers after all."""
    at = f" {reply_key} ".find(f" {phrase_key} ")
    rest = f" {reply_key[at + len(phrase_key):]} " if at >= 0 else ""
    return any(f" {g} " in rest for g in GUESS_MARKERS)
