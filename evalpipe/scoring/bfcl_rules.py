"""The `match: bfcl` rule set: arguments compared the way BFCL's AST checker does.

For users who need numbers comparable with the leaderboard; evalpipe's own
rules (scoring/plan.py) stay the default. Where the two differ (docs/bfcl.md):

- types are Python's: an integer argument must be an int (5.0 is wrong), a float
  argument takes an int or a float, a boolean only a bool, a string only a str;
  a numeric string is never a number. Inside a dict argument BFCL compares with
  plain ==, so there 5.0 equals 5.
- numbers compare exactly (BFCL has no tolerance).
- strings compare after BFCL's normalisation: lower case, and spaces and the
  characters , . / - _ * ^ removed, ' read as " (so "New York" = "newyork").
  "$strings": "exact" is not honoured: BFCL has no exact mode.

Which call answers which gold step is the plan matcher's business; its first
pass is greedy in gold order, which is also how BFCL pairs parallel calls.
"""

from __future__ import annotations

import re
from typing import Any

from evalpipe.plans import ANY, is_form, is_optional

_BFCL_PUNCT = re.compile(r"[ ,./\-_*^]")


def standardize(text: str) -> str:
    """BFCL's string normalisation."""
    return _BFCL_PUNCT.sub("", text).lower().replace("'", '"')


def _number(v: Any) -> bool:
    return type(v) is int or type(v) is float


def _value(got: Any, want: Any, loose: bool) -> bool:
    if is_form(want):
        alternatives = want.get(ANY)
        return alternatives is None or any(_value(got, a, loose) for a in alternatives)
    tw, tg = type(want), type(got)
    if tw is str:
        if want.startswith("$$"):  # the plan matcher hands over unresolved steps as written
            want = want[1:]
        return tg is str and standardize(got) == standardize(want)
    if tw is list:
        return tg is list and len(got) == len(want) and all(
            _value(g, w, loose) for g, w in zip(got, want))
    if tw is dict:
        return tg is dict and _object(got, want, loose=True)
    if loose:  # BFCL's dict checker: plain ==
        return got == want
    if tw is bool:
        return tg is bool and got == want
    if tw is int:
        return tg is int and got == want
    if tw is float:
        return _number(got) and got == want  # an int is auto-converted for a float parameter
    return False  # a value evalpipe could not resolve (an unknown step result)


def _object(got: dict[str, Any], want: dict[str, Any], loose: bool) -> bool:
    if not set(got) <= set(want):
        return False
    if any(k not in got and not is_optional(w) for k, w in want.items()):
        return False
    return all(_value(v, want[k], loose) for k, v in got.items())


def bfcl_rules(gold: Any, actual: Any, strings: str = "text") -> bool:
    """A resolved gold value (usually a call's whole arguments object) against the
    actual one, by BFCL's definitions; `strings` is ignored (see above)."""
    if type(gold) is dict and not is_form(gold):
        return type(actual) is dict and _object(actual, gold, loose=False)
    return _value(actual, gold, loose=False)
