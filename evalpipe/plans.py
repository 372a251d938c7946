"""Gold plans: the language of a gold step's arguments, and running a plan.

A value in a gold step's "arguments" is one of (docs/scoring.md, "Gold
argument forms"):

- a literal JSON value; inside lists and objects every element is a value again;
- "$s1": the result of the earlier step s1;
- "$$...": a literal string with one leading "$" ("$$20-$30" is "$20-$30");
- {"$any": [v1, v2, ...]}: any listed value (each a value form) is accepted;
- {"$any": [...], "$optional": true}: may be omitted, or given as a listed value;
- {"$optional": true}: may be omitted or given with any value;
- "$strings": "exact" | "text" next to "$any" or "$optional": how strings compare.

An object whose keys start with "$" is a form, never a literal object, so a
typo ("$anny") is an error rather than a silent literal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evalpipe.records import ToolCall
from evalpipe.tools.registry import Toolset

ANY, OPTIONAL, STRINGS = "$any", "$optional", "$strings"
FORM_KEYS = frozenset({ANY, OPTIONAL, STRINGS})
STRING_MODES = ("text", "exact")
DEFAULT_STRINGS = "text"


def is_reference(value: Any) -> bool:
    return isinstance(value, str) and value.startswith("$") and not value.startswith("$$")


def is_form(value: Any) -> bool:
    """An object written in the gold-value language ({"$any": ...}, {"$optional": ...})."""
    return isinstance(value, dict) and any(isinstance(k, str) and k.startswith("$")
                                           for k in value)


def is_optional(value: Any) -> bool:
    return is_form(value) and value.get(OPTIONAL) is True


def _walk_refs(value: Any, out: set[str]) -> None:
    if is_reference(value):
        out.add(value[1:])
    elif isinstance(value, dict):
        for v in (value.get(ANY) or ()) if is_form(value) else value.values():
            _walk_refs(v, out)
    elif isinstance(value, list):
        for v in value:
            _walk_refs(v, out)


def references(step: dict[str, Any]) -> set[str]:
    """The step ids a step depends on (anywhere in its arguments)."""
    out: set[str] = set()
    _walk_refs(step["arguments"], out)
    return out


def resolve_value(value: Any, results: dict[str, Any], missing: Any) -> Any:
    """A gold value with references replaced by results (`missing` when a result is
    not known) and "$$" escapes undone; forms stay forms."""
    if isinstance(value, str):
        if value.startswith("$$"):
            return value[1:]
        if value.startswith("$"):
            return results.get(value[1:], missing)
        return value
    if isinstance(value, list):
        return [resolve_value(v, results, missing) for v in value]
    if isinstance(value, dict):
        if is_form(value):
            out = dict(value)
            if ANY in value:
                out[ANY] = [resolve_value(v, results, missing) for v in value[ANY]]
            return out
        return {k: resolve_value(v, results, missing) for k, v in value.items()}
    return value


_OMIT = object()


def _concrete(value: Any) -> Any:
    """One value a resolved form accepts (its first alternative); _OMIT for an
    optional argument with no alternatives."""
    if is_form(value):
        alternatives = value.get(ANY)
        return _concrete(alternatives[0]) if alternatives else _OMIT
    if isinstance(value, list):
        return [_concrete(v) for v in value]
    if isinstance(value, dict):
        return {k: c for k, c in ((k, _concrete(v)) for k, v in value.items()) if c is not _OMIT}
    return value


def concrete_arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    """Resolved gold arguments as one call the tools can run: the first accepted value
    of each $any, optional arguments without values left out."""
    return _concrete(arguments)


def resolve(arguments: dict[str, Any], results: dict[str, Any]) -> dict[str, Any]:
    """Gold arguments as a call: references replaced by the results they name."""
    return concrete_arguments(resolve_value(arguments, results, None))


def check_value(value: Any, earlier: set[str], where: str, top: bool = True
                ) -> tuple[str, str, str] | None:
    """(field, problem, expected) for the first thing wrong with a gold value; None
    when it is well formed. `earlier`: the step ids a reference may name."""
    if isinstance(value, str):
        if is_reference(value) and value[1:] not in earlier:
            return (where, f"reference {value!r} names no earlier step",
                    'a $ref to a step listed before this one, or "$$..." for a literal "$"')
        return None
    if isinstance(value, list):
        for i, v in enumerate(value):
            problem = check_value(v, earlier, f"{where}[{i}]", top=False)
            if problem:
                return problem
        return None
    if not isinstance(value, dict):
        return None
    if not is_form(value):
        for k, v in value.items():
            problem = check_value(v, earlier, f"{where}.{k}")
            if problem:
                return problem
        return None
    unknown = sorted(set(value) - FORM_KEYS)
    if unknown:
        return (f"{where}.{unknown[0]}", "unknown key in a gold value form",
                '"$any", "$optional", "$strings" (write "$$" for a literal "$")')
    if OPTIONAL in value:
        if value[OPTIONAL] is not True:
            return f"{where}.$optional", f"got {value[OPTIONAL]!r}", "true"
        if not top:
            return (f"{where}.$optional", "an optional value inside a list",
                    "$optional only on an argument or an object member")
    if ANY in value:
        alternatives = value[ANY]
        if not isinstance(alternatives, list) or not alternatives:
            return f"{where}.$any", f"got {alternatives!r}", "a non-empty list of values"
        for i, v in enumerate(alternatives):
            if is_optional(v):
                return (f"{where}.$any[{i}]", "an optional value among alternatives",
                        'a value; put "$optional": true next to "$any"')
            problem = check_value(v, earlier, f"{where}.$any[{i}]", top=False)
            if problem:
                return problem
    elif OPTIONAL not in value:
        return where, "a form with neither $any nor $optional", '"$any": [...] or "$optional": true'
    if STRINGS in value and value[STRINGS] not in STRING_MODES:
        return f"{where}.$strings", f"got {value[STRINGS]!r}", " | ".join(STRING_MODES)
    return None


@dataclass
class GoldRun:
    results: dict[str, Any]  # step id -> what its tool returned
    failed: dict[str, str]  # step id -> why the tool refused or failed it
    skipped: list[str]  # step ids whose tool is not at hand, or that need a failed step


def execute_gold_plan(steps: list[dict[str, Any]], toolset: Toolset | None = None) -> GoldRun:
    """Run a gold plan with the real tools (default: the built-in ones), in order, each
    step with the first accepted value of each $any and its references resolved.

    One policy for every reader: never raise, run what can run, and say what failed.
    A step whose tool is not at hand (search_site, a user's or a question's own tool)
    or that needs a step without a result is skipped. `evalpipe validate` reports a
    failed step as an error of the question file; the scorer checks references against
    the results there are (a broken gold plan is the file's problem, never a reason
    for scoring to stop)."""
    if toolset is None:
        from evalpipe.tools.builtin import BUILTIN_TOOLS

        toolset = Toolset(dict(BUILTIN_TOOLS))
    run = GoldRun({}, {}, [])
    for step in steps:
        if step["name"] not in toolset.tools or not references(step) <= run.results.keys():
            run.skipped.append(step["id"])
            continue
        call = ToolCall(step["name"], resolve(step["arguments"], run.results), id=step["id"])
        (event,) = toolset.execute([call])
        if event.error:
            run.failed[step["id"]] = f"step {step['id']} ({step['name']}): {event.error_message}"
        else:
            run.results[step["id"]] = event.result
    return run
