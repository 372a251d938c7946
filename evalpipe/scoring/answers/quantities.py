"""Text answers that are values: dates, durations and amounts, in any of their forms.

A careful grader accepts "May 20, 2024", "20/5/2024", "2024-05-20" and "ngày 20 tháng 5
năm 2024" for the gold "20 May 2024"; "2h40", "160 minutes" and "2 giờ 40 phút" for
"2 giờ 40 phút"; "45.000.000 đồng" and "45tr" for "45 triệu đồng". A gold (or an alias)
that reads entirely as one of these kinds is compared by value:

- a date: (year, month, day); a reply's date without a year matches when the question
  names the gold's year. Numeric dates are day first in Vietnamese; in English a
  "5/6/2024" that reads both ways is ambiguous (the rules leave it undecided);
- a duration: seconds ("2:40" is a duration only where the gold is one);
- an amount: a number (with its magnitude) and a unit of the same kind (VND, GB, ...);
  a reply may leave the unit out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from evalpipe.scoring.answers.extract import extract_numbers

MONTHS = {name: i + 1 for i, names in enumerate([
    ("january", "jan"), ("february", "feb"), ("march", "mar"), ("april", "apr"), ("may",),
    ("june", "jun"), ("july", "jul"), ("august", "aug"), ("september", "sep", "sept"),
    ("october", "oct"), ("november", "nov"), ("december", "dec")]) for name in names}
_MONTH = r"(" + "|".join(sorted(MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(\d{4})"
# each: (regex, group names in order)
_DATE_FORMS = [
    (re.compile(r"(?<!\d)" + _YEAR + r"-(\d{1,2})-(\d{1,2})(?!\d)"), "ymd"),
    (re.compile(r"(?<![\d/.-])(\d{1,2})[/.-](\d{1,2})[/.-]" + _YEAR + r"(?!\d)"), "nny"),
    (re.compile(r"(?:ngày\s+)?(\d{1,2})\s+tháng\s+(\d{1,2})(?:\s*(?:năm|,)\s*" + _YEAR + r")?",
                re.IGNORECASE), "dmy"),
    (re.compile(r"(?:ngày\s+)?(\d{1,2})/(\d{1,2})(?:/" + _YEAR + r")?(?![\d/])", re.IGNORECASE),
     "nn"),
    (re.compile(r"(?<!\w)" + _DAY + r"\s+(?:of\s+)?" + _MONTH + r",?(?:\s+" + _YEAR + r")?(?!\w)",
                re.IGNORECASE), "dMy"),
    (re.compile(r"(?<!\w)" + _MONTH + r"\s+" + _DAY + r"(?:,?\s+" + _YEAR + r")?(?!\w)",
                re.IGNORECASE), "Mdy"),
]


@dataclass(frozen=True, slots=True)
class Date:
    year: int | None
    month: int
    day: int
    other: tuple[int, int] | None = None  # (month, day) of the other reading of "5/6/2024"
    start: int = 0
    end: int = 0


def _valid(month: int, day: int) -> bool:
    return 1 <= month <= 12 and 1 <= day <= 31


def find_dates(text: str, lang: str = "en") -> list[Date]:
    """Every date written in the text, in order (a span read by one form is not read
    again by another)."""
    found: list[Date] = []
    taken: list[tuple[int, int]] = []
    for regex, kind in _DATE_FORMS:
        for m in regex.finditer(text):
            if any(m.start() < e and s < m.end() for s, e in taken):
                continue
            g = m.groups()
            other: tuple[int, int] | None = None
            year: int | None
            if kind == "ymd":
                year, month, day = int(g[0]), int(g[1]), int(g[2])
            elif kind in ("nny", "nn"):
                a, b = int(g[0]), int(g[1])
                year = int(g[2]) if g[2] else None
                if (kind == "nn" and year is None and lang != "vi"
                        and not m.group().lower().startswith("ngày")):
                    continue  # "3/4" alone is a fraction as often as a date
                day, month = a, b
                if lang != "vi" and _valid(a, b) and a <= 12:  # US order is possible
                    if b > 12:
                        day, month = b, a
                    elif a != b:
                        other = (a, b)
            elif kind == "dmy":
                day, month, year = int(g[0]), int(g[1]), int(g[2]) if g[2] else None
            elif kind == "dMy":
                day, month, year = int(g[0]), MONTHS[g[1].lower()], int(g[2]) if g[2] else None
            else:
                month, day, year = MONTHS[g[0].lower()], int(g[1]), int(g[2]) if g[2] else None
            if not _valid(month, day):
                continue
            taken.append(m.span())
            found.append(Date(year, month, day, other, m.start(), m.end()))
    return sorted(found, key=lambda d: d.start)


def date_matches(got: Date, gold: Date, question_years: frozenset[int]) -> bool | None:
    """True / False, or None when the reply's date reads two ways and only one matches."""
    if got.year is not None and gold.year is not None and got.year != gold.year:
        return False
    if got.year is None and gold.year is not None and gold.year not in question_years:
        return False
    same = (got.month, got.day) == (gold.month, gold.day)
    if got.other is None:
        return same
    other = got.other == (gold.month, gold.day)
    return same if same == other else None


# --- durations ----------------------------------------------------------------------------

_UNIT_SECONDS = {"h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600,
                 "giờ": 3600, "tiếng": 3600, "m": 60, "min": 60, "mins": 60, "minute": 60,
                 "minutes": 60, "phút": 60, "p": 60, "s": 1, "sec": 1, "secs": 1,
                 "second": 1, "seconds": 1, "giây": 1}
_DUR_UNIT = r"(hours?|hrs?|h|giờ|tiếng|minutes?|mins?|m|phút|p|seconds?|secs?|s|giây)"
_DUR_PART = re.compile(r"(\d+(?:[.,]\d+)?)\s*" + _DUR_UNIT + r"(?![^\W\d_])", re.IGNORECASE)
_DUR_GLUE = re.compile(r"\s*(?:,|and|và|,\s*and)?\s*")
_HOUR_MIN = re.compile(r"(?<![\d:])(\d{1,2})(?:h|giờ\s*)(\d{2})(?![\d:])")
_CLOCK = re.compile(r"(?<![\d:])(\d{1,2}):(\d{2})(?::(\d{2}))?(?![\d:])")


@dataclass(frozen=True, slots=True)
class Duration:
    seconds: float
    start: int
    end: int


def _seconds(m: re.Match[str]) -> float:
    return float(m.group(1).replace(",", ".")) * _UNIT_SECONDS[m.group(2).lower()]


def find_durations(text: str, clock: bool = False) -> list[Duration]:
    """Durations: runs of number + unit ("2 hours and 5 minutes", "7m40s", "1h52"), and
    with `clock` also "2:40" (hours:minutes) and "7:40:00"."""
    out: list[Duration] = []
    taken: list[tuple[int, int]] = []
    for m in _HOUR_MIN.finditer(text):
        out.append(Duration(int(m.group(1)) * 3600 + int(m.group(2)) * 60, *m.span()))
        taken.append(m.span())
    pos = 0
    while (part := _DUR_PART.search(text, pos)) is not None:
        start, end, total = part.start(), part.end(), _seconds(part)
        while (glue := _DUR_GLUE.match(text, end)) is not None and (
                nxt := _DUR_PART.match(text, glue.end())) is not None:
            total, end = total + _seconds(nxt), nxt.end()
        if not any(start < e and s < end for s, e in taken):
            out.append(Duration(total, start, end))
        pos = end
    if clock:
        for m in _CLOCK.finditer(text):
            if not any(m.start() < e and s < m.end() for s, e in taken):
                h, mi, se = int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)
                out.append(Duration(h * 3600 + mi * 60 + se, *m.span()))
    return sorted(out, key=lambda d: d.start)


# --- times of day -------------------------------------------------------------------------
#
# A time of day is the set of minutes after midnight it may stand for: "14:40", "2:40 pm",
# "2 giờ 40 chiều" are {14:40}; "2:40 am", "2 giờ 40 sáng" {2:40}; "2:40", "2 giờ 40 phút"
# (no part of day, an hour of 1 to 12) {2:40, 14:40}. A reply's time matches a gold time
# when every reading of it is a reading of the gold, and does not when no reading is;
# otherwise ("2:40" for a gold "14:40") it reads two ways and the rules leave it undecided.

_PART = (r"(?P<part>a\.?m\.?|p\.?m\.?|in the morning|in the afternoon|in the evening|at night"
         r"|(?:vào\s+)?(?:buổi\s+|ban\s+|rạng\s+)?(?:sáng|trưa|chiều|tối|đêm|khuya))")
_MINUTES = (r"(?:\s*(?P<sep>[:.hg]|giờ)\s*(?P<minute>\d{1,2})(?::\d{2})?(?:\s*phút)?"
            r"|\s*giờ\s*(?:(?P<half>rưỡi)|kém\s*(?P<before>\d{1,2})(?:\s*phút)?|đúng)?"
            r"|\s*o'?clock)?")
_TIME = re.compile(r"(?<![\d:.,/])(?P<hour>\d{1,2})" + _MINUTES + r"(?:\s*" + _PART + r")?"
                   r"(?![\w:])", re.IGNORECASE)
_PAST_TO = re.compile(r"(?<![\w])(?:(?P<past>half|quarter|\d{1,2}(?:\s*minutes)?)\s+past|"
                      r"(?P<to>quarter|\d{1,2}(?:\s*minutes)?)\s+to)\s+(?P<hour>\d{1,2})"
                      r"(?:\s*o'?clock)?(?:\s*" + _PART + r")?(?![\w:])", re.IGNORECASE)
_DURATION_QUESTION = re.compile(r"\b(?:how long|bao lâu|mất bao|kéo dài|trong bao)", re.IGNORECASE)
_TIME_QUESTION = re.compile(r"\b(?:what time|which time|when|at what|mấy giờ|lúc nào|khi nào"
                            r"|giờ nào|thời điểm|vào lúc|lúc)\b", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class TimeOfDay:
    minutes: frozenset[int]  # the minutes after midnight it may stand for
    start: int
    end: int


def _readings(hour: int, minute: int, part: str | None) -> frozenset[int]:
    if part is None:
        if hour == 0 or hour >= 13:
            return frozenset({hour % 24 * 60 + minute})
        return frozenset({hour % 12 * 60 + minute, (hour % 12 + 12) * 60 + minute})
    if hour >= 13:  # a 24-hour hour says it all ("14:40 chiều")
        return frozenset({hour % 24 * 60 + minute})
    p = part.lower().replace(".", "")
    if p.startswith(("am", "in the morning")) or p.endswith("sáng"):
        h = hour % 12
    elif p.endswith("trưa"):
        h = hour if hour >= 10 else hour + 12
    elif p.endswith(("đêm", "khuya")) or p == "at night":
        h = hour + 12 if 6 <= hour <= 11 else hour % 12
    else:  # pm, afternoon, evening, chiều, tối
        h = hour if hour == 12 else hour + 12
    return frozenset({h * 60 + minute})


def find_times(text: str, hours_alone: bool = False) -> list[TimeOfDay]:
    """Times of day in the text: "14:40", "14h40", "2:40 pm", "2.40pm", "2 giờ 40 phút
    sáng", "3 giờ kém 20", "2 giờ rưỡi chiều", "3pm", "3 o'clock"; an hour with nothing
    but "giờ" after it ("3 giờ") only with `hours_alone` (elsewhere it is a duration)."""
    out = []
    for m in _TIME.finditer(text):
        hour, part = int(m.group("hour")), m.group("part")
        whole = m.group()
        minute, sep, digits = 0, (m.group("sep") or "").lower(), m.group("minute")
        if digits is not None:
            if (sep != "giờ" and len(digits) != 2) or (sep == "." and not part) or (
                    sep in "hg" and " " in whole[:whole.find(digits)]):
                continue  # "2.40" is a number, "2 h 5" no time
            minute = int(digits)
        elif m.group("half"):
            minute = 30
        elif m.group("before"):
            hour, minute = hour - 1, 60 - int(m.group("before"))
        elif not (part or "clock" in whole.lower() or (hours_alone and "giờ" in whole.lower())):
            continue  # a bare number, or "3 giờ" where it is three hours
        if not (0 <= hour <= 24 and 0 <= minute <= 59):
            continue
        out.append(TimeOfDay(_readings(hour, minute, part), m.start(), m.end()))
    for m in _PAST_TO.finditer(text):  # "half past 7", "quarter to 4 in the afternoon"
        hour, said = int(m.group("hour")), (m.group("past") or m.group("to")).lower()
        minute = 30 if said == "half" else 15 if said == "quarter" else int(said.split()[0])
        if m.group("to"):
            hour, minute = hour - 1, 60 - minute
        if 0 <= hour <= 24 and 0 <= minute <= 59:
            out = [t for t in out if not (m.start() <= t.start < m.end())]
            out.append(TimeOfDay(_readings(hour, minute, m.group("part")), m.start(), m.end()))
    return sorted(out, key=lambda t: t.start)


def asks_time_of_day(question: str) -> bool | None:
    """True when the question asks a time of day ("lúc mấy giờ", "what time"), False when
    it asks a duration ("how long", "mất bao lâu"), None when it says neither."""
    if _DURATION_QUESTION.search(question):
        return False
    return True if _TIME_QUESTION.search(question) else None


# --- amounts ------------------------------------------------------------------------------

UNIT_KINDS = {
    "vnd": "vnd", "vnđ": "vnd", "đồng": "vnd", "đ": "vnd", "₫": "vnd", "dong": "vnd",
    "gb": "gb", "gigabyte": "gb", "gigabytes": "gb", "gib": "gb",
    "mb": "mb", "megabyte": "mb", "megabytes": "mb", "mib": "mb",
    "tb": "tb", "ms": "ms", "millisecond": "ms", "milliseconds": "ms", "%": "%",
    "usd": "usd", "$": "usd", "dollars": "usd", "dollar": "usd", "us$": "usd",
    "eur": "eur", "€": "eur", "euro": "eur", "euros": "eur", "gbp": "gbp", "£": "gbp",
    "pounds": "gbp", "jpy": "jpy", "¥": "jpy", "yen": "jpy",
}
_UNIT_AFTER = re.compile(r"\s*(" + "|".join(re.escape(u) for u in sorted(
    UNIT_KINDS, key=len, reverse=True)) + r")(?![^\W\d_])", re.IGNORECASE)


_SIGN_BEFORE = {"$": "usd", "€": "eur", "£": "gbp", "¥": "jpy", "₫": "vnd"}


@dataclass(frozen=True, slots=True)
class Amount:
    value: int | float
    unit: str | None
    start: int
    end: int
    alt: int | float | None = None  # the other reading of "1,480" (extract.Number.alt)


def find_amounts(text: str, lang: str) -> list[Amount]:
    out = []
    for n in extract_numbers(text, lang):
        m = _UNIT_AFTER.match(text, n.end)
        before = text[max(0, n.start - 1):n.start]
        unit = UNIT_KINDS[m.group(1).lower()] if m else _SIGN_BEFORE.get(before)
        out.append(Amount(n.value, unit, n.start, m.end() if m else n.end, n.alt))
    return out


def gold_amount(text: str, lang: str) -> Amount | None:
    """The gold as an amount: one number with a unit, nothing else ("45 triệu đồng",
    "22 million VND", "6gb")."""
    amounts = find_amounts(text, lang)
    if len(amounts) != 1 or amounts[0].unit is None:
        return None
    rest = (text[:amounts[0].start] + text[amounts[0].end:]).strip(" $")
    return amounts[0] if not rest else None


def whole(text: str, start: int, end: int) -> bool:
    """The span is all the text holds, but for spaces and punctuation."""
    return not re.search(r"[^\W_]", text[:start] + text[end:])
