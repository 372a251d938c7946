"""Reading answers out of replies: numbers, don't-know phrases, number words, language.

Numbers. Every number written with digits is found; the answer is the last.
A number inside a word ("s1", "H2O", "v1.2") is not a number; a unit right
after one ("5kg") does not hide it. Separators:

- "7,006,652" and "7.006.652" (Vietnamese thousands): a separator that repeats,
  with groups of exactly three digits after a first group of one to three, is a
  thousands separator;
- "7,006,652.5" / "7.006.652,5": with both kinds present, the last one is the
  decimal mark and the other the thousands separator;
- "7 006 652" (space, no-break space, thin space): groups of three joined;
- a single separator followed by anything but exactly three digits is a decimal
  mark, whichever it is: "3.14", "-3,5" (Vietnamese decimal comma), "7006652.0";
- "1,234" / "1.234" (one separator, three digits after, one to three before,
  no leading zero) is ambiguous: the question's language decides. In Vietnamese
  "." groups thousands and "," is the decimal mark; elsewhere the reverse. The
  other reading is kept as `alt` for the lenient variant.
- anything else ("1.2.3", "12.05.2023") is read as separate numbers.

Magnitudes and number words (magnitude.py): "186k", "2tr", "1,2 triệu", "3 nghìn",
"1.5M" and "2 triệu 500 nghìn" are read as the numbers they stand for, and so are
exact numbers spelled in words ("forty-two", "hai trăm chín mươi tư"); they raise
the number_words flag.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal

from evalpipe.scoring.answers.magnitude import (
    scale_after,
    scaled_value,
    spelled_fractions,
    spelled_numbers,
)
from evalpipe.scoring.answers.normalize import strip_diacritics, text_key

_SPACES = "\u0020\u00a0\u2009\u202f"
_NUMBER_RUN = re.compile(r"\d+(?:[.," + _SPACES + r"]\d+)*")
_EXPONENT = re.compile(r"[eE]([-+]?\d+)(?!\w)")
# Python refuses int() of longer digit strings; such a number is read as infinite
# (larger than any gold) rather than raising.
MAX_DIGITS = 4300
_MINUS = "-\u2212"
_SPACE_RE = re.compile("[" + _SPACES + "]")
_SEP_RE = re.compile(r"[.,]")
_DECIMAL_TAIL = re.compile(r"(\d{3})([.,]\d+)")
# A number read from a digit run: (value, the other reading or None, decimals shown)
Reading = tuple[int | float, int | float | None, int]


@dataclass(slots=True)
class Number:
    value: int | float
    alt: int | float | None  # the other reading of an ambiguous "1,234" / "1.234"
    decimals: int  # digits written after the decimal mark
    start: int  # offset of the match in the reply
    end: int
    scale: int = 1  # a magnitude written after it ("186k", "3 nghìn", "1.5M"): 1000, ...
    spelled: bool = False  # written in words ("forty-two", "hai trăm chín mươi tư")
    fraction: bool = False  # an exact fraction ("1/3", "2 1/3", "⅔", "one third"): not rounded
    percent: bool = False  # followed by "%", "percent", "phần trăm": also value / 100


def _to_value(integer: str, fraction: str, sign: str) -> tuple[int | float, int]:
    if len(integer) > MAX_DIGITS:
        value: int | float = math.inf
    elif not fraction:
        value = int(integer)
    else:
        value = float(f"{integer}.{fraction}")
    return (-value if sign else value), len(fraction)


def _scaled(value: float, exponent: str) -> Reading:
    """value x 10^exponent, read exactly: an int when integral and of bounded size,
    else the nearest float (inf or 0.0 beyond float range; never raises)."""
    if value == 0 or (isinstance(value, float) and not math.isfinite(value)):
        return value, None, 0
    if len(exponent.lstrip("+-")) > 6:  # beyond any float: infinite or zero
        return (0.0 if exponent.startswith("-") else math.copysign(math.inf, value)), None, 0
    scaled = Decimal(f"{value!r}E{exponent}")  # exact for ints of any length, too
    if scaled.adjusted() >= MAX_DIGITS:
        return float(scaled), None, 0
    if scaled == scaled.to_integral_value():
        return int(scaled), None, 0
    places = scaled.normalize().as_tuple().exponent  # an int: the value is finite
    return float(scaled), None, -places if isinstance(places, int) else 0


def _grouped(first: str, rest: list[str]) -> bool:
    """first + rest form a thousands grouping: 1-3 digits, then exactly 3 each."""
    return (1 <= len(first) <= 3 and (first[0] != "0" or first == "0")
            and all(len(g) == 3 for g in rest))


def _parse_piece(piece: str, sign: str, lang: str) -> list[Reading]:
    """One run of digits with "." and "," in it -> [(value, alt, decimals)]."""
    seps = _SEP_RE.findall(piece)
    if not seps:
        v, d = _to_value(piece, "", sign)
        return [(v, None, d)]
    groups = _SEP_RE.split(piece)
    kinds = set(seps)
    if len(kinds) == 2:
        decimal = seps[-1]
        if (all(s != decimal for s in seps[:-1]) and _grouped(groups[0], groups[1:-1])):
            v, d = _to_value("".join(groups[:-1]), groups[-1], sign)
            return [(v, None, d)]
    elif len(seps) >= 2:
        if _grouped(groups[0], groups[1:]):
            v, d = _to_value("".join(groups), "", sign)
            return [(v, None, d)]
    else:
        head, tail = groups
        sep = seps[0]
        if len(tail) == 3 and _grouped(head, []) and head != "0":
            thousands, _ = _to_value(head + tail, "", sign)
            decimal, d = _to_value(head, tail, sign)
            thousands_sep = "." if lang == "vi" else ","
            if sep == thousands_sep:
                return [(thousands, decimal, 0)]
            return [(decimal, thousands, d)]
        v, d = _to_value(head, tail, sign)
        return [(v, None, d)]
    # Not a number we can read as one: its digit groups are separate numbers.
    out: list[Reading] = []
    for i, g in enumerate(groups):
        v, d = _to_value(g, "", sign if i == 0 else "")
        out.append((v, None, d))
    return out


def _parse_run(run: str, sign: str, lang: str) -> list[Reading]:
    pieces = _SPACE_RE.split(run)
    if len(pieces) == 1:
        return _parse_piece(run, sign, lang)
    out = []
    i = 0
    while i < len(pieces):
        piece = pieces[i]
        s = sign if i == 0 else ""
        if piece.isdigit() and _grouped(piece, []):
            joined, j = piece, i + 1
            while j < len(pieces):
                nxt = pieces[j]
                if len(nxt) == 3 and nxt.isdigit():
                    joined += nxt
                    j += 1
                    continue
                if _DECIMAL_TAIL.fullmatch(nxt):
                    joined += nxt
                    j += 1
                break
            if j > i + 1:
                out.extend(_parse_piece(joined, s, lang))
                i = j
                continue
        out.extend(_parse_piece(piece, s, lang))
        i += 1
    return out


def _inside_word(ch: str) -> bool:
    return ch.isalnum() or ch in "_.,"


def extract_numbers(text: str, lang: str = "en", fractions: bool = False) -> list[Number]:
    """Every number written with digits in a reply, in order; with `fractions`, "1/3",
    "2 1/3", "⅔", "one third", "hai phần ba" and "two point five" are read as one number
    each (match.py asks for them where the gold is not a whole number: for a whole-number
    gold "5/6 requests" stays the count 5 of 6)."""
    if not text:
        return []
    numbers: list[Number] = []
    consumed = 0
    for m in _NUMBER_RUN.finditer(text):
        start, end = m.span()
        sign = ""
        if start:
            prev = text[start - 1]
            if _inside_word(prev):
                continue  # "s1", "H2O", "v1.2": part of a word
            if prev in _MINUS and (start == 1 or not (_inside_word(text[start - 2])
                                                      or text[start - 2] in _MINUS)):
                sign = "-"
                start -= 1
        if start < consumed:
            continue  # the digits of an exponent already read ("2.5E-3")
        run = m.group()
        if run.isdigit() and len(run) <= MAX_DIGITS:  # the common case: no separator
            parsed: list[Reading] = [(-int(run) if sign else int(run), None, 0)]
        else:
            parsed = _parse_run(run, sign, lang)
        exponent = _EXPONENT.match(text, end) if end < len(text) else None
        if exponent is not None and len(parsed) == 1:
            parsed = [(*_scaled(parsed[0][0], exponent.group(1)),)]
            end = consumed = exponent.end()
        if len(parsed) == 1 and (scale := scale_after(text, end)) is not None:
            first = parsed[0][0]
            finite = isinstance(first, int) or math.isfinite(first)
            value = scaled_value(first, scale) if finite else first
            alt = parsed[0][1]
            parsed = [(value, None if alt is None else scaled_value(alt, scale),
                       0 if isinstance(value, int) else parsed[0][2])]
            end = consumed = scale.end
            numbers.append(Number(*parsed[0], start, end, scale.factor))
            continue
        for value, alt, decimals in parsed:
            numbers.append(Number(value, alt, decimals, start, end))
    numbers = _joined_magnitudes(text, numbers)
    if fractions:
        numbers = _fractions(text, numbers)
    spelled = [Number(w.value, None, 0, w.start, w.end, spelled=True)
               for w in spelled_numbers(text) if not any(n.start < w.end and w.start < n.end
                                                         for n in numbers)]
    if fractions:
        words = spelled_fractions(text)
        if words:
            numbers = [n for n in numbers if not any(n.start < w.end and w.start < n.end
                                                     for w in words)]
            spelled = [n for n in spelled if not any(n.start < w.end and w.start < n.end
                                                     for w in words)]
            spelled += [Number(w.value, None, 0, w.start, w.end, spelled=True, fraction=True)
                        for w in words]
    if spelled:
        numbers = sorted(numbers + spelled, key=lambda n: n.start)
    for n in numbers:
        if _PERCENT.match(text, n.end):
            n.percent = True
    return numbers


_PERCENT = re.compile(r"[ \u00a0]*(?:%|percent\b|per cent\b|phần trăm\b)", re.IGNORECASE)
_SLASH = frozenset("/\u2044")  # "1/3", "1⁄3"
_VULGAR = {"½": (1, 2), "⅓": (1, 3), "⅔": (2, 3), "¼": (1, 4), "¾": (3, 4), "⅕": (1, 5),
           "⅖": (2, 5), "⅗": (3, 5), "⅘": (4, 5), "⅙": (1, 6), "⅚": (5, 6), "⅛": (1, 8),
           "⅜": (3, 8), "⅝": (5, 8), "⅞": (7, 8)}
_VULGAR_RE = re.compile("[" + "".join(_VULGAR) + "]")
_SPACED_PAIR = re.compile(r"-?\d+[ \u00a0]\d+")
_MIXED_GAP = re.compile(r"[ \u00a0]+(?:(?:and|và)[ \u00a0]+)?")
_DATE_BEFORE = re.compile(r"(?:ngày|tháng|date|on|since|until|từ|đến)\s*$|\d[/.-]$",
                          re.IGNORECASE)


def _whole(n: Number) -> bool:
    return (isinstance(n.value, int) and n.scale == 1 and not n.spelled and not n.fraction
            and n.alt is None)


def _fraction_number(whole: Number | None, top: float, bottom: float, start: int,
                     end: int) -> Number:
    value = top / bottom
    if whole is not None:
        value = whole.value + math.copysign(value, whole.value)
        start = whole.start
    exact: int | float = int(value) if value.is_integer() else value
    return Number(exact, None, 0, start, end, fraction=True)


def _fractions(text: str, numbers: list[Number]) -> list[Number]:
    """Digit fractions as one number: "1/3", "2 1/3" and "2 and 1/3" (a proper fraction
    after a whole number), "⅔", "2⅓". Not dates ("3/4/2024", "ngày 3/4"), not "24/7"."""
    out: list[Number] = []
    i = 0
    while i < len(numbers):
        n = numbers[i]
        nxt = numbers[i + 1] if i + 1 < len(numbers) else None
        if (nxt is not None and _whole(n) and _whole(nxt) and nxt.value > 0
                and text[n.end:nxt.start] in _SLASH
                and not _DATE_BEFORE.search(text, max(0, n.start - 8), n.start)
                and not (nxt.end < len(text) and text[nxt.end] in _SLASH)
                and (n.value, nxt.value) != (24, 7)):
            before = out[-1] if out and _whole(out[-1]) and 0 <= n.value < nxt.value else None
            whole = before if before is not None and (
                _MIXED_GAP.fullmatch(text[before.end:n.start])
                or ((before.start, before.end) == (n.start, n.end)  # one run: "2 1"/3
                    and _SPACED_PAIR.fullmatch(text[n.start:n.end]))) else None
            if whole is not None:
                out.pop()
            out.append(_fraction_number(whole, n.value, nxt.value, n.start, nxt.end))
            i += 2
            continue
        out.append(n)
        i += 1
    for m in _VULGAR_RE.finditer(text):
        top, bottom = _VULGAR[m.group()]
        whole = next((n for n in out if n.end == m.start() and _whole(n)), None)
        if whole is not None:
            out.remove(whole)
        out.append(_fraction_number(whole, top, bottom, m.start(), m.end()))
    return sorted(out, key=lambda n: n.start)


_JOIN = re.compile(r"(?:[ \u00a0]+(?:and|và|lẻ|linh)?)?[ \u00a0]*$")


def _joined_magnitudes(text: str, numbers: list[Number]) -> list[Number]:
    """ "2 triệu 500 nghìn", "1 million 200 thousand": one number, the sum of its parts
    (each with a smaller magnitude than the one before)."""
    out: list[Number] = []
    for n in numbers:
        last = out[-1] if out else None
        if (last is not None and last.scale > n.scale > 1 and isinstance(last.value, int)
                and isinstance(n.value, int) and _JOIN.match(text[last.end:n.start])):
            out[-1] = Number(last.value + n.value, None, 0, last.start, n.end, n.scale)
        elif (last is not None and last.scale > 1 and n.scale == 1 and isinstance(n.value, int)
              and isinstance(last.value, int) and n.value >= 0
              and _SPOKEN_SCALE.search(text, last.start, last.end)
              and re.fullmatch(r"[ \u00a0]+", text[last.end:n.start])
              and re.fullmatch(r"\d{1,3}", text[n.start:n.end])
              and _SPOKEN_END.match(text, n.end)):
            # "6 triệu 9", "2 tỷ 35": the digits after the magnitude word fill its next places
            places = 10 ** (n.end - n.start)
            out[-1] = Number(last.value + n.value * last.scale // places, None, 0, last.start,
                             n.end, last.scale)
        else:
            out.append(n)
    return out


# A Vietnamese magnitude word that spoken amounts continue with digits ("6 triệu 9"), and
# what may follow those digits: the end, punctuation or a currency.
_SPOKEN_SCALE = re.compile(r"(?:triệu|tỷ|tỉ|nghìn|ngàn)$", re.IGNORECASE)
_SPOKEN_END = re.compile(r"[ \u00a0]*(?:$|[.,;:!?)\n]|(?:đồng|đ|vnd|vnđ|usd)(?![^\W\d_]))",
                         re.IGNORECASE)


def last_number(text: str, lang: str = "en") -> Number | None:
    numbers = extract_numbers(text, lang)
    return numbers[-1] if numbers else None


# --- don't-know phrases ------------------------------------------------------------------

ABSTAIN_PHRASES_EN = (
    "i don't know", "i do not know", "don't know", "do not know", "dont know", "i'm not sure",
    "i am not sure", "not sure", "no idea", "cannot find", "can't find", "could not find",
    "couldn't find", "unable to find", "unable to determine", "cannot determine",
    "can't determine", "could not determine", "cannot answer", "can't answer", "unable to answer",
    "not in the provided", "not in the passages", "not in the context", "not mentioned",
    "not provided", "not stated", "not specified", "no information", "not enough information",
    "insufficient information", "does not contain", "doesn't contain", "do not contain",
    "don't contain", "does not mention", "doesn't mention", "no mention", "not available",
    "unknown", "cannot be determined", "can't be determined", "i cannot say", "i can't say",
    # how "the passages do not say" is worded in real replies
    "say nothing", "says nothing", "said nothing", "don't say", "do not say", "doesn't say",
    "does not say", "did not say", "don't mention", "do not mention", "not given",
    "not included", "not covered", "no record", "no details", "no data",
    # idioms of not knowing
    "no clue", "drawing a blank", "draw a blank", "drew a blank", "beats me", "search me",
    "your guess is as good as mine",
)
ABSTAIN_PHRASES_VI = (
    "không biết", "không rõ", "chưa rõ", "không chắc", "không có thông tin", "chưa có thông tin",
    "không tìm thấy", "không thể tìm thấy", "không thấy thông tin", "không đủ thông tin",
    "không có dữ liệu", "không thể trả lời", "không trả lời được", "không thể xác định",
    "không xác định được", "không được đề cập", "không đề cập", "chưa được đề cập",
    "không nêu", "không được nêu", "không có trong", "xin lỗi tôi không",
    "không nói", "không nhắc", "không được nhắc", "chưa nhắc", "không ghi", "không có số liệu",
    "tôi chịu", "mình chịu", "em chịu", "xin chịu", "chịu thôi", "bó tay",
)


def _phrase_regex(keys) -> re.Pattern[str]:
    keys = sorted(set(keys), key=len, reverse=True)
    return re.compile(r"(?:^| )(" + "|".join(re.escape(k) for k in keys) + r")(?: |$)")


_ABSTAIN_BY_KEY = {text_key(p): p for p in ABSTAIN_PHRASES_EN + ABSTAIN_PHRASES_VI}
_ABSTAIN_BY_LOOSE = {strip_diacritics(k): p for k, p in _ABSTAIN_BY_KEY.items()}
_ABSTAIN = _phrase_regex(_ABSTAIN_BY_KEY)
_ABSTAIN_LOOSE = _phrase_regex(_ABSTAIN_BY_LOOSE)


def abstain_phrase(reply_key: str) -> str | None:
    """The don't-know phrase found in a normalised reply (see text_key), if any."""
    m = _ABSTAIN.search(reply_key)
    return _ABSTAIN_BY_KEY[m.group(1)] if m else None


def abstain_phrase_loose(reply_loose_key: str) -> str | None:
    """The same on a reply without diacritics ("khong biet"); for the lenient variant."""
    m = _ABSTAIN_LOOSE.search(reply_loose_key)
    return _ABSTAIN_BY_LOOSE[m.group(1)] if m else None


# --- language ----------------------------------------------------------------------------

# Letters that occur in Vietnamese and not in ordinary English (or French) text.
_VI_LETTERS = "ăđơưạảấầẩẫậắằẳẵặẹẻẽếềểễệỉịọỏốồổỗộớờởỡợụủứừửữựỳỵỷỹĩũõã"
_VI_LETTER = re.compile("[" + _VI_LETTERS + "]")
_VI_WORDS = frozenset(text_key(w) for w in
    ["là", "của", "và", "có", "không", "được", "các", "những", "trong", "cho", "này", "với",
     "một", "người", "tôi", "bạn", "kết", "quả", "bằng", "đó", "thì", "từ", "theo", "về",
     "khi", "đã", "sẽ", "cũng", "như", "nên", "vì", "đây", "số"])
_EN_WORDS = frozenset(
    ["the", "is", "are", "was", "were", "of", "and", "to", "in", "it", "this", "that", "a",
     "an", "answer", "result", "i", "you", "for", "with", "not", "be", "equals", "which",
     "there", "from", "by", "on", "as", "at", "so", "its", "what", "sorry", "know"])
_LETTER = re.compile(r"[^\W\d_]")


def detect_language(reply: str, reply_key: str) -> str | None:
    """'vi', 'en', or None when the reply has no words to tell (a bare number, a name)."""
    if not _LETTER.search(reply):
        return None
    words = reply_key.split()
    vi = sum(1 for w in words if w in _VI_WORDS or (not w.isascii() and _VI_LETTER.search(w)))
    en = sum(1 for w in words if w in _EN_WORDS)
    if vi > en:
        return "vi"
    if en > vi:
        return "en"
    return None
