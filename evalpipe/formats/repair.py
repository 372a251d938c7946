"""Strict and lenient JSON decoding for tool-call bodies, without ever evaluating.

Everything here is a linear scan over characters plus `json.loads`; nothing is
compiled, evaluated or unpickled. The lenient path repairs the slips small
models make and says that it did, so that scoring can report strict and
lenient format validity side by side:

- trailing commas (`{"a": 1,}`),
- single-quoted strings (`{'a': 'x'}`) and Python literals True/False/None,
- bare identifier keys (`{a: 1}`),
- raw control characters (newlines, tabs) inside strings,
- missing closing brackets and an unterminated last string,

- a key given twice (the last value is kept; strict mode: duplicate_key).

Error kinds returned: too_long, too_deep, empty, not_json, bad_number, duplicate_key.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

MAX_BODY = 100_000  # longer call bodies are refused unparsed (too_long)
MAX_DEPTH = 64  # deeper bracket nesting is refused unparsed (too_deep)
MAX_INT_DIGITS = 4000  # below Python's int/str conversion limit (4300)

_PY_LITERALS = {"True": "true", "False": "false", "None": "null"}
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*")


class _BadNumber(ValueError):
    pass


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _BadNumber(f"integer with {len(text)} digits")
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _BadNumber(f"number {text[:40]} is out of range")
    return value


def _parse_constant(text: str) -> Any:
    raise _BadNumber(f"{text} is not a JSON number")


class _DuplicateKey(ValueError):
    pass


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(f"key {key[:40]!r} given twice")
            seen.add(key)
    return obj


def _json(text: str, *, strict: bool = True, unique: bool = True) -> Any:
    # unique: a key given twice ({"name": "add", "name": "subtract"}) is an error, not
    # "the last one wins" in silence
    return json.loads(text, parse_int=_parse_int, parse_float=_parse_float,
                      parse_constant=_parse_constant, strict=strict,
                      object_pairs_hook=_unique_pairs if unique else None)


def nesting_depth(text: str) -> int:
    """The deepest bracket nesting outside strings (either quote style)."""
    depth = deepest = 0
    quote = ""
    escaped = False
    for ch in text:
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth = max(0, depth - 1)
    return deepest


def loads_value(body: str, *, lenient: bool) -> tuple[Any, str | None, bool]:
    """(decoded value, error kind or None, repaired?). Never raises."""
    if len(body) > MAX_BODY:
        return None, "too_long", False
    body = body.strip()
    if not body:
        return None, "empty", False
    if nesting_depth(body) > MAX_DEPTH:
        return None, "too_deep", False
    try:
        return _json(body), None, False
    except _BadNumber:
        return None, "bad_number", False
    except _DuplicateKey:
        if not lenient:
            return None, "duplicate_key", False
    except (ValueError, RecursionError):
        if not lenient:
            return None, "not_json", False
    try:  # lenient: repaired, a repeated key keeps its last value, and both are marked
        return _json(repair_json(body), strict=False, unique=False), None, True
    except _BadNumber:
        return None, "bad_number", False
    except (ValueError, RecursionError):
        return None, "not_json", False


def repair_json(text: str) -> str:
    """Rewrite almost-JSON into JSON, token by token (see the module docstring).

    The result may still be invalid; the caller decodes it with json.loads."""
    out: list[str] = []
    stack: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == '"' or ch == "'":
            string, i, closed = _read_string(text, i)
            out.append(string)
            if not closed:
                break
            continue
        if ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]":
            _drop_trailing_comma(out)
            if stack and stack[-1] == ch:
                stack.pop()
        elif ch == "," and _next_closer(text, i + 1):
            i += 1
            continue
        elif ch.isascii() and (match := _IDENT.match(text, i)) is not None:
            word = match.group(0)
            i = match.end()
            if word in _PY_LITERALS:
                out.append(_PY_LITERALS[word])
            elif _followed_by_colon(text, i) and stack and stack[-1] == "}":
                out.append(json.dumps(word))
            else:
                out.append(word)
            continue
        out.append(ch)
        i += 1
    _drop_trailing_comma(out)
    while out and out[-1].strip() in (":",):
        out.pop()
        _drop_trailing_comma(out)
    out.extend(reversed(stack))
    return "".join(out)


def _read_string(text: str, start: int) -> tuple[str, int, bool]:
    """A string literal starting at text[start] (either quote), re-encoded as a
    JSON string; (json text, index after it, closed?)."""
    quote = text[start]
    chars: list[str] = []
    i, n = start + 1, len(text)
    while i < n:
        ch = text[i]
        if ch == "\\" and i + 1 < n:
            nxt = text[i + 1]
            if nxt == "'" or (nxt == '"' and quote == '"'):
                chars.append(nxt)
            elif nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 2: i + 6] or ""):
                try:
                    chars.append(json.loads(f'"\\u{text[i + 2: i + 6]}"'))
                except ValueError:
                    chars.append("\\u" + text[i + 2: i + 6])
                i += 6
                continue
            else:
                chars.append({"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f",
                              "/": "/", "\\": "\\", '"': '"'}.get(nxt, "\\" + nxt))
            i += 2
            continue
        if ch == quote:
            return json.dumps("".join(chars), ensure_ascii=False), i + 1, True
        chars.append(ch)
        i += 1
    return json.dumps("".join(chars), ensure_ascii=False), n, False


def _next_closer(text: str, i: int) -> bool:
    while i < len(text) and text[i].isspace():
        i += 1
    return i < len(text) and text[i] in "}]"


def _followed_by_colon(text: str, i: int) -> bool:
    while i < len(text) and text[i] in " \t":
        i += 1
    return i < len(text) and text[i] == ":"


def _drop_trailing_comma(out: list[str]) -> None:
    j = len(out) - 1
    while j >= 0 and out[j].isspace():
        j -= 1
    if j >= 0 and out[j] == ",":
        del out[j]


@dataclass
class Span:
    """A bracketed region of free text that may hold JSON."""

    start: int
    end: int  # exclusive
    closed: bool  # False: the text ended before the brackets did

    def text(self, source: str) -> str:
        return source[self.start: self.end]


def json_spans(text: str, opening: str = "{[") -> Iterator[Span]:
    """Top-level bracketed regions of `text`, in order, in one linear pass.

    Quotes count only inside a region (prose has apostrophes); a region that the
    text ends inside of is returned with closed=False."""
    i, n = 0, len(text)
    while i < n:
        if text[i] not in opening:
            i += 1
            continue
        start, depth, quote, escaped = i, 0, "", False
        while i < n:
            ch = text[i]
            if quote:
                if escaped:
                    escaped = False
                elif ch == "\\":
                    escaped = True
                elif ch == quote or (ch == "\n" and quote == "'"):
                    quote = ""
            elif ch in "\"'":
                quote = ch
            elif ch in "{[":
                depth += 1
            elif ch in "}]":
                depth -= 1
                if depth == 0:
                    yield Span(start, i + 1, True)
                    i += 1
                    break
            i += 1
        else:
            yield Span(start, n, False)
