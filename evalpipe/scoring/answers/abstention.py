"""Abstention by meaning: does the reply say the sources or the model lack the answer?

A phrase list misses abstentions worded otherwise ("There is nothing on parking in these
notes", "Tài liệu không cung cấp giá", "HiveBook has no voice assistant", "the 2025
list is not out yet") and takes hedges that do answer for abstentions ("Không rõ,
khoảng 200 nghìn"; "unknown to many, but it is Canberra"). These rules read the reply
clause by clause (punctuation and "but" / "nhưng" end a clause) and give each clause
one role:

- lack, of one of three kinds:
  - *missing*: the information is not there or not known: a don't-know phrase
    (extract.py); a negation shortly before a verb or noun of saying, containing,
    finding or knowing ("do not mention", "couldn't locate", "không cung cấp", "no
    information", "chưa có số liệu"); a source that is negated or silent ("the notes
    don't ...", "tài liệu không ...", "the passages are silent on it", "the context
    lacks it"); nothing on a topic ("nothing about parking", "không có gì về"); outside
    the sources' scope ("beyond the provided documents", "nằm ngoài phạm vi"); "only"
    with a verb of saying and no number ("The passages only give latencies for Go");
  - *not yet*: what is asked has not happened or is not decided ("not yet", "still
    open", "is scheduled for", "chưa", "vẫn đang", "dự kiến");
  - *premise*: the reply negates something the question takes for granted ("HiveBook
    doesn't run Kubernetes at all", "Tổ Ong Lab không có văn phòng ở Hà Nội"): a
    negation right before a content word of the question (`premise_words`);
- answer: it states a value: a number the question does not state, a guess marker
  with something after it ("maybe Canberra", "có lẽ là ngày 12"), or a copula or cue
  with content after it that is not negated ("it is Canberra", "đáp án là 42");
- hedge: a doubt about one's own answer ("not sure", "không chắc");
- anything else says neither.

The reply abstains when it has a lack clause and no answer clause after its last lack
clause, with two exceptions that keep it abstaining: after a premise or not-yet clause,
what follows describes what is the case instead ("it uses Docker Compose on two VMs";
"vẫn đang nhận hồ sơ"), and only a guess overrides it; after a clause that lacks what
was asked by name ("I don't have the yearly total"), a value marked as a part ("March
alone was 940", "riêng tháng 3 là 940") is another fact, not the answer. A reply that
states an answer after a hedge answers, whatever the hedge; an answer followed by "but
the passages do not say" is withdrawn. A doubt alone ("It is 42, but I am not sure")
answers; doubt with no answer abstains. Questions in the reply ("What is the
password?") and offers ("You could ask the admin") state nothing.

Where the rules see neither a lack nor an answer (free wording: "Sadly the notes stop
short of that"), a small learned model may decide (abstention_model.py): `abstention`
reports such replies as `rule="unsure"` and match.py asks the model.
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


def _keys(words: list[str]) -> frozenset[str]:
    return frozenset(text_key(w) for w in words)


def _phrases(words: list[str]) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(text_key(p).split()) for p in words)


_NEGATION = _keys([
    "not", "no", "none", "never", "nothing", "nowhere", "neither", "nor", "without", "cannot",
    "t", "unable", "impossible", "nobody", "không", "chưa", "chẳng", "chả", "đâu có"])
# Verbs and nouns of saying, containing, finding or knowing; Vietnamese ones as whole
# phrases (a single syllable such as "số" or "cho" says nothing by itself).
_INFO = _phrases([
    "say", "says", "said", "saying", "mention", "mentions", "mentioned", "mentioning", "provide",
    "provides", "provided", "contain", "contains", "contained", "include", "includes", "included",
    "give", "gives", "given", "specify", "specifies", "specified", "state", "states", "stated",
    "cover", "covers", "covered", "list", "lists", "listed", "tell", "tells", "told", "show",
    "shows", "shown", "report", "reports", "reported", "discuss", "discusses", "discussed",
    "indicate", "indicates", "detail", "details", "describe", "describes", "described", "know",
    "knew", "known", "find", "found", "finding", "answer", "determine", "determined", "information",
    "info", "data", "record", "records", "figure", "figures", "available", "public", "disclosed",
    "disclose", "reveal", "revealed", "locate", "located", "spot", "spotted", "see", "seen",
    "saw", "refer", "refers", "reference", "references", "address", "addresses", "addressed",
    "touch on", "touches on", "go into", "goes into", "talk about", "talks about", "documented",
    "recorded", "written", "access", "anything", "mention of", "word on", "trace", "sign",
    "indication", "help", "assist", "confirm", "confirmed", "verify", "verified", "sure which",
    "answered", "answerable", "appear", "appears", "appeared", "write", "wrote", "noted",
    "guess", "guessing", "speculate", "xuất hiện", "viết", "đoán", "phỏng đoán",
    "nói", "đề cập", "nhắc", "cung cấp", "chứa", "nêu", "ghi", "biết", "tìm thấy", "tìm được",
    "tìm ra", "rõ", "xác định", "chắc", "trả lời", "liệt kê", "công bố", "thông tin", "dữ liệu",
    "số liệu", "cho biết", "đưa ra", "thấy", "tra được", "dữ kiện", "ghi nhận", "ghi lại",
    "nhắc tới", "nhắc đến", "đề cập tới", "đề cập đến", "nói tới", "nói đến", "nói gì", "có gì",
    "giúp", "xác nhận", "căn cứ"])
_SOURCES = _keys([
    "text", "texts", "passage", "passages", "document", "documents", "doc", "docs", "context",
    "article", "articles", "post", "posts", "source", "sources", "blog", "notes", "note", "page",
    "pages", "handbook", "wiki", "records", "materials", "material", "excerpt", "excerpts",
    "files", "file", "results", "snippets", "snippet", "documentation", "chunks", "chunk",
    "tài", "liệu", "đoạn", "văn", "bản", "bài", "viết", "nguồn", "trang", "ghi", "chú", "ngữ",
    "cảnh", "trích"])
_AUX = _keys([
    "do", "does", "did", "don", "doesn", "didn", "is", "are", "was", "were", "isn", "aren",
    "wasn", "weren", "have", "has", "had", "haven", "hasn", "hadn", "can", "could", "couldn",
    "will", "would", "won", "wouldn", "seem", "seems", "appear", "appears", "i", "we", "here",
    "provided", "given", "available", "shared", "retrieved", "above", "you", "really",
    "actually", "đều", "cũng", "hoàn", "toàn", "hề", "được"])
# A source or a piece of information that is silent, lacking or missing.
_ABSENT = _keys([
    "silent", "lacks", "lack", "lacking", "missing", "absent", "unavailable", "undocumented",
    "unmentioned", "unlisted", "unreported", "unrecorded", "unspecified", "undisclosed",
    "unstated", "unanswered", "mum", "quiet", "thiếu", "vắng", "lặng"])
# Nothing at a source: "no ong-mat-7 in the docs", "isn't in the documents".
_NOT_IN_SOURCE = re.compile(
    r"(?:^| )(?:no|not|nothing|none|never|t|không|chưa|chẳng)(?: \w+){0,6} (?:in|from|within|"
    r"across|among|inside|anywhere in|trong|ở|tại) (?:(?:the|these|those|any|my|your|this|"
    r"that|our|all|các|những|mọi|bất kỳ)\s)?(?:\w+ )?(?:" + "|".join(sorted(_SOURCES, key=len,
                                                                           reverse=True))
    + r")(?: |$)")
# "... are not among them", "none of it is in there": nothing in the sources named before.
_NOT_AMONG = re.compile(r"(?:^| )(?:no|not|nothing|none|never|t)(?: \w+){0,3} (?:among|in|"
                        r"inside|part of|included in|within) (?:them|these|those|there)(?: |$)")
# A search that found nothing; the first person without the information.
_EMPTY = re.compile(r"(?:^| )(?:came up empty|come up empty|turned up nothing|turned up empty|"
                    r"returned nothing|returns nothing|came back empty|drew a blank|"
                    r"i (?:do not|don t|didn t|did not) have|i have no|i ve got no|"
                    r"i haven t got|we (?:do not|don t) have|we have no|tôi không có|"
                    r"mình không có|tôi chưa có|em không có)(?: |$)")
_INFO_NOUNS = _keys(["information", "info", "data", "figure", "figures", "number", "detail",
                     "details", "answer", "value", "thông", "tin", "dữ", "liệu", "số"])
_TOPIC = re.compile(r"(?:^| )(?:nothing|no|none|not anything|không có gì|chẳng có gì|không có)"
                    r" (?:\w+ )?(?:about|on|regarding|concerning|related|relating|re|về|liên quan)"
                    r"(?: |$)")
_SCOPE = re.compile(r"(?:^| )(?:beyond|outside|out of|vượt quá|vượt ngoài|ngoài)(?: \w+){0,4} "
                    r"(?:scope|context|provided|given|information|phạm vi|"
                    + "|".join(sorted(_SOURCES, key=len, reverse=True)) + r")(?: |$)"
                    r"|(?:^| )nằm ngoài(?: |$)")
# A source that leaves the thing out: "the notes skip Wi-Fi", "tài liệu bỏ qua".
_OMIT = re.compile(r"(?:^| )(?:skip|skips|skipped|omit|omits|omitted|leave out|leaves out|"
                   r"left out|leave (?:it|that|this) out|leaves (?:it|that|this) out|exclude|"
                   r"excludes|bỏ qua|bỏ sót|bỏ ngỏ)(?: |$)")
# What is asked has not happened or is not decided yet.
_NOT_YET = re.compile(
    r"(?:^| )(?:not yet|yet to|still (?:open|ongoing|in progress|pending|under way|underway|"
    r"accepting|being|planned|scheduled|running|under review|in review|collecting|to be|in the "
    r"works|in planning|upcoming|waiting)|(?:is|are|was|were|s|re) (?:scheduled|planned|slated)"
    r" (?:for|to)|will (?:be )?(?:announced|published|decided|held|released|"
    r"finalised|finalized|confirmed|chosen|selected)|will (?:take place|happen)|upcoming|tbd|"
    r"tba|to be (?:announced|determined|decided|confirmed)|(?:hasn|haven|hadn) t (?:happened|"
    r"taken place)|(?:has|have|had) not (?:happened|taken place)|"
    r"(?:t|not|never|no)(?: \w+){0,5} yet|"
    r"chưa|vẫn đang|vẫn còn đang|còn đang|đang (?:diễn ra|tiến hành|xét|nhận|chờ|lên kế hoạch|"
    r"trong quá trình|được xét|mở)|sắp (?:tới|diễn ra)|dự kiến|sẽ (?:được )?(?:công bố|tổ chức|"
    r"diễn ra|quyết định|thông báo|cập nhật|chọn|chốt))(?: |$)")
_ONLY = _keys(["only", "chỉ"])
_ARTICLES = _keys(["a", "an", "the", "any", "such", "có", "một", "cái", "con", "bất", "kỳ"])
# A value marked as a part of what was asked: "March alone", "riêng tháng 3".
_PARTIAL = re.compile(r"(?:^| )(?:alone|only|just|solely|merely|at least|so far|by itself|"
                      r"riêng|chỉ riêng|tính riêng|chỉ|mới|ít nhất|một mình)(?: |$)")
# A lack that names what was asked as a whole ("the yearly total", "tổng cả năm").
_WHOLE = _keys(["total", "totals", "yearly", "annual", "overall", "whole", "full", "complete",
                "entire", "sum", "cumulative", "combined", "tổng", "cả", "toàn", "trọn"])
# Words of ability between a negation and the verb it rejects: "is not able to copy",
# "has no way to", "không thể chép", "không có khả năng đo".
_ABLE = _keys(["able", "capable", "possible", "way", "thể", "khả", "năng"])
NEGATION_SPAN = 6  # words from a negation to the verb or noun it negates
PREMISE_SPAN = 3  # words from a negation to the question's word it rejects
_GUESS = tuple(text_key(w) for w in (
    "probably", "maybe", "perhaps", "likely", "i think", "i guess", "i believe", "my guess",
    "có lẽ", "có thể là", "chắc là", "hình như", "khả năng là", "tôi nghĩ", "đoán là"))
# Doubt about one's own answer: an abstention only when no answer is stated anywhere.
_HEDGES = tuple(text_key(w) for w in (
    "not sure", "not certain", "uncertain", "unsure", "not positive", "might be wrong",
    "may be wrong", "hard to say",
    "difficult to say", "hard to tell", "can t say for sure", "không chắc", "chưa chắc",
    "không dám chắc", "không rõ lắm", "khó nói", "khó mà biết"))
_COPULA = re.compile(
    r"(?:^|\s)(?:is|are|was|were|equals|'s|là|bằng|khoảng|chính là)\s+(?P<rest>\S.*)$|"
    r"(?:^|\s)(?:answer|đáp án|kết quả|đáp số)\s*(?:is|là|:)?\s+(?P<rest2>\S.*)$",
    re.IGNORECASE)
_WHICH = _keys(["which", "what", "who", "whom", "nào", "gì", "ai", "đâu"])
_FILLER = _keys(["one", "it", "hãng", "cái", "người", "loại", "con", "số"])
_META = _keys(["question", "sorry", "unfortunately", "câu", "hỏi", "xin", "lỗi", "tiếc"])
_OFFER = re.compile(r"^\s*(?:you (?:can|could|may|might|should)|please|bạn (?:có thể|nên)|"
                    r"hãy|vui lòng|let me|i can|i will|tôi sẽ|tôi có thể)\b", re.IGNORECASE)

# Words of a question that say nothing a reply could reject as a premise: function words,
# what is asked for ("version", "price", "bao nhiêu") and the commonest verbs.
_NOT_PREMISE = _keys([
    "the", "a", "an", "of", "to", "in", "on", "at", "for", "and", "or", "is", "are", "was", "were",
    "be", "been", "it", "its", "this", "that", "what", "which", "who", "whom", "whose", "how",
    "many", "much", "does", "did", "do", "when", "where", "why", "with", "by", "from", "as",
    "now", "still", "than", "then", "there", "s", "has", "have", "had", "run", "runs", "use",
    "uses", "used", "using", "get", "got", "make", "made", "take", "took", "version", "number",
    "name", "value", "amount", "total", "price", "cost", "date", "time", "day", "year", "month",
    "week", "per", "each", "every", "all", "any", "current", "currently", "first", "last",
    "new", "old", "our", "your", "their", "his", "her", "whole", "exact", "exactly", "about",
    "là", "của", "và", "có", "không", "được", "các", "những", "trong", "cho", "này", "với", "một",
    "bao", "nhiêu", "nào", "gì", "mấy", "khi", "sau", "trước", "đã", "sẽ", "thì", "từ", "theo",
    "về", "đến", "bị", "hiện", "nay", "còn", "lên", "xuống", "ai", "đâu", "ở", "vào", "ngày",
    "tháng", "năm", "giá", "tên", "số", "lúc", "đang", "dùng", "chạy", "tổng", "mỗi", "hằng",
    "hàng", "bằng", "cái", "chiếc", "người", "some", "such", "even", "ever", "host", "hosts",
    "offer", "offers", "support", "supports", "own", "owns", "exist", "exists", "operate",
    "operates", "employ", "employs", "deploy", "deploys", "sử", "dụng", "hỗ", "triển",
    "khai", "từng", "hề", "sở", "hữu", "tồn", "tại", "long", "far", "old", "big", "large",
    "often", "soon", "late", "early", "lâu", "xa", "trên", "dưới", "qua", "via", "through",
    "under", "over", "into", "onto", "cụm", "con", "bộ", "loại", "kiểu", "hệ", "thống"])
_COUNTED = re.compile(r"\b(?:how many|how much|bao nhiêu|mấy)\s+(\w+)", re.IGNORECASE)


def premise_words(question: str) -> frozenset[str]:
    """The content words of a question a reply can reject as its premise ("kubernetes",
    "hivebook" in "Which Kubernetes version does HiveBook run?"): not function words, not
    what is asked for, and not the noun counted ("how many customers": "no customers" is
    the count 0, not a rejected premise)."""
    said = text_key(_JOINED.sub("", question)).split()  # as clauses are read: "wifi"
    words = set(said) - _NOT_PREMISE
    for m in _COUNTED.finditer(question):
        words.discard(text_key(m.group(1)))
    for i, w in enumerate(said):  # negated in the question itself ("typed without accents")
        if w in _NEGATION:
            words -= set(said[i + 1:i + 1 + PREMISE_SPAN])
    return frozenset(w for w in words if not w.isdigit())


@dataclass(frozen=True, slots=True)
class Abstention:
    abstained: bool
    evidence: str | None  # the lack clause that decided, or the answer clause that overrode
    # lack | not_yet | premise | hedge | answer_after_lack | answer_with_hedge | no_lack |
    # unsure (neither a lack nor an answer: the learned model may decide) | machine_output
    rule: str


_INFO_BY_FIRST: dict[str, list[tuple[str, ...]]] = {}
for _phrase in _INFO:
    _INFO_BY_FIRST.setdefault(_phrase[0], []).append(_phrase)


def _info_at(words: list[str]) -> list[tuple[int, tuple[str, ...]]]:
    """(position, phrase) of every verb or noun of saying in the words, in one pass."""
    found = []
    for i, w in enumerate(words):
        for phrase in _INFO_BY_FIRST.get(w, ()):
            if tuple(words[i:i + len(phrase)]) == phrase:
                found.append((i, phrase))
    return found


def _missing(key: str, words: list[str], has_number: bool,
             content: frozenset[str] = frozenset()) -> str | None:
    """The clause says the information is missing (the first kind of lack): "lack", or
    "only" when it says the sources give only something else ("only list the Go API").
    A word of the question is its topic, not a verb of saying ("giọng nói", voice)."""
    if abstain_phrase(key) is not None:
        return "lack"
    only = False
    for i, phrase in _info_at(words):
        if content and set(phrase) <= content:
            continue
        window = set(words[max(0, i - NEGATION_SPAN):i])
        if window & _NEGATION:
            return "lack"
        only |= not has_number and bool(window & _ONLY)
    if only:
        return "only"
    present = set(words)
    for i, w in enumerate(words):  # "the notes don't ...", "tài liệu không ..."
        if w in _SOURCES:
            after = [a for a in words[i + 1:i + 5] if a not in _SOURCES]
            while after and after[0] in _AUX:
                after.pop(0)
            if after and after[0] in _NEGATION:
                return "lack"
    if present & _ABSENT and present & (_SOURCES | _INFO_NOUNS):
        return "lack"
    if present & _SOURCES and _OMIT.search(key):
        return "lack"
    if (_TOPIC.search(key) or _SCOPE.search(key) or _NOT_IN_SOURCE.search(key)
            or _NOT_AMONG.search(key) or _EMPTY.search(key)):
        return "lack"
    for i, w in enumerate(words):  # "no total", "không có tổng", "chưa có con số"
        if w in _NEGATION:
            ahead = [a for a in words[i + 1:i + 5] if a not in _AUX and a not in _ARTICLES]
            if set(ahead[:2]) & (_WHOLE | _INFO_NOUNS):
                return "lack"
    return None


def _premise(words: list[str], content: frozenset[str]) -> bool:
    """A negation right before a content word of the question, with at most common verbs,
    articles and words of ability between ("doesn't run Kubernetes", "has no voice
    assistant", "không có văn phòng", "không thể chép"): the reply rejects what the
    question takes for granted."""
    for i, w in enumerate(words):
        if w in _NEGATION:
            ahead = [a for a in words[i + 1:i + 1 + PREMISE_SPAN + 3]
                     if a not in _AUX and a not in _ABLE]
            for a in ahead[:PREMISE_SPAN]:  # past "run", "a", "any": the word rejected
                if a in content or any(_same_stem(a, c) for c in content):
                    return True
                if a not in _NOT_PREMISE:
                    break
    return False


def _same_stem(a: str, b: str) -> bool:
    """Two forms of one word ("moved", "move"; "provisioned", "provisions")."""
    if min(len(a), len(b)) < 4 or a[:4] != b[:4]:
        return False
    common = 0
    for x, y in zip(a, b):
        if x != y:
            break
        common += 1
    return common >= max(4, min(len(a), len(b)) - 2)


def lack_kind(key: str, has_number: bool = False,
              content: frozenset[str] = frozenset()) -> str | None:
    """The kind of lack a clause (text_key form) states: "lack" or "only" (missing),
    "not_yet" or "premise"; None when it states none."""
    words = key.split()
    missing = _missing(key, words, has_number, content)
    if missing is not None:
        return missing
    if _NOT_YET.search(key):
        return "not_yet"
    if content and _premise(words, content):
        return "premise"
    return None


_JOINED = re.compile(r"(?<=[^\W\d_])-(?=[^\W\d_])")  # "no-show" is one word, not "no show"


def _short_answer(key: str) -> bool:
    """A bare phrase of a few words ("Caddy or nginx", "42 requests") states an answer."""
    words = key.split()
    return 0 < len(words) <= 5 and not (set(words) & (_NEGATION | _META))


def _has_info(words: list[str]) -> bool:
    return bool(_info_at(words))


def _strong(clause: str, key: str, echoes: frozenset) -> bool:
    """The clause answers by a number the question does not state, or by a guess."""
    return any(n.value not in echoes for n in extract_numbers(clause)) or _guesses(clause)


def _answer(clause: str, key: str, echoes: frozenset) -> bool:
    if clause.rstrip().endswith("?") or _OFFER.match(clause):
        return False
    words = key.split()
    if any(n.value not in echoes for n in extract_numbers(clause)):
        return True
    padded = f" {key} "
    for h in _HEDGES:  # "không dám chắc là ...": a doubt, not the guess "chắc là"
        padded = padded.replace(f" {h} ", " ")
    for g in _GUESS:
        at = padded.find(f" {g} ")
        rest = padded[at + len(g) + 2:].split() if at >= 0 else []
        if rest and not set(rest) <= _WHICH | _FILLER:
            return True
    m = _COPULA.search(clause)
    if m is None:
        return False
    rest = text_key(m.group("rest") or m.group("rest2") or "").split()
    if set(rest) & _WHICH:
        return False  # "là hãng nào", "is which one": a question, no value
    if set(text_key(clause[:m.start()]).split()) & _SOURCES:
        return False  # about the sources ("the text is about Tổ Ong Lab"), not an answer
    return bool(rest) and not (set(rest[:2]) & _NEGATION) and not (set(words) & _META) \
        and not (_has_info(rest) and set(words) & _NEGATION)


def abstention(reply: str, echoes: frozenset = frozenset(),
               content: frozenset[str] = frozenset()) -> Abstention:
    """Whether the reply abstains, by the clause rules of this module; `echoes` are the
    numbers the question states (restating them answers nothing), `content` the words of
    the question a reply may reject as a premise (premise_words)."""
    if _machine_output(reply):
        # A JSON object or list (a tool's error or result passed on as the answer) says
        # nothing of what the sources hold: '{"error": "unknown tool ..."}' is no "unknown".
        return Abstention(False, None, "machine_output")
    last_lack = None
    strong = False  # an answer by a number or a guess, not only by its shape
    roles: list[tuple[str, str]] = []
    for index, piece in enumerate(_SPLIT.split(reply or "")):
        key = text_key(_JOINED.sub("", piece))
        if not key:
            continue
        has_number = any(n.value not in echoes for n in extract_numbers(piece))
        kind = None
        # a lack clause can still carry an answer after a guess ("không rõ khoảng 200")
        if any(f" {h} " in f" {key} " for h in _HEDGES) and not _lack_beyond_hedge(key):
            roles.append(("hedge", piece))
            if _answer(piece, key, echoes) and _guess_after_lack(key):
                roles.append(("answer", piece))
        elif (kind := lack_kind(key, has_number, content)) is not None:
            roles.append((kind, piece))
            last_lack = len(roles) - 1
            if _answer(piece, key, echoes) and _guess_after_lack(key):
                roles.append(("answer", piece))
        elif _answer(piece, key, echoes) or (index == 0 and _short_answer(key)
                                             and not piece.rstrip().endswith("?")
                                             and not _OFFER.match(piece)):
            partial = bool(_PARTIAL.search(key))
            roles.append(("partial" if partial else "answer", piece))
            strong |= _strong(piece, key, echoes)
    if last_lack is None:
        hedges = [p for role, p in roles if role == "hedge"]
        if hedges and not any(role in ("answer", "partial") for role, _ in roles):
            return Abstention(True, hedges[0].strip(), "hedge")
        if not hedges and not strong:
            # no lack, and at most a bare phrase or a copula ("It's Caddy", "Your guess
            # is as good as mine"): the rules cannot tell an answer from free wording
            return Abstention(False, None, "unsure")
        return Abstention(False, None, "no_lack" if not hedges else "answer_with_hedge")
    kind, lack_clause = roles[last_lack]
    # a lack that names what was asked ("the yearly total"): a part given after it is
    # another fact; so is what follows "the passages only give ..."
    specific = kind == "only" or any(
        (content | _WHOLE) & set(text_key(p).split()) for role, p in roles
        if role in _LACKS)
    after = []
    for role, piece in roles[last_lack + 1:]:
        if role == "partial" and not specific:
            role = "answer"  # "I don't know exactly, only about 12 GB": an answer
        if role == "answer" and (kind == "lack" or _guesses(piece)):
            after.append(piece)
    if after:
        return Abstention(False, after[0].strip(), "answer_after_lack")
    return Abstention(True, lack_clause.strip(), "lack" if kind == "only" else kind)


_LACKS = frozenset({"lack", "only", "not_yet", "premise"})


def states_something(reply: str, asked: frozenset[str]) -> bool:
    """Whether a clause of the reply says something beyond the question: not a question,
    an offer, nor the question's own words again. An empty reply, or one that restates
    the question ("What is the Wi-Fi password of the office?"), answers nothing."""
    for piece in _SPLIT.split(reply or ""):
        key = text_key(piece)
        if not key or piece.rstrip().endswith("?") or _OFFER.match(piece):
            continue
        if set(key.split()) - asked - _NOT_PREMISE:
            return True
    return False


def _guesses(piece: str) -> bool:
    key = f" {text_key(piece)} "
    return any(f" {g} " in key for g in _GUESS)


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
    return lack_kind(key) is not None


def _guess_after_lack(key: str) -> bool:
    phrase = abstain_phrase(key)
    padded = f" {key} "
    start = padded.find(f" {text_key(phrase)} ") + len(text_key(phrase)) + 1 if phrase else 0
    rest = padded[start:]
    return any(f" {g} " in rest for g in _GUESS)
