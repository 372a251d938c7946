"""Built-in tools and named toolsets.

Every tool is bounded: numbers are checked by schema, power and fib refuse
inputs whose results would take unbounded time or memory. Being pure, bounded
functions of checked arguments, they run in the run's own process (a call costs
microseconds); the user's own tools run in worker processes (tools/custom.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from evalpipe.registry import Registry
from evalpipe.tools.custom import tool_from_callable
from evalpipe.tools.registry import Tool, ToolLimits, Toolset

MAX_FIB_N = 1000
MAX_POWER_DIGITS = 300


def clean_number(x: float) -> float | int:
    """Integral floats become ints and float noise is rounded away, so that
    divide(10, 2) reads 5 and add(0.1, 0.2) reads 0.3."""
    if isinstance(x, float):
        if not math.isfinite(x):
            raise ValueError("result is not a finite number")
        if x.is_integer() and abs(x) < 2**53:
            return int(x)
        return float(f"{x:.12g}")
    return x


def add(a: float, b: float) -> float:
    return clean_number(a + b)


def subtract(a: float, b: float) -> float:
    return clean_number(a - b)


def multiply(a: float, b: float) -> float:
    return clean_number(a * b)


def divide(a: float, b: float) -> float:
    if b == 0:
        raise ZeroDivisionError("division by zero")
    return clean_number(a / b)


def power(base: float, exponent: float) -> float:
    if base == 0 and exponent < 0:
        raise ZeroDivisionError("zero to a negative power")
    if abs(base) > 1 and abs(exponent) * math.log10(abs(base)) > MAX_POWER_DIGITS:
        raise ValueError(f"result would exceed {MAX_POWER_DIGITS} digits")
    result = base**exponent
    if isinstance(result, complex):  # the value is wrong, not a type: ValueError
        raise ValueError("result is not a real number")  # noqa: TRY004
    return clean_number(result)


def sqrt(x: float) -> float:
    if x < 0:
        raise ValueError("square root of a negative number")
    return clean_number(math.sqrt(x))


def fib(n: int) -> int:
    if n > MAX_FIB_N:
        raise ValueError(f"n must be at most {MAX_FIB_N}")
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def _number_params(*names: str, kind: str = "number") -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {n: {"type": kind} for n in names},
        "required": list(names),
        "additionalProperties": False,
    }


BUILTIN_TOOLS: dict[str, Tool] = {
    t.name: t for t in [
        Tool("add", "Add two numbers: a + b.", _number_params("a", "b"), add),
        Tool("subtract", "Subtract b from a: a - b.", _number_params("a", "b"), subtract),
        Tool("multiply", "Multiply two numbers: a * b.", _number_params("a", "b"), multiply),
        Tool("divide", "Divide a by b: a / b.", _number_params("a", "b"), divide),
        Tool("power", "Raise base to exponent: base ** exponent.",
             _number_params("base", "exponent"), power),
        Tool("sqrt", "Square root of x.", _number_params("x"), sqrt),
        Tool("fib", f"The n-th Fibonacci number (fib(0) = 0, n <= {MAX_FIB_N}).",
             {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0,
                                                       "maximum": MAX_FIB_N}},
              "required": ["n"], "additionalProperties": False}, fib),
    ]
}

CALCULATOR = ["add", "subtract", "multiply", "divide"]

# A toolset is one line here: its name and its tools (a list, or where one lives).
TOOLSETS: Registry[list[Tool]] = Registry("toolset", "toolsets")
TOOLSETS.add("none", [])
TOOLSETS.add("calculator", [BUILTIN_TOOLS[n] for n in CALCULATOR])
TOOLSETS.add("math", [BUILTIN_TOOLS[n] for n in (*CALCULATOR, "power", "sqrt", "fib")])
TOOLSETS.add("question", [])  # only the schema-only tools each question lists in its "tools"

SEARCH_TOOL = "search_site"  # the retrieval tool of cells with retrieval mode `tool`


def search_site_tool(search: Callable[[str, int], list[dict[str, Any]]], k: int) -> Tool:
    """Retrieval offered as a tool (agentic RAG): returns the top-k chunks."""

    def search_site(query: str) -> list[dict[str, Any]]:
        return search(query, k)

    params = {"type": "object", "properties": {"query": {"type": "string", "maxLength": 500}},
              "required": ["query"], "additionalProperties": False}
    return Tool(SEARCH_TOOL, "Search the site's documents; returns the most relevant passages.",
                params, search_site)


def build_toolset(name: str, *, custom: Sequence[str] = (),
                  limits: ToolLimits | None = None) -> Toolset:
    """The tools of a named toolset, plus the user's own functions (search_site is
    added by the runner when a cell's retrieval mode is 'tool')."""
    tools = {tool.name: tool for tool in TOOLSETS[name]}
    for i, spec in enumerate(custom if name != "none" else ()):
        tool = tool_from_callable(spec, field=f"custom_tools[{i}]")
        tools[tool.name] = tool
    return Toolset(tools, limits or ToolLimits())
