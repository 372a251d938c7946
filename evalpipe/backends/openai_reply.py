"""What an OpenAI-compatible server sends back, checked field by field.

Nothing a server sends is trusted. A reply body, or one streamed chunk, is read
in three steps, and whatever does not fit raises MalformedReply naming the field:

1. bytes to JSON: UTF-8, standard JSON only (no NaN or Infinity, no number out
   of range), at most MAX_BODY_BYTES and nested at most MAX_NESTING deep;
2. the values: every string (keys too) valid Unicode (no lone surrogate such as
   `\\ud800`, which no UTF-8 file can hold), every number finite;
3. the shape (pydantic, strict types, unknown fields ignored): `choices` a list
   (a reply needs one), `message`/`delta` an object, `content`, `text`, ids,
   a call's `name` strings or null, `tool_calls` a list, `arguments` a string or
   an object nested at most formats.repair.MAX_DEPTH deep, `usage` counts
   non-negative integers.

The backend records a MalformedReply as a reply with finish_reason "malformed"
(stop reason and category malformed_reply): a verdict on the endpoint, never a
crash, and never something the run directory could not hold.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evalpipe.formats.openai import decode_arguments
from evalpipe.formats.repair import MAX_DEPTH
from evalpipe.records import ToolCall

MAX_BODY_BYTES = 32 << 20  # a reply (or a whole stream) larger than this is refused
MAX_NESTING = MAX_DEPTH + 8  # the reply's own envelope, around arguments MAX_DEPTH deep
MAX_CALLS = 64  # tool calls in one reply (formats.base.MAX_ATTEMPTS)
EXCERPT = 2000  # characters of a malformed reply kept for `evalpipe show`


class MalformedReply(Exception):
    """The server's reply does not fit the wire shape; `excerpt` is what came, safely cut."""

    def __init__(self, reason: str, excerpt: str = ""):
        super().__init__(reason)
        self.reason, self.excerpt = reason, excerpt


class _Wire(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")


Count = Annotated[int, Field(ge=0)]


class Function(_Wire):
    name: str | None = None
    arguments: str | dict[str, Any] | None = None


class WireCall(_Wire):
    index: Annotated[int, Field(ge=0, lt=MAX_CALLS)] | None = None
    id: str | None = None
    function: Function | None = None


class Message(_Wire):
    content: str | None = None
    tool_calls: Annotated[list[WireCall], Field(max_length=MAX_CALLS)] | None = None


class Choice(_Wire):
    message: Message | None = None
    delta: Message | None = None
    text: str | None = None
    finish_reason: str | None = None


class Usage(_Wire):
    prompt_tokens: Count | None = None
    completion_tokens: Count | None = None


class ReplyBody(_Wire):
    """A whole reply, or one chunk of a streamed one."""

    choices: list[Choice] = Field(default_factory=list)
    usage: Usage | None = None
    model: str | None = None
    error: Any = None


def excerpt(raw: bytes) -> str:
    """The start of what the server sent, as text that any file and terminal can hold."""
    return raw[:EXCERPT].decode("utf-8", "backslashreplace")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def read_body(raw: bytes, *, stream: bool = False) -> ReplyBody:
    """A reply body (or a streamed chunk's payload), checked; MalformedReply if it does
    not fit. A whole reply must have a choice with a message or a text."""
    if len(raw) > MAX_BODY_BYTES:
        raise MalformedReply(f"the reply is over {MAX_BODY_BYTES} bytes", excerpt(raw))
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except UnicodeDecodeError as exc:
        raise MalformedReply(f"the reply is not UTF-8 (byte {exc.start + 1})",
                             excerpt(raw)) from None
    except RecursionError:
        raise MalformedReply("the reply is nested too deeply", excerpt(raw)) from None
    except ValueError as exc:
        raise MalformedReply(f"the reply is not JSON ({str(exc)[:200]})", excerpt(raw)) from None
    check_values(data, "the reply", MAX_NESTING, raw)
    if not isinstance(data, dict):
        raise MalformedReply(f"the reply is a JSON {type(data).__name__}, not an object",
                             excerpt(raw))
    try:
        body = ReplyBody.model_validate(data)
    except ValidationError as exc:
        raise MalformedReply(_first_problem(exc), excerpt(raw)) from None
    if not stream and body.error is None:
        if not body.choices:
            raise MalformedReply("choices: empty, expected one choice", excerpt(raw))
        first = body.choices[0]
        if first.message is None and first.text is None:
            raise MalformedReply("choices[0]: neither a message nor a text", excerpt(raw))
    for i, choice in enumerate(body.choices):
        for part, message in (("message", choice.message), ("delta", choice.delta)):
            for j, call in enumerate((message.tool_calls if message else None) or ()):
                args = call.function.arguments if call.function else None
                if isinstance(args, dict):
                    check_values(args, f"choices[{i}].{part}.tool_calls[{j}].function.arguments",
                                 MAX_DEPTH, raw)
    return body


def server_error(body: ReplyBody) -> str | None:
    """The error a reply (or a chunk) reports instead of choices, on one short line; None
    when it reports none. Such a reply is the server failing, never the model's answer."""
    if body.error is None or body.choices:
        return None
    error = body.error.get("message", body.error) if isinstance(body.error, dict) \
        else body.error
    text = " ".join(str(error).split())
    return text[:200] + "..." if len(text) > 200 else text


def check_values(value: Any, where: str, max_depth: int, raw: bytes = b"") -> None:
    """Every string valid Unicode and every number finite, nested at most max_depth
    deep; iterative, so no depth can exhaust the stack."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > max_depth:
            raise MalformedReply(f"{where}: nested deeper than {max_depth}", excerpt(raw))
        if isinstance(item, str):
            _check_text(item, where, raw)
        elif isinstance(item, float) and not math.isfinite(item):
            raise MalformedReply(f"{where}: a number out of range", excerpt(raw))
        elif isinstance(item, dict):
            for key, inner in item.items():
                _check_text(key, where, raw)
                stack.append((inner, depth + 1))
        elif isinstance(item, list):
            stack.extend((inner, depth + 1) for inner in item)


def _check_text(text: str, where: str, raw: bytes) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        char = ord(text[exc.start])
        raise MalformedReply(f"{where}: a lone surrogate U+{char:04X} (not valid Unicode)",
                             excerpt(raw)) from None


def _first_problem(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error["loc"])
    got = type(error.get("input")).__name__
    return f"{where.lstrip('.') or 'the reply'}: {error['msg']} (got {got})"


def tool_calls(raw: list[tuple[str, str, str | dict[str, Any]]], where: str,
               body: bytes = b"") -> list[ToolCall] | None:
    """ToolCalls from (id, name, arguments) triples, arguments decoded by the formats'
    strict reader (an argument string that is not a JSON object stays a string, so the
    tool check reports invalid_arguments); decoded values are checked like the reply's."""
    if not raw:
        return None
    calls = []
    for i, (call_id, name, arguments) in enumerate(raw):
        decoded = decode_arguments(arguments)
        check_values(decoded, f"{where}[{i}].function.arguments", MAX_DEPTH, body)
        calls.append(ToolCall(name, decoded, id=call_id or f"call_{i}"))
    return calls
