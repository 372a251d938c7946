"""Plan match: the tool calls a model executed against a question's gold plan.

Executed calls are the tool events of every turn, in order. A call that came
back with an error (unknown tool, invalid arguments, a tool exception, a
timeout) still counts as an attempt: it can never match a gold step (the step
was not done), so it shows up as an extra step, a wrong tool or wrong
arguments, and it lowers step precision. Retrying a refused call therefore
costs plan_exact even when the retry is right: the executed plan was not the
gold plan.

Matching, in four passes over the gold steps (gold order is a topological
order, since a "$sN" reference must name an earlier step):

1. full match: same tool, same arguments. A reference "$sN" resolves to the
   result of the executed call matched to sN; when sN has no match yet, to the
   result sN would have had (the gold plan run with the pure built-in tools),
   so a model that did step 1 in its head and called step 2 with the right
   number gets step 2.
2. name match: a gold step still open takes the first unused call of the same
   tool: wrong_arguments.
3. leftovers: a gold step and an unused call of another tool pair up as
   wrong_tool (arguments equal first, then in order); gold steps left are
   missing_step, calls left are extra_step.
4. consistent: a name-matched step whose arguments agree once its references
   resolve to the results of the calls actually paired with them (step 1 was
   wrong, step 2 used step 1's wrong result correctly) counts as matched, so
   one mistake is not counted twice. Step 1 still fails the plan.

Arguments compare by one function, argument_matches, under a named rule set
(RULE_SETS; "evalpipe" by default): integral numbers exactly, other numbers
with a relative tolerance of 1e-6, booleans only with booleans, strings in
text_key form, lists and objects element by element, and the gold forms of
evalpipe.plans ($any, $optional, $strings). add and multiply accept their two
operands in either order; the free-text query of search_site matches any
non-empty query.

Order: a matched step must run in a later turn than every step it references
(calls of one reply are issued together, before any result is known).
Otherwise: order_violation.

The primary failure is the first present of wrong_tool, wrong_arguments,
missing_step, extra_step, order_violation.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from evalpipe.plans import (
    ANY,
    DEFAULT_STRINGS,
    STRINGS,
    execute_gold_plan,
    is_form,
    is_optional,
    references,
    resolve_value,
)
from evalpipe.records import TurnRecord
from evalpipe.scoring.answers.normalize import text_key
from evalpipe.scoring.bfcl_rules import bfcl_rules

REASONS = ("wrong_tool", "wrong_arguments", "missing_step", "extra_step", "order_violation")
COMMUTATIVE = frozenset({"add", "multiply"})
FREE_TEXT_ARGUMENTS = frozenset({("search_site", "query")})
REL_TOL = 1e-6
_MISSING = object()
_FREE_TEXT = object()  # any non-empty string
_MAX_NUMBER_TEXT = 4300  # Python's own limit on int() of a digit string
_INT_TEXT = re.compile(r"[-+]?\d+")
_FLOAT_TEXT = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d{1,6})?")


@dataclass(slots=True)
class Executed:
    name: str
    arguments: Any
    result: Any
    ok: bool
    turn: int
    position: int  # index among all executed calls
    error: str | None = None  # the tool event's error (unknown_tool, timeout, ...)


@dataclass
class PlanResult:
    exact: bool
    precision: float | None  # matched calls / executed calls; None when nothing was called
    recall: float | None  # matched steps / gold steps; None when the gold plan is empty
    reason: str | None  # the primary failure
    reasons: list[str] = field(default_factory=list)
    matched: dict[str, int] = field(default_factory=dict)  # step id -> executed position


def executed_calls(turns: list[TurnRecord]) -> list[Executed]:
    out: list[Executed] = []
    for t_index, turn in enumerate(turns):
        for event in turn.get("tool_events") or ():
            error = event.get("error")
            out.append(Executed(event.get("name", ""), event.get("arguments"), event.get("result"),
                                not error, t_index, len(out), error or None))
    return out


def _number(v: Any) -> int | float | None:
    """The number a value stands for: an int or float as it is, a numeric string by
    its digits (an integer string stays an exact int, however long); None for
    anything else. Booleans are not numbers."""
    t = type(v)
    if t is int or t is float:
        return v
    if t is str and len(v) <= _MAX_NUMBER_TEXT:
        text = v.strip()
        if _INT_TEXT.fullmatch(text):
            return int(text)
        if _FLOAT_TEXT.fullmatch(text):
            x = float(text)
            return x if math.isfinite(x) else None
    return None


def numbers_equal(got: float, want: float) -> bool:
    """Integral gold values compare exactly (an id or amount off by one is wrong at
    any size); the relative tolerance is for non-integer gold values only."""
    if isinstance(want, int) or not math.isfinite(want) or want.is_integer():
        return got == want  # exact, also between an int and a float
    try:
        return math.isfinite(got) and abs(got - want) <= REL_TOL * max(abs(got), abs(want))
    except OverflowError:  # an int too large for a float is no near miss of a float
        return False


def _value_matches(got: Any, want: Any, strings: str) -> bool:
    if want is _MISSING:
        return False
    if want is _FREE_TEXT:
        return isinstance(got, str) and bool(got.strip())
    if is_form(want):
        strings = want.get(STRINGS, strings)
        alternatives = want.get(ANY)
        if alternatives is None:  # {"$optional": true}: any value
            return True
        return any(_value_matches(got, a, strings) for a in alternatives)
    tw, tg = type(want), type(got)
    if tw is bool or tg is bool:
        return tw is tg and got == want
    if tw is int or tw is float:
        g = _number(got)
        return g is not None and numbers_equal(g, want)
    if tw is str:
        if tg is str and (got == want or (strings == "text" and text_key(got) == text_key(want))):
            return True
        n, g = _number(want), _number(got)
        return n is not None and g is not None and numbers_equal(g, n)
    if tw is list:
        return tg is list and len(got) == len(want) and all(
            _value_matches(g, w, strings) for g, w in zip(got, want))
    if tw is dict:
        return tg is dict and _object_matches(got, want, strings)
    return got == want


def _object_matches(got: dict[str, Any], want: dict[str, Any], strings: str) -> bool:
    """Every required member present, no member the gold does not know, each value matching."""
    if not set(got) <= set(want) or any(k not in got for k, w in want.items()
                                        if not is_optional(w)):
        return False
    return all(_value_matches(v, want[k], strings) for k, v in got.items())


def evalpipe_rules(gold: Any, actual: Any, strings: str = DEFAULT_STRINGS) -> bool:
    """evalpipe's rules: numbers by numbers_equal (a numeric string counts as its
    number), strings in text_key form (or exactly, with "$strings": "exact"),
    booleans only equal booleans, lists element by element, objects member by member,
    gold forms ($any, $optional) as docs/scoring.md describes."""
    return _value_matches(actual, gold, strings)


# Named rule sets a question set may choose; each is (gold, actual, strings) -> bool.
RULE_SETS: dict[str, Callable[[Any, Any, str], bool]] = {"evalpipe": evalpipe_rules,
                                                         "bfcl": bfcl_rules}


def argument_matches(gold: Any, actual: Any, *, strings: str = DEFAULT_STRINGS,
                     rules: str = "evalpipe") -> bool:
    """One argument value against its resolved gold value (references already replaced
    by results, see evalpipe.plans.resolve_value), by the named rule set."""
    return RULE_SETS[rules](gold, actual, strings)


def values_match(got: Any, want: Any) -> bool:
    """One argument by evalpipe's rules (kept for callers that compare scalars)."""
    return _value_matches(got, want, DEFAULT_STRINGS)


def arguments_match(name: str, got: Any, want: dict[str, Any], rules: str = "evalpipe") -> bool:
    """A call's arguments object against a step's resolved gold arguments."""
    if not isinstance(got, dict):
        return False
    if rules != "evalpipe":
        return argument_matches(want, got, rules=rules)
    if name in COMMUTATIVE and len(want) == 2 and set(got) == set(want):
        (k1, w1), (k2, w2) = want.items()
        if values_match(got[k1], w2) and values_match(got[k2], w1):
            return True
    if any((name, k) in FREE_TEXT_ARGUMENTS for k in want):
        want = {k: _FREE_TEXT if (name, k) in FREE_TEXT_ARGUMENTS else w for k, w in want.items()}
    return _object_matches(got, want, DEFAULT_STRINGS)


def _refs(step: dict[str, Any]) -> tuple[str, ...]:
    return tuple(sorted(references(step)))


def _resolve(step: dict[str, Any], results: dict[str, Any]) -> dict[str, Any]:
    return resolve_value(step["arguments"], results, _MISSING)


def _has_missing(value: Any) -> bool:
    if value is _MISSING:
        return True
    if isinstance(value, dict):
        return any(_has_missing(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_missing(v) for v in value)
    return False


_COMPILED: dict[int, tuple[list[dict[str, Any]], dict[str, tuple[str, ...]], dict[str, Any]]] = {}


def _compiled(steps: list[dict[str, Any]]) -> tuple[dict[str, tuple[str, ...]], dict[str, Any]]:
    """(step id -> referenced step ids, step id -> expected result), cached per plan
    object: a question's gold plan does not change while it is scored."""
    entry = _COMPILED.get(id(steps))
    if entry is not None and entry[0] is steps:
        return entry[1], entry[2]
    refs = {step["id"]: _refs(step) for step in steps}
    results = execute_gold_plan(steps).results if any(refs.values()) else {}
    if len(_COMPILED) > 100_000:
        _COMPILED.clear()
    _COMPILED[id(steps)] = (steps, refs, results)
    return refs, results


def _order_violated(gold: list[dict[str, Any]], refs: dict[str, tuple[str, ...]],
                    assigned: dict[str, int], executed: list[Executed]) -> bool:
    """A step assigned to a call that does not run in a later turn than its references."""
    for step in gold:
        sid = step["id"]
        if sid in assigned and refs[sid]:
            turn = executed[assigned[sid]].turn
            if any(r in assigned and executed[assigned[r]].turn >= turn for r in refs[sid]):
                return True
    return False


def match_plan(executed: list[Executed], gold: list[dict[str, Any]],
               rules: str = "evalpipe") -> PlanResult:
    """Compare executed calls with a gold plan (a list of steps, possibly empty);
    arguments compare by the named rule set (RULE_SETS)."""
    if not gold:
        if not executed:
            return PlanResult(True, None, None, None)
        return PlanResult(False, 0.0, None, "extra_step", ["extra_step"])

    refs, expected = _compiled(gold)
    assigned: dict[str, int] = {}  # step id -> executed position
    full: set[str] = set()
    used: set[int] = set()

    def actual_results() -> dict[str, Any]:
        return {sid: executed[pos].result for sid, pos in assigned.items() if executed[pos].ok}

    # 1. full matches
    results = dict(expected)
    for step in gold:
        sid = step["id"]
        step_refs = refs[sid]
        want = _resolve(step, results) if step_refs else step["arguments"]
        dep_turn = max((executed[assigned[r]].turn for r in step_refs if r in assigned),
                       default=-1)
        best = None
        for e in executed:
            if e.position in used or not e.ok or e.name != step["name"]:
                continue
            if arguments_match(e.name, e.arguments, want, rules):
                if e.turn > dep_turn:
                    best = e
                    break
                if best is None:
                    best = e
        if best is not None:
            assigned[sid] = best.position
            full.add(sid)
            used.add(best.position)
            results[sid] = best.result

    if len(full) == len(gold) == len(executed):  # the usual right answer: nothing left over
        if _order_violated(gold, refs, assigned, executed):
            return PlanResult(False, 1.0, 1.0, "order_violation", ["order_violation"],
                              dict(assigned))
        return PlanResult(True, 1.0, 1.0, None, [], dict(assigned))

    # 2. name matches
    by_name: set[str] = set()
    for step in gold:
        if step["id"] in assigned:
            continue
        for e in executed:
            if e.position not in used and e.name == step["name"]:
                assigned[step["id"]] = e.position
                by_name.add(step["id"])
                used.add(e.position)
                break

    # 3. a leftover step and a leftover call of another tool: wrong_tool
    #    (equal arguments first, then in order)
    open_steps = [s for s in gold if s["id"] not in assigned]
    spare = [e for e in executed if e.position not in used]
    wrong_tool: list[tuple[dict[str, Any], Executed]] = []
    results = {**expected, **actual_results()}
    for step in list(open_steps):
        want = _resolve(step, results)
        for e in spare:
            if arguments_match("", e.arguments, want, rules):  # the arguments alone
                wrong_tool.append((step, e))
                spare.remove(e)
                open_steps.remove(step)
                break
    pairs = min(len(open_steps), len(spare))
    wrong_tool += list(zip(open_steps[:pairs], spare[:pairs]))
    open_steps, spare = open_steps[pairs:], spare[pairs:]
    for step, e in wrong_tool:
        assigned[step["id"]] = e.position
        used.add(e.position)

    # 4. name-matched steps consistent with the calls actually assigned to their references
    results = actual_results()
    consistent: set[str] = set()
    for step in gold:
        sid = step["id"]
        if (sid in by_name and refs[sid] and executed[assigned[sid]].ok
                and arguments_match(step["name"], executed[assigned[sid]].arguments,
                                    _resolve(step, results), rules)):
            consistent.add(sid)

    reasons: list[str] = []
    if wrong_tool:
        reasons.append("wrong_tool")
    if by_name - consistent:
        reasons.append("wrong_arguments")
    if open_steps:
        reasons.append("missing_step")
    if spare:
        reasons.append("extra_step")

    if _order_violated(gold, refs, assigned, executed):
        reasons.append("order_violation")
    matched_ids = full | consistent

    reasons = [r for r in REASONS if r in reasons]
    n_matched = len(matched_ids)
    precision = n_matched / len(executed) if executed else None
    recall = n_matched / len(gold)
    exact = not reasons and n_matched == len(gold) == len(executed)
    return PlanResult(exact, precision, recall, reasons[0] if reasons else None, reasons,
                      {sid: assigned[sid] for sid in matched_ids})


# A call that failed inside the tool (not refused for the model's mistake).
TOOL_FAILURES = frozenset({"tool_exception", "timeout", "bad_result"})
MODEL_ERRORS = frozenset({"unknown_tool", "invalid_arguments"})


def recovered_failures(executed: list[Executed]) -> set[int]:
    """Positions of calls the tool failed (timed out, raised, returned `bad_result`) that
    the model then made again, identically (same tool, equal arguments), in a later turn,
    and that succeeded: the tool's hiccup, recovered by a retry. The model's plan is the
    call that ran; the failed attempt is no step of it. A retry with other arguments is
    the model's new plan and recovers nothing; so is a retry that failed again."""
    out = set()
    for e in executed:
        if e.error in TOOL_FAILURES and any(
                later.ok and later.turn > e.turn and later.name == e.name
                and later.arguments == e.arguments for later in executed):
            out.add(e.position)
    return out


def tool_failed(turns: list[TurnRecord], gold: list[dict[str, Any]] | None) -> bool:
    """The tool spoiled the sample, not the model: a call failed (timed out, raised or
    returned `bad_result`), was not recovered by an identical retry that succeeded
    (recovered_failures), and no mistake of the model was visible before it.

    Visible before the failure: a reply that did not parse or named an unknown tool or
    broke a schema, in the failure's turn or earlier; a call that ran before it (in
    order) and that no gold step asks for; the failed call itself when no gold step asks
    for it (a divide by zero, a timeout on a wrong operand). With no gold plan to judge
    by, only a timeout on a well-formed call counts; with an empty plan any call was
    already the mistake."""
    executed = executed_calls(turns)
    recovered = recovered_failures(executed)
    failures = [e for e in executed if e.error in TOOL_FAILURES and e.position not in recovered]
    if not failures or gold == []:
        return False
    failed = failures[0]
    if any(turn.get("parse_errors") for turn in turns[:failed.turn + 1]):
        return False
    if any(e.error in MODEL_ERRORS for e in executed if e.turn <= failed.turn):
        return False
    if gold is None:
        return failed.error == "timeout"
    _, expected = _compiled(gold)

    def asked(call: Executed) -> bool:
        return any(call.name == step["name"] and arguments_match(
            step["name"], call.arguments, _resolve(step, expected)) for step in gold)

    return all(asked(e) for e in executed[:failed.position + 1])
