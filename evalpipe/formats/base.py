"""What every tool-call format does: put tools into the prompt, read calls back.

The transcript is kept in one canonical form (roles system/user/assistant/tool,
assistant tool_calls with ids, tool messages with tool_call_id). A format turns
it into the messages its protocol expects (`prepare`) and reads a reply
(`parse`). Parsing never executes anything.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from typing import Any

from evalpipe.records import ParseResult

THINK = re.compile(r"<think>(.*?)(?:</think>|$)", re.S)


def split_reasoning(text: str) -> tuple[str, str]:
    """(reply without <think> blocks, the reasoning inside them)."""
    reasoning = "\n".join(m.strip() for m in THINK.findall(text))
    return THINK.sub("", text).strip(), reasoning


class Format(ABC):
    name: str = ""

    @abstractmethod
    def prepare(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                template_supports_tools: bool) -> tuple[list[dict[str, Any]], list[dict] | None]:
        """Wire messages for the backend, and the tools to hand the chat template
        (None when the protocol is written into the prompt instead)."""

    @abstractmethod
    def parse(self, text: str, *, lenient: bool = True) -> ParseResult:
        """Tool calls and typed errors read from one reply."""


def merge_system(messages: list[dict[str, Any]], extra: str) -> list[dict[str, Any]]:
    """Append protocol text to the system message (adding one if there is none)."""
    if not extra:
        return list(messages)
    if messages and messages[0]["role"] == "system":
        first = dict(messages[0], content=messages[0]["content"].rstrip() + "\n\n" + extra)
        return [first, *messages[1:]]
    return [{"role": "system", "content": extra}, *messages]
