"""BFCL items -> evalpipe question records with schema-only tools and gold calls.

Function docs become JSON-Schema tools: BFCL's Python-flavoured types map to
JSON Schema ones (TYPES); "optional" (not JSON Schema) is dropped. Possible
answers become one gold step per expected call, in the gold form of the plan
matcher: one acceptable value is written as itself, several as {"$any": [...]},
and BFCL's "" (the argument may be left out) as "$optional". A literal string
that starts with "$" is written "$$..." so it is not read as a step reference.
Irrelevance items expect no call at all (gold_calls []); a few live ones offer no
function at all (an empty list, valid BFCL data). BFCL's `enum` on an array
parameter lists the values each item may take, so it moves to `items`.
"""

from __future__ import annotations

from typing import Any

from evalpipe.errors import InputError

# BFCL type -> JSON Schema type; None: no type constraint.
TYPES: dict[str, str | None] = {
    "string": "string", "integer": "integer", "float": "number", "number": "number",
    "boolean": "boolean", "array": "array", "tuple": "array", "dict": "object",
    "object": "object", "any": None,
}
CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance",
              "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple",
              "live_irrelevance")
DEFAULT_CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance")
NO_CALL = frozenset({"irrelevance", "live_irrelevance"})
_DROP = frozenset({"optional"})


def schema_of(node: Any, where: str) -> dict[str, Any]:
    """One BFCL parameter description as a JSON Schema."""
    if not isinstance(node, dict):
        raise InputError(f"got {node!r}", field=where, expected="a parameter description object")
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP:
            continue
        if key == "type":
            if value not in TYPES:
                raise InputError(f"unknown type {value!r}", field=f"{where}.type",
                                 expected=" | ".join(TYPES))
            if TYPES[value] is not None:
                out["type"] = TYPES[value]
        elif key == "properties":
            out[key] = {name: schema_of(sub, f"{where}.properties.{name}")
                        for name, sub in value.items()}
        elif key == "items":
            out[key] = schema_of(value, f"{where}.items")
        else:
            out[key] = value
    if out.get("type") == "array" and "enum" in out:
        # BFCL's enum on an array lists the values each item may take (JSON Schema would
        # read it as the values the whole list may take, and refuse every list)
        out["items"] = {**out.get("items", {}), "enum": out.pop("enum")}
    return out


def tool_of(function: Any, where: str) -> dict[str, Any]:
    """A BFCL function doc as an OpenAI-style tool definition."""
    if not (isinstance(function, dict) and isinstance(function.get("name"), str)):
        raise InputError(f"got {function!r}", field=where, expected='{"name", "parameters"}')
    params = schema_of(function.get("parameters") or {"type": "dict", "properties": {}},
                       f"{where}.parameters")
    params.setdefault("properties", {})
    params["additionalProperties"] = False  # BFCL refuses a parameter it does not declare
    return {"type": "function", "function": {
        "name": function["name"], "description": function.get("description", ""),
        "parameters": params}}


def _literal(value: Any, number: bool) -> Any:
    """A value as a gold literal: strings starting with "$" escaped; nested dicts of
    acceptable-value lists (BFCL's form inside dict arguments) turned into gold values;
    with `number` (a "float" parameter) integers written as floats, so that the gold
    says which Python type BFCL expects."""
    if isinstance(value, str):
        return "$" + value if value.startswith("$") else value
    if isinstance(value, dict):
        return {k: gold_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_literal(v, number) for v in value]
    if number and type(value) is int:
        return float(value)
    return value


def gold_value(acceptable: Any, kind: str | None = None) -> Any:
    """BFCL's list of acceptable values for one argument (of BFCL type `kind`) -> a gold
    argument value."""
    number = kind == "float"
    if not isinstance(acceptable, list):  # a bare value: taken as the only one
        return _literal(acceptable, number)
    optional = "" in acceptable
    values = [_literal(v, number) for v in acceptable if v != ""]
    if not values:  # BFCL's [""]: left out, or given as the empty string
        return {"$any": [""], "$optional": True}
    if len(values) == 1 and not optional:
        single = values[0]
        # a lone dict of literal keys would read as a gold-form object; lists and scalars
        # are safe as they are
        return single if not (isinstance(single, dict) and any(k.startswith("$") for k in single)) \
            else {"$any": values}
    out: dict[str, Any] = {"$any": values}
    if optional:
        out["$optional"] = True
    return out


def _param_types(functions: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """function name -> parameter -> BFCL type."""
    out: dict[str, dict[str, str]] = {}
    for f in functions:
        props = (f.get("parameters") or {}).get("properties") or {}
        out[f["name"]] = {k: v["type"] for k, v in props.items()
                          if isinstance(v, dict) and isinstance(v.get("type"), str)}
    return out


def gold_calls(ground_truth: Any, functions: list[dict[str, Any]], where: str
               ) -> list[dict[str, Any]]:
    if not isinstance(ground_truth, list):
        raise InputError(f"got {ground_truth!r}", field=f"{where}.ground_truth",
                         expected="a list of {function name: {argument: [values]}}")
    types = _param_types(functions)
    steps = []
    for i, call in enumerate(ground_truth, start=1):
        if not (isinstance(call, dict) and len(call) == 1):
            raise InputError(f"got {call!r}", field=f"{where}.ground_truth[{i - 1}]",
                             expected="one {function name: arguments} object")
        (name, args), = call.items()
        if not isinstance(args, dict):
            raise InputError(f"got {args!r}", field=f"{where}.ground_truth[{i - 1}].{name}",
                             expected="an object of argument -> acceptable values")
        steps.append({"id": f"s{i}", "name": name,
                      "arguments": {k: gold_value(v, types.get(name, {}).get(k))
                                    for k, v in args.items()}})
    return steps


def convert_item(category: str, item: dict[str, Any], answer: dict[str, Any] | None,
                 where: str) -> dict[str, Any] | None:
    """One BFCL item as an evalpipe question record; None for a prompt evalpipe's
    single user turn cannot hold (a system message or several turns)."""
    turns = item.get("question")
    if not (isinstance(turns, list) and turns and isinstance(turns[0], list) and turns[0]):
        raise InputError(f"got {turns!r}", field=f"{where}.question",
                         expected="[[{role, content}, ...]]")
    if len(turns) != 1 or len(turns[0]) != 1 or turns[0][0].get("role") != "user":
        return None
    functions = item.get("function")
    if not isinstance(functions, list):  # [] is valid: an irrelevance item offering no tool
        raise InputError(f"got {functions!r}", field=f"{where}.function",
                         expected="a list of function docs")
    record = {
        "id": item["id"], "suite": f"bfcl_{category}", "question": turns[0][0]["content"],
        "answer": "", "answer_type": "calls",
        "tools": [tool_of(f, f"{where}.function[{i}]") for i, f in enumerate(functions)],
        "tags": ["bfcl", category],
    }
    if category in NO_CALL:
        record["gold_calls"] = []
    else:
        if answer is None:
            raise InputError(f"no possible answer for {item['id']!r}", field=f"{where}.id",
                             expected="an entry in possible_answer/ with the same id")
        record["gold_calls"] = gold_calls(answer.get("ground_truth"), functions, where)
    return record
