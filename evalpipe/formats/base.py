"""What every tool-call format does: put tools into the prompt, read calls back.

The transcript is kept in one canonical form (roles system/user/assistant/tool,
assistant tool_calls with ids, tool messages with tool_call_id). A format turns
it into the messages its protocol expects (`prepare`) and reads a reply
(`parse`). Parsing never executes anything and never raises on model output:
every problem becomes a ParseError whose kind is one of ERROR_KINDS.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from typing import Any

from evalpipe.records import ParseError, ParseResult, ToolCall

MAX_REPLY = 1_000_000  # longer replies are not parsed at all (too_long)
MAX_ATTEMPTS = 64  # calls (and errors) kept per reply; more is one too_long error
SNIPPET = 200

# Every kind of ParseError a format may return (docs/formats.md explains each).
ERROR_KINDS = frozenset({
    "empty",  # a call block with nothing in it
    "not_json",  # the call body is not JSON (after repairs, in lenient mode)
    "bad_number",  # a number that is not finite or has thousands of digits
    "too_long",  # the reply or a call body is over the size limit (not parsed), or too many calls
    "too_deep",  # brackets nested deeper than the limit; not parsed
    "unclosed_tag",  # <tool_call>, <function=...> or <parameter=...> never closed (strict)
    "untagged_call",  # a call written without its <tool_call> wrapper (strict)
    "not_object",  # the call is a JSON value other than an object (or a list, strict)
    "missing_name",  # no function name (or an empty one)
    "missing_arguments",  # arguments under another key than the protocol's (strict)
    "arguments_not_object",  # arguments are a string, list, number, ... (strict: any non-object)
    "duplicate_parameter",  # xml: the same <parameter=...> twice (strict)
    "duplicate_key",  # a JSON object gives a key twice (strict; lenient: last wins, repaired)
    "bad_name",  # xml: a function or parameter name that is not an identifier
    "truncated_call",  # the reply hit the token limit inside a call; never repaired into one
    "unknown_parameter_type",  # xml: the schema names a type the format cannot convert to (strict)
    "imitated_turn",  # the reply fakes a tool response or a new chat turn; cut there
    "parser_bug",  # the parser itself failed (a bug: tests assert it never happens)
})

THINK = re.compile(r"<think>(.*?)(?:</think>|$)", re.DOTALL)
# Where a reply starts writing the other side of the conversation: a tool response
# or a chat-template turn marker. Everything from there on is ignored.
IMITATION = re.compile(
    r"<tool_response>|<\|im_start\|>|<\|start_header_id\|>|<start_of_turn>")


def split_reasoning(text: str) -> tuple[str, str]:
    """(reply without <think> blocks, the reasoning inside them).

    A `</think>` without an opening tag (templates that open the block in the
    prompt) makes everything before it reasoning; an unclosed `<think>` runs to
    the end of the reply."""
    parts = []
    head, sep, tail = text.partition("</think>")
    if sep and "<think>" not in head:
        parts.append(head.strip())
        text = tail
    parts += [m.strip() for m in THINK.findall(text)]
    reasoning = "\n".join(p for p in parts if p)
    return THINK.sub("", text).strip(), reasoning


def cut_imitation(reply: str, result: ParseResult) -> str:
    """The reply up to the first imitated tool response or chat turn; records an
    imitated_turn error when there is one."""
    match = IMITATION.search(reply)
    if match is None:
        return reply
    result.errors.append(error("imitated_turn", "the reply imitates a tool response or "
                               "another chat turn; the rest is ignored", reply[match.start():]))
    return reply[:match.start()]


def error(kind: str, message: str, snippet: str = "") -> ParseError:
    assert kind in ERROR_KINDS, kind
    return ParseError(kind, message, snippet[:SNIPPET])


def start_result(text: str) -> tuple[ParseResult, str | None]:
    """A result with the reasoning split off, and the reply to parse (None when
    the reply is too long to look at)."""
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    if len(text) > MAX_REPLY:
        result = ParseResult(content="")
        result.errors.append(error("too_long", f"reply is {len(text)} characters; limit "
                                   f"{MAX_REPLY}", text))
        return result, None
    reply, reasoning = split_reasoning(text)
    return ParseResult(reasoning=reasoning), reply


class Format(ABC):
    """A tool-call protocol: how tools and results are written into the conversation
    (`prepare`) and how calls are read back from a reply (`parse`, around the format's
    own `_parse`)."""

    name: str = ""

    def __init__(self, tools: list[dict[str, Any]] | None = None):  # noqa: B027 -- optional
        """`tools`: the cell's tool schemas, for a format that reads argument types from
        them before any `prepare` call (xml); the others need none."""

    def parse(self, text: str, *, lenient: bool = True, cut_off: bool = False) -> ParseResult:
        """Tool calls and typed errors read from one reply. Never raises: a bug in the
        format's parser becomes a parser_bug error on the reply, and a flood of attempts
        is cut to MAX_ATTEMPTS.

        `cut_off=True`: the generation stopped at max_new_tokens, so a call still open
        at the end is a truncated_call error and is never repaired into a call that
        runs."""
        try:
            result = self._parse(text, lenient=lenient)
            if cut_off and result.calls:
                result = self._without_cut_call(text, lenient, result)
        except Exception as exc:  # noqa: BLE001 - reported, never raised
            result = ParseResult(content="")
            result.errors.append(error("parser_bug", f"{type(exc).__name__}: {exc}",
                                       text if isinstance(text, str) else ""))
            return result
        if len(result.calls) > MAX_ATTEMPTS or len(result.errors) > MAX_ATTEMPTS:
            extra = len(result.calls) + len(result.errors)
            result.calls = result.calls[:MAX_ATTEMPTS]
            result.errors = result.errors[:MAX_ATTEMPTS - 1] + [error(
                "too_long", f"{extra} call attempts in one reply; the first {MAX_ATTEMPTS} "
                "calls are kept")]
        return result

    @abstractmethod
    def _parse(self, text: str, *, lenient: bool = True) -> ParseResult:
        """The format's own reader of one reply (`parse` guards it)."""

    def _without_cut_call(self, text: str, lenient: bool, result: ParseResult) -> ParseResult:
        """A reply cut off by the token limit: if its last call attempt is unfinished (the
        strict parser does not accept it alone), that call is a truncated_call error, not
        a call the lenient parser completes and runs (multiply(3313, 25) from "...258")."""
        start = last_call_start(text)
        if start is None:
            return result
        tail = self._parse(text[start:], lenient=False)
        if tail.calls and not tail.errors:
            return result  # the last call was finished before the limit
        head = self._parse(text[:start], lenient=lenient)
        if len(head.calls) >= len(result.calls):
            return result  # the cut-off tail held no call the lenient parser read
        head.errors.append(error("truncated_call", "the reply reached the token limit inside "
                                 "this call; it is not run", text[start:]))
        return head

    @abstractmethod
    def prepare(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                template_supports_tools: bool) -> tuple[list[dict[str, Any]], list[dict] | None]:
        """Wire messages for the backend, and the tools to hand the chat template
        (None when the protocol is written into the prompt instead)."""

    def render_call(self, call: ToolCall) -> str:
        """One call written the way the protocol asks the model to write it."""
        raise NotImplementedError

    def render_calls(self, calls: list[ToolCall]) -> str:
        """Several calls in one reply (parallel calls)."""
        return "\n".join(self.render_call(c) for c in calls)


TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
# A block ends at its closing tag, at the next opening tag, or at the end of the reply.
TOOL_CALL_BLOCK = re.compile(r"<tool_call>(.*?)(</tool_call>|(?=<tool_call>)|$)", re.DOTALL)
TOOL_CALL_TAG = re.compile(r"</?tool_call>")  # a stray tag, cut from content with the calls


def tool_call_blocks(reply: str, result: ParseResult, lenient: bool):
    """(body, closed, where) of each <tool_call> block in a reply. In strict
    mode an unclosed block is an unclosed_tag error on `result` and is not yielded."""
    for index, match in enumerate(TOOL_CALL_BLOCK.finditer(reply)):
        body, closed, where = match.group(1), match.group(2) == TOOL_CALL_CLOSE, f"call {index}"
        if not closed and not lenient:
            result.errors.append(error(
                "unclosed_tag", f"{where}: {TOOL_CALL_OPEN} without {TOOL_CALL_CLOSE}", body))
            continue
        yield body, closed, where


class PromptProtocolFormat(Format):
    """A format whose protocol is written into the system prompt: the tools go there
    as text, tool results come back as user messages in the format's own wrapping."""

    def protocol(self, tools: list[dict[str, Any]]) -> str:
        """The system-prompt text that explains the protocol and lists the tools."""
        raise NotImplementedError

    def tool_result(self, name: str, content: str) -> str:
        raise NotImplementedError

    def prepare(self, messages, tools, template_supports_tools):
        wire = to_text_messages(messages, self)
        return (merge_system(wire, self.protocol(tools)) if tools else wire), None


# Where a call attempt starts, in every format: a <tool_call> tag, an xml <function=...>,
# or a JSON object (or list of objects) whose first key names the tool.
CALL_START = re.compile(r"<tool_call>|<function\s*=|\[?\s*\{\s*[\"']?(?:name|tool|function)"
                        r"[\"']?\s*:")
_WRAPPER_END = re.compile(r"(?:<tool_call>|\[)\s*$")


def last_call_start(text: str) -> int | None:
    """Offset of the last call attempt in a reply (the outermost of nested openings)."""
    start = None
    for match in CALL_START.finditer(text):
        start = match.start()
    if start is None:
        return None
    wrapper = _WRAPPER_END.search(text, 0, start)
    while wrapper is not None:  # "<tool_call>\n<function=" or "<tool_call>{" starts earlier
        start = wrapper.start()
        wrapper = _WRAPPER_END.search(text, 0, start)
    return start


def merge_system(messages: list[dict[str, Any]], extra: str) -> list[dict[str, Any]]:
    """Append protocol text to the system message (adding one if there is none)."""
    if not extra:
        return list(messages)
    if messages and messages[0]["role"] == "system":
        first = dict(messages[0], content=messages[0]["content"].rstrip() + "\n\n" + extra)
        return [first, *messages[1:]]
    return [{"role": "system", "content": extra}, *messages]


def to_text_messages(messages: list[dict[str, Any]], fmt: Any) -> list[dict[str, Any]]:
    """Canonical transcript -> plain chat: the assistant's raw text stays as it
    was; the tool results of one turn become one user message, each written by
    `fmt.tool_result(name, content)`."""
    wire: list[dict[str, Any]] = []
    tool_block = False
    for m in messages:
        if m["role"] == "tool":
            block = fmt.tool_result(m.get("name", ""), m.get("content") or "")
            if wire and tool_block:
                wire[-1]["content"] += "\n" + block
            else:
                wire.append({"role": "user", "content": block})
            tool_block = True
        else:
            wire.append({"role": m["role"], "content": m.get("content") or ""})
            tool_block = False
    return wire


def arguments_from(value: Any, lenient: bool, where: str
                   ) -> tuple[dict[str, Any] | None, ParseError | None, bool]:
    """Call arguments as a dict: (arguments, error, repaired?). In lenient mode a
    JSON-encoded string holding an object is decoded (a common slip)."""
    from evalpipe.formats.repair import loads_value

    if isinstance(value, dict):
        return value, None, False
    if lenient and isinstance(value, str):
        decoded, kind, _ = loads_value(value, lenient=True)
        if kind is None and isinstance(decoded, dict):
            return decoded, None, True
        if not value.strip():
            return {}, None, True
    return None, error("arguments_not_object", f"{where} arguments are "
                       f"{type(value).__name__}, not an object"), False
