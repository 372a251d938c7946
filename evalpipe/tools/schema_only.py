"""Schema-only tools: offered to the model, never executed.

A tool defined only by its JSON schema (a question's own "tools", BFCL's
functions) is parsed, validated and matched like any other, but nothing runs:
its call gets a fixed stub result, or, in call-only mode, the conversation ends
after the first assistant turn and the calls are all that is scored.
"""

from __future__ import annotations

from typing import Any

import jsonschema

from evalpipe.tools.registry import Tool


def _function(definition: Any) -> Any:
    """The function part of an OpenAI-style definition, or the definition itself."""
    if isinstance(definition, dict) and isinstance(definition.get("function"), dict):
        return definition["function"]
    return definition


def definition_problem(definition: Any) -> str | None:
    """Why a tool definition cannot be offered; None when it can."""
    fn = _function(definition)
    if not isinstance(fn, dict):
        return f"got {definition!r}"
    if not isinstance(fn.get("name"), str) or not fn["name"]:
        return "missing tool name"
    params = fn.get("parameters", {"type": "object", "properties": {}})
    if not isinstance(params, dict):
        return f"tool {fn['name']!r}: parameters is {type(params).__name__}"
    try:
        jsonschema.Draft202012Validator.check_schema(params)
    except jsonschema.SchemaError as exc:
        where = ".".join(str(p) for p in exc.path) or "parameters"
        return f"tool {fn['name']!r}: {where} is not a JSON Schema ({exc.message})"
    if not isinstance(fn.get("description", ""), str):
        return f"tool {fn['name']!r}: description is not a string"
    return None


def schema_tool(definition: dict[str, Any]) -> Tool:
    """A Tool that has a schema and no implementation (check definition_problem first)."""
    fn = _function(definition)
    params = fn.get("parameters", {"type": "object", "properties": {}})
    return Tool(fn["name"], fn.get("description", ""), params, fn=None)
