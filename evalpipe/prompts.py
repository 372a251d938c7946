"""The exact prompt of every turn, stored once per distinct block.

A rendered prompt is cut into blocks: after each blank line, and before each
line that starts with "<" (where chat templates open a message: <|im_start|>,
<start_of_turn>, ...). A turn records the ids of its blocks; the text of a
block is written once per cell, in the first sample of the file that uses it
(`Sample.prompt_text`). So the shared system prompt and tool block, and the
earlier turns that every later turn repeats, are stored once, and joining a
turn's blocks gives back the prompt byte for byte. Where the cuts fall only
decides how much is shared, never what is stored.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any

from evalpipe.records import TurnRecord

_CUT = re.compile(r"(?<=\n\n)|(?<=\n)(?=<)")


def block_id(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def split_blocks(prompt: str) -> list[str]:
    return [part for part in _CUT.split(prompt) if part]


class BlockWriter:
    """Block ids for the prompts of one cell, and each block's text handed to the
    first sample (in file order) that uses it."""

    def __init__(self) -> None:
        self._pending: dict[str, str] = {}  # seen, text not written yet
        self._written: set[str] = set()

    def add(self, prompt: str) -> list[str]:
        ids = []
        for part in split_blocks(prompt):
            bid = block_id(part)
            if bid not in self._written:
                self._pending.setdefault(bid, part)
            ids.append(bid)
        return ids

    def claim(self, turns: Iterable[dict[str, Any]]) -> dict[str, str]:
        """The texts of the blocks of `turns` that no earlier sample carries."""
        out: dict[str, str] = {}
        for turn in turns:
            for bid in turn.get("prompt_blocks") or ():
                if bid not in self._written:
                    out[bid] = self._pending.pop(bid)
                    self._written.add(bid)
        return out


def block_texts(samples: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Every block text carried by `samples` (those of one cell, or a whole file)."""
    texts: dict[str, str] = {}
    for sample in samples:
        texts.update(sample.get("prompt_text") or {})
    return texts


def turn_prompt(turn: TurnRecord, texts: dict[str, str]) -> str | None:
    """The prompt the model saw for `turn`; None when the run did not store it (older
    runs) or a block is missing (the sample that carried it was removed)."""
    ids = turn.get("prompt_blocks")
    if not ids or any(bid not in texts for bid in ids):
        return None
    return "".join(texts[bid] for bid in ids)
