"""Strict and lenient JSON object decoding for tool-call bodies.

The lenient path repairs the slips small models make (trailing commas, single
quotes, Python literals, a missing closing brace) and says that it did, so that
scoring can report strict and lenient format validity side by side.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

MAX_BODY = 100_000  # longer bodies are refused unparsed
_TRAILING_COMMA = re.compile(r",\s*([}\]])")


def loads_object(body: str, *, lenient: bool) -> tuple[Any, str | None, bool]:
    """(decoded value, error kind or None, repaired?)."""
    if len(body) > MAX_BODY:
        return None, "too_long", False
    if not body.strip():
        return None, "empty", False
    try:
        return json.loads(body), None, False
    except (json.JSONDecodeError, RecursionError):
        if not lenient:
            return None, "not_json", False
    for candidate in _repairs(body.strip()):
        try:
            return json.loads(candidate), None, True
        except (json.JSONDecodeError, RecursionError):
            pass
    try:  # single quotes and True/False/None: a literal parse, never evaluation
        value = ast.literal_eval(body.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return None, "not_json", False
    try:
        return json.loads(json.dumps(value)), None, True
    except (TypeError, ValueError):
        return None, "not_json", False


def _repairs(body: str):
    fixed = _TRAILING_COMMA.sub(r"\1", body)
    yield fixed
    opened = fixed.count("{") - fixed.count("}")
    if 0 < opened <= 3:
        yield fixed + "}" * opened
