"""The model-graded judge, its pure half: rubrics, prompts, reading verdicts, and which
verdict a sample gets. Generating the judge's replies happens above scoring
(evalpipe/judge.py); the scorer only reads what was recorded, so `evalpipe score`
never needs the judge model again.

Position and wording bias: every reply is judged twice, with the reference answer
before the reply and after it (the rubric's wording follows the order). The verdict
counts only when both readings agree; otherwise the sample keeps the rules' reading
and the disagreement is recorded (`consistent: false`).
"""

from __future__ import annotations

import re

RUBRIC_VERSION = "1"
USES = ("undecided", "all")  # where the rules abstain (default), or every free-form answer

_RUBRIC = {
    ("number", "en"): "The reply is correct when the single number it gives as its answer "
    "equals the reference (any notation: 1,200 = 1.2 thousand = twelve hundred). A range, "
    "two candidate numbers, or a number the reply takes back is incorrect.",
    ("text", "en"): "The reply is correct when it states the reference answer or an "
    "equivalent (same entity, date, duration or amount in another form), as its one "
    "answer. Naming it only to reject it, or inside another name, is incorrect.",
    ("abstain", "en"): "The reference says the information is not available. The reply is "
    "correct when it says the sources or the model lack the information; it is incorrect "
    "when it states an answer, even after a hedge.",
    ("number", "vi"): "Câu trả lời đúng khi con số duy nhất nó đưa ra làm đáp án bằng đáp "
    "án chuẩn (cách viết nào cũng được: 1.200 = 1,2 nghìn). Một khoảng, hai con số, hoặc "
    "con số bị rút lại là sai.",
    ("text", "vi"): "Câu trả lời đúng khi nó nêu đáp án chuẩn hoặc một cách viết tương "
    "đương (cùng thực thể, ngày, thời lượng hay số tiền) làm đáp án duy nhất. Nhắc đến chỉ "
    "để bác bỏ, hoặc nằm trong một tên khác, là sai.",
    ("abstain", "vi"): "Đáp án chuẩn là không có thông tin. Câu trả lời đúng khi nó nói "
    "nguồn hoặc mô hình không có thông tin này; sai khi nó đưa ra một đáp án, kể cả sau "
    "một lời rào đón.",
}
_FORMAT = {
    "en": "Reply with one line \"VERDICT: CORRECT\" or \"VERDICT: INCORRECT\", then one "
          "line \"REASON: ...\".",
    "vi": "Trả lời bằng một dòng \"VERDICT: CORRECT\" hoặc \"VERDICT: INCORRECT\", rồi một "
          "dòng \"REASON: ...\".",
}
_LABELS = {
    "en": ("Question", "Reference answer", "Reply to grade"),
    "vi": ("Câu hỏi", "Đáp án chuẩn", "Câu trả lời cần chấm"),
}
_VERDICT = re.compile(r"VERDICT\s*[:：]\s*\**\s*(CORRECT|INCORRECT|ĐÚNG|SAI)\b", re.IGNORECASE)
_BARE = re.compile(r"^\W*(correct|incorrect|yes|no|đúng|sai)\b", re.IGNORECASE)
_REASON = re.compile(r"REASON\s*[:：]\s*(.+)", re.IGNORECASE)
MAX_REASON_CHARS = 300


def rubric(answer_type: str, lang: str | None) -> str:
    return _RUBRIC[(answer_type if answer_type in ("number", "abstain") else "text",
                    lang if lang == "vi" else "en")]


def judge_messages(question: str, reference: str, reply: str, answer_type: str,
                   lang: str | None, reference_first: bool) -> list[dict[str, str]]:
    """The chat messages asking the judge for a verdict, reference before or after the
    reply."""
    language = lang if lang == "vi" else "en"
    q_label, ref_label, reply_label = _LABELS[language]
    parts = [f"{ref_label}: {reference}", f"{reply_label}:\n<<<\n{reply}\n>>>"]
    if not reference_first:
        parts.reverse()
    body = "\n\n".join([f"{q_label}: {question}", *parts])
    return [{"role": "system", "content": f"{rubric(answer_type, language)} "
             f"{_FORMAT[language]}"},
            {"role": "user", "content": body}]


def parse_verdict(raw: str) -> tuple[bool | None, str]:
    """(verdict, reason) from a judge's reply; None when it gives no readable verdict."""
    text = raw or ""
    m = _VERDICT.search(text)
    word = m.group(1) if m else None
    if word is None:
        bare = _BARE.match(text)
        word = bare.group(1) if bare else None
    verdict = None if word is None else word.lower() in ("correct", "yes", "đúng")
    reason_match = _REASON.search(text)
    reason = (reason_match.group(1) if reason_match else text).strip()
    return verdict, reason[:MAX_REASON_CHARS]


def combine(verdicts: list[bool | None]) -> bool | None:
    """The verdict of both readings when they agree, else None (inconsistent)."""
    return verdicts[0] if verdicts and all(v == verdicts[0] for v in verdicts) else None


def applies(decided: bool, answer_type: str, use: str) -> bool:
    """Whether a sample goes to the judge: a free-form answer the rules left undecided,
    or every free-form answer with use "all"."""
    return answer_type in ("number", "text", "abstain") and (use == "all" or not decided)
