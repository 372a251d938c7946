"""The final-answer convention: the model is asked to end with one line "Answer: ..."
("Đáp án: ..." in Vietnamese), and answer extraction reads that line when there is one.

One home for both halves, so the instruction and the line the scorer looks for cannot
drift apart. The engine adds the instruction (config `final_answer_line: true`); the
scorer looks for the line in every reply, asked for or not, because models that were
tuned on it write it anyway.
"""

from __future__ import annotations

import re

INSTRUCTION = {
    "en": 'End your reply with one line of the form "Answer: <your answer>".',
    "vi": 'Kết thúc câu trả lời bằng một dòng dạng "Đáp án: <câu trả lời của bạn>".',
}
# The labels a final-answer line may start with (either language, any case, bold or not).
LABELS = ("final answer", "answer", "đáp án", "đáp số", "câu trả lời", "trả lời", "kết quả")
_LINE = re.compile(
    r"^[ \t>*_#-]*(?:" + "|".join(re.escape(label) for label in LABELS) + r")[ \t*_]*[:：]"
    r"[ \t*_]*(?P<answer>\S.*?)[ \t*_]*$", re.IGNORECASE | re.MULTILINE)


def instruction(lang: str | None) -> str:
    """The instruction in the question's language (English for any other language)."""
    return INSTRUCTION.get(lang or "en", INSTRUCTION["en"])


def final_answer_line(reply: str) -> str | None:
    """The text of the reply's last final-answer line, or None when it has none."""
    span = final_answer_span(reply)
    return None if span is None else reply[span[0]:span[1]]


def final_answer_span(reply: str) -> tuple[int, int] | None:
    """Where the answer of the reply's last final-answer line is, or None."""
    if ":" not in reply and "：" not in reply:
        return None
    found = None
    for m in _LINE.finditer(reply):
        found = m.span("answer")
    return found
