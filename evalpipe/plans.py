"""Gold plans: steps whose arguments may reference earlier results ("$s1")."""

from __future__ import annotations

from typing import Any

from evalpipe.records import ToolCall
from evalpipe.tools.registry import Toolset


def references(step: dict[str, Any]) -> set[str]:
    """The step ids a step depends on."""
    return {v[1:] for v in step["arguments"].values() if isinstance(v, str) and v.startswith("$")}


def resolve(arguments: dict[str, Any], results: dict[str, Any]) -> dict[str, Any]:
    """Replace "$id" references by the results they name."""
    return {k: results[v[1:]] if isinstance(v, str) and v.startswith("$") else v
            for k, v in arguments.items()}


def execute_gold_plan(steps: list[dict[str, Any]], toolset: Toolset) -> dict[str, Any]:
    """Run a gold plan with the real tools; returns step id -> result.

    Raises ValueError naming the step when a tool refuses or fails."""
    results: dict[str, Any] = {}
    for step in steps:
        call = ToolCall(step["name"], resolve(step["arguments"], results), id=step["id"])
        (event,) = toolset.execute([call])
        if event.error:
            raise ValueError(f"step {step['id']} ({step['name']}): {event.error_message}")
        results[step["id"]] = event.result
    return results
