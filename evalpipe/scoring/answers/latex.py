"""LaTeX answer styles: the markup math-tuned models wrap their answers in, read as the
plain text a grader sees.

Qwen and other models trained on math data end with `\\(\\boxed{531532}\\)`,
`\\[\\boxed{42}\\]`, `$$\\boxed{\\dfrac{1}{3}}$$` or `\\boxed{\\text{Caddy}}`, and write
`1{,}234`, `1\\,234`, `\\frac{2}{3}`, `42 \\times 7`, `50\\%`. `plain(reply)` turns this
into text the other readers understand ("531532", "1/3", "Caddy", "1,234", "1 234",
"2/3", "42 × 7", "50%") and says where the last boxed value is: a boxed value is the
answer the reply gives, like a final-answer line (match.py takes the later of the two).

Only replies with a backslash are rewritten; anything else is returned as it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# commands whose one argument is the text itself
_UNWRAP = frozenset({"text", "textbf", "textit", "textrm", "texttt", "mathrm", "mathbf",
                     "mathit", "mathtt", "mathsf", "operatorname", "mbox", "hbox", "emph",
                     "textnormal", "displaystyle", "boldsymbol", "bm", "underline",
                     "overline"})
_BOXES = frozenset({"boxed", "fbox", "framebox"})
_FRACTIONS = frozenset({"frac", "dfrac", "tfrac", "cfrac"})
# commands that stand for a symbol ("\times" is the operator the number rules know)
_SYMBOLS = {
    "times": "×", "cdot": "·", "div": "÷", "pm": "±", "approx": "≈", "neq": "≠", "ne": "≠",
    "le": "≤", "leq": "≤", "ge": "≥", "geq": "≥", "%": "%", "$": "$", "&": "&", "#": "#",
    "_": "_", "{": "(", "}": ")", "circ": "°", "degree": "°", "quad": " ", "qquad": " ",
    ",": "\u2009", ";": " ", ":": " ", " ": " ", "!": "", "left": "", "right": "",
    "ldots": "...", "dots": "...", "cdots": "...", "to": "→", "rightarrow": "→",
    "Rightarrow": "⇒", "implies": "⇒", "infty": "∞", "sim": "~", "colon": ":",
}
_COMMAND = re.compile(r"\\([A-Za-z]+|[,;:! %$&#_{}])")
_MATH_OPEN_CLOSE = re.compile(r"\\[()\[\]]")
# a $...$ or $$...$$ span holding a LaTeX command: its dollars are math delimiters
# (a "$1,180" without a command stays the dollar amount it is)
_DOLLAR_MATH = re.compile(r"\$\$?([^$]*\\[^$]*?)\$\$?")
_BRACED_SEPARATOR = re.compile(r"(?<=\d)\{([,.])\}(?=\d)")  # "1{,}234": a grouping comma
_SIMPLE = re.compile(r"[-\w.,\u2009 ]*")


@dataclass(frozen=True, slots=True)
class Plain:
    text: str  # the reply with its LaTeX read as plain text
    boxed: tuple[int, int] | None  # where the last boxed value is in `text`, if any


def _group(text: str, at: int) -> tuple[str, int] | None:
    """The brace group starting at `at` (after spaces), and where it ends; None when
    there is none. Unbalanced braces take the rest of the text."""
    while at < len(text) and text[at] == " ":
        at += 1
    if at >= len(text) or text[at] != "{":
        return None
    depth = 0
    for i in range(at, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[at + 1:i], i + 1
    return text[at + 1:], len(text)


def _convert(text: str, boxes: list[tuple[int, int]], out: list[str]) -> None:
    """Append the plain reading of `text` to `out`, recording boxed spans (offsets in the
    joined output)."""
    pos = 0
    while (m := _COMMAND.search(text, pos)) is not None:
        out.append(text[pos:m.start()])
        name = m.group(1)
        pos = m.end()
        if name in _BOXES or name in _UNWRAP:
            group = _group(text, pos)
            if group is None:
                continue
            inner, pos = group
            start = sum(len(s) for s in out)
            _convert(inner, boxes, out)
            if name in _BOXES:
                boxes.append((start, sum(len(s) for s in out)))
        elif name in _FRACTIONS:
            top = _group(text, pos)
            bottom = _group(text, top[1]) if top else None
            if top is None or bottom is None:
                continue
            pos = bottom[1]
            parts = []
            for part in (top[0], bottom[0]):
                piece: list[str] = []
                _convert(part, boxes, piece)
                read = "".join(piece).strip()
                parts.append(read if _SIMPLE.fullmatch(read) else f"({read})")
            # a whole number right before makes a mixed number: "2\frac{1}{3}" is 2 1/3
            joined = "".join(out)
            space = " " if joined[-1:].isdigit() else ""
            out.append(f"{space}{parts[0]}/{parts[1]}")
        elif name in _SYMBOLS:
            out.append(_SYMBOLS[name])
        # any other command ("\displaystyle", "\large") says nothing about the answer
    out.append(text[pos:])


def plain(reply: str) -> Plain:
    """The reply with its LaTeX markup read as plain text, and the last boxed value."""
    if "\\" not in reply:
        return Plain(reply, None)
    text = _DOLLAR_MATH.sub(lambda m: f" {m.group(1)} ", reply)
    text = _MATH_OPEN_CLOSE.sub(" ", text)
    text = _BRACED_SEPARATOR.sub(r"\1", text)
    boxes: list[tuple[int, int]] = []
    out: list[str] = []
    _convert(text, boxes, out)
    joined = "".join(out)
    # braces left over from markup ("{42}", "^{2}") are no part of what is read
    kept = [i for i, ch in enumerate(joined) if ch not in "{}"]
    index = {old: new for new, old in enumerate(kept)}
    index[len(joined)] = len(kept)
    text = "".join(joined[i] for i in kept)

    def moved(at: int) -> int:
        while at not in index:
            at += 1
        return index[at]

    boxed = None
    if boxes:
        start, end = boxes[-1]
        boxed = (moved(start), moved(end))
    return Plain(text, boxed)
