"""Abstention by meaning: does the reply say the sources or the model lack the answer?

A phrase list misses abstentions worded otherwise ("None of the passages I found
mention it", "Tài liệu không cung cấp giá") and takes hedges that do answer for
abstentions ("Không rõ, khoảng 200 nghìn"; "unknown to many, but it is Canberra").
These rules read the reply clause by clause (punctuation and "but" / "nhưng" end a
clause) and give each clause one role:

- lack: it says the information is missing: a don't-know phrase (extract.py), or a
  negation shortly before a verb or noun of saying, containing or knowing ("do not
  mention", "không cung cấp", "no information", "chưa có số liệu"), or "only" with such
  a verb ("The passages only give latencies for the Go API");
- answer: it states a value: a number the question does not state, a guess marker
  with something after it ("maybe Canberra", "có lẽ là ngày 12"), or a copula or cue
  with content after it that is not negated ("it is Canberra", "đáp án là 42");
- anything else says neither.

The reply abstains when it has a lack clause and no answer clause after its last lack
clause: a reply that states an answer after its hedge answers, whatever the hedge; an
answer followed by "but the passages do not say" is withdrawn. A doubt about one's own
answer ("not sure", "không chắc") abstains only when no answer is stated at all: "It is
42, but I am not sure" answers. Questions in the reply
("What is the password?") and offers ("You could ask the admin") state nothing.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from evalpipe.scoring.answers.extract import abstain_phrase, extract_numbers
from evalpipe.scoring.answers.normalize import text_key

# A clause ends at sentence punctuation, a comma or semicolon, a line break, a dash,
# or a contrast word.
_SPLIT = re.compile(
    r"[.;:!?,]+(?:\s|$)|\n|\s[-–—]\s|\s(?=(?:but|however|though|although|nhưng|tuy nhiên|"
    r"song)\s)", re.IGNORECASE)
_NEGATION = frozenset(text_key(w) for w in [
    "not", "no", "none", "never", "nothing", "nowhere", "neither", "nor", "without", "cannot", "t",
    "không", "chưa", "chẳng", "chả"])
# Verbs and nouns of saying, containing or knowing; Vietnamese ones as whole phrases
# (a single syllable such as "số" or "cho" says nothing by itself).
_INFO = tuple(tuple(text_key(p).split()) for p in [
    "say", "says", "said", "saying", "mention", "mentions", "mentioned", "mentioning", "provide",
    "provides", "provided", "contain", "contains", "contained", "include", "includes", "included",
    "give", "gives", "given", "specify", "specifies", "specified", "state", "states", "stated",
    "cover", "covers", "covered", "list", "lists", "listed", "tell", "tells", "told", "show",
    "shows", "shown", "report", "reports", "reported", "discuss", "discusses", "discussed",
    "indicate", "indicates", "detail", "details", "describe", "describes", "described", "know",
    "knew", "known", "find", "found", "finding", "answer", "determine", "determined", "information",
    "info", "data", "record", "records", "figure", "figures", "available", "public", "disclosed",
    "disclose", "reveal", "revealed"]) + tuple(
    tuple(text_key(p).split()) for p in (
        "nói", "đề cập", "nhắc", "cung cấp", "chứa", "nêu", "ghi", "biết", "tìm thấy", "rõ",
        "xác định", "chắc", "trả lời", "liệt kê", "công bố", "thông tin", "dữ liệu",
        "số liệu", "cho biết", "đưa ra"))
_SOURCES = frozenset(text_key(w) for w in [
    "text", "passage", "passages", "document", "documents", "context", "article", "post", "posts",
    "source", "sources", "blog", "tài", "liệu", "đoạn", "văn", "bản", "bài", "viết", "nguồn"])
_ONLY = frozenset({"only", "chỉ"})
NEGATION_SPAN = 6  # words from a negation to the verb or noun it negates
_GUESS = tuple(text_key(w) for w in (
    "probably", "maybe", "perhaps", "likely", "i think", "i guess", "i believe", "my guess",
    "có lẽ", "có thể là", "chắc là", "hình như", "khả năng là", "tôi nghĩ", "đoán là"))
# Doubt about one's own answer: an abstention only when no answer is stated anywhere.
_HEDGES = tuple(text_key(w) for w in (
    "not sure", "not certain", "uncertain", "might be wrong", "may be wrong", "không chắc",
    "chưa chắc", "không dám chắc", "không rõ lắm"))
_COPULA = re.compile(
    r"(?:^|\s)(?:is|are|was|were|equals|'s|là|bằng|khoảng|chính là)\s+(?P<rest>\S.*)$|"
    r"(?:^|\s)(?:answer|đáp án|kết quả|đáp số)\s*(?:is|là|:)?\s+(?P<rest2>\S.*)$",
    re.IGNORECASE)
_META = frozenset(text_key(w) for w in [
    "question", "sorry", "unfortunately", "câu", "hỏi", "xin", "lỗi", "tiếc"])
_OFFER = re.compile(r"^\s*(?:you (?:can|could|may|might|should)|please|bạn (?:có thể|nên)|"
                    r"hãy|vui lòng|let me|i can|i will|tôi sẽ|tôi có thể)\b", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Abstention:
    abstained: bool
    evidence: str | None  # the lack clause that decided, or the answer clause that overrode
    rule: str  # lack | hedge | answer_after_lack | answer_with_hedge | no_lack


def _lack(key: str, has_number: bool = False) -> bool:
    """The clause says the information is missing. "only" with a verb of saying counts
    when the clause gives no number ("only give latencies for the Go API", not "was only
    reported to 19 salons")."""
    if abstain_phrase(key) is not None:
        return True
    words = key.split()
    for phrase in _INFO:
        n = len(phrase)
        for i in range(len(words) - n + 1):
            if tuple(words[i:i + n]) == phrase:
                window = set(words[max(0, i - NEGATION_SPAN):i])
                if window & _NEGATION or (not has_number and window & _ONLY):
                    return True
    return False


def _has_info(words: list[str]) -> bool:
    return any(tuple(words[i:i + len(p)]) == p for p in _INFO for i in range(len(words)))


_JOINED = re.compile(r"(?<=[^\W\d_])-(?=[^\W\d_])")  # "no-show" is one word, not "no show"


def _short_answer(key: str) -> bool:
    """A bare phrase of a few words ("Caddy or nginx", "42 requests") states an answer."""
    words = key.split()
    return 0 < len(words) <= 5 and not (set(words) & (_NEGATION | _META))


def _answer(clause: str, key: str, echoes: frozenset) -> bool:
    if clause.rstrip().endswith("?") or _OFFER.match(clause):
        return False
    words = key.split()
    if any(n.value not in echoes for n in extract_numbers(clause)):
        return True
    padded = f" {key} "
    for g in _GUESS:
        at = padded.find(f" {g} ")
        if at >= 0 and padded[at + len(g) + 2:].strip():
            return True
    m = _COPULA.search(clause)
    if m is None:
        return False
    rest = text_key(m.group("rest") or m.group("rest2") or "").split()
    if set(text_key(clause[:m.start()]).split()) & _SOURCES:
        return False  # about the sources ("the text is about Tổ Ong Lab"), not an answer
    return bool(rest) and not (set(rest[:2]) & _NEGATION) and not (set(words) & _META) \
        and not (_has_info(rest) and set(words) & _NEGATION)


def abstention(reply: str, echoes: frozenset = frozenset()) -> Abstention:
    """Whether the reply abstains, by the clause rules of this module; `echoes` are the
    numbers the question states (restating them answers nothing)."""
    if _machine_output(reply):
        # A JSON object or list (a tool's error or result passed on as the answer) says
        # nothing of what the sources hold: '{"error": "unknown tool ..."}' is no "unknown".
        return Abstention(False, None, "machine_output")
    last_lack = None
    roles: list[tuple[str, str]] = []
    for index, piece in enumerate(_SPLIT.split(reply or "")):
        key = text_key(_JOINED.sub("", piece))
        if not key:
            continue
        has_number = any(n.value not in echoes for n in extract_numbers(piece))
        # a lack clause can still carry an answer after a guess ("không rõ khoảng 200")
        if any(f" {h} " in f" {key} " for h in _HEDGES) and not _lack_beyond_hedge(key):
            roles.append(("hedge", piece))
            if _answer(piece, key, echoes) and _guess_after_lack(key):
                roles.append(("answer", piece))
        elif _lack(key, has_number):
            roles.append(("lack", piece))
            last_lack = len(roles) - 1
            if _answer(piece, key, echoes) and _guess_after_lack(key):
                roles.append(("answer", piece))
        elif _answer(piece, key, echoes) or (index == 0 and _short_answer(key)
                                             and not piece.rstrip().endswith("?")
                                             and not _OFFER.match(piece)):
            roles.append(("answer", piece))
    if last_lack is None:
        hedges = [p for role, p in roles if role == "hedge"]
        if hedges and not any(role == "answer" for role, _ in roles):
            return Abstention(True, hedges[0].strip(), "hedge")
        return Abstention(False, None, "no_lack" if not hedges else "answer_with_hedge")
    after = [p for role, p in roles[last_lack + 1:] if role == "answer"]
    if after:
        return Abstention(False, after[0].strip(), "answer_after_lack")
    return Abstention(True, roles[last_lack][1].strip(), "lack")


def _machine_output(reply: str | None) -> bool:
    """Whether the whole reply is one JSON object or list (fenced or not)."""
    text = (reply or "").strip().removeprefix("```json").removeprefix("```").removesuffix("```")
    text = text.strip()
    if not text.startswith(("{", "[")):
        return False
    try:
        return isinstance(json.loads(text), dict | list)
    except (ValueError, RecursionError):
        return False


def _lack_beyond_hedge(key: str) -> bool:
    """The clause says more than a doubt: "I'm not sure the passages mention it" lacks."""
    for h in _HEDGES:
        key = f" {key} ".replace(f" {h} ", " ").strip()
    return _lack(key)


def _guess_after_lack(key: str) -> bool:
    phrase = abstain_phrase(key)
    padded = f" {key} "
    start = padded.find(f" {text_key(phrase)} ") + len(text_key(phrase)) + 1 if phrase else 0
    rest = padded[start:]
    return any(f" {g} " in rest for g in _GUESS)
