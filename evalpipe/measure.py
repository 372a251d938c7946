"""Format validity of one model per format, strict and lenient.

    evalpipe measure-formats [--model smollm2-135m] [--formats hermes,json,xml]
        [--questions datasets/sample/arithmetic.jsonl ...] [--max-new-tokens 96] [--turns 2]
        [--dump replies.json]

Runs each question through the engine with each format (calculator + math
tools) and counts, over every tool-call attempt (a parsed call or a parse
error), how many parsed and validated against the tool's schema: lenient is
what the engine executes; strict re-parses the same raw replies with
lenient=False. A sample is valid when all of its attempts are. Nothing is
written unless --dump is given (the raw replies, for fixtures).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from evalpipe.backends.base import Backend, GenerationSettings
from evalpipe.engine import CellRuntime, Engine
from evalpipe.formats import get_format
from evalpipe.questions import Question
from evalpipe.records import Sample
from evalpipe.tools import Toolset, build_toolset

DEFAULT_QUESTIONS = ["datasets/sample/arithmetic.jsonl", "datasets/sample/plan.jsonl"]


def run_format(backend: Backend, fmt_name: str, questions: list[Question], *,
               toolset: Toolset | None = None, max_new_tokens: int = 96,
               max_turns: int = 2) -> list[Sample]:
    """One cell (this backend x format x toolset), no retrieval."""
    toolset = toolset or build_toolset("math")
    cell = CellRuntime(
        cell_id=f"measure-{fmt_name}", fingerprint="measure",
        settings={"model": backend.model_id, "format": fmt_name, "toolset": "math",
                  "tools_offered": toolset.names, "retrieval": {"mode": "none"}},
        backend=backend, fmt=get_format(fmt_name), toolset=toolset,
        generation=GenerationSettings(max_new_tokens=max_new_tokens, batch_size=16),
        max_turns=max_turns)
    return [s for group in Engine().run(cell, questions, "measure") for s in group]


@dataclass
class Validity:
    samples: int = 0
    samples_attempted: int = 0
    samples_valid: int = 0
    samples_valid_strict: int = 0
    attempts: int = 0
    valid: int = 0
    valid_strict: int = 0
    error_kinds: dict[str, int] = field(default_factory=dict)
    strict_error_kinds: dict[str, int] = field(default_factory=dict)

    def rates(self) -> dict[str, Any]:
        def rate(a, b):
            return round(a / b, 3) if b else None

        return {
            "samples": self.samples, "samples_with_attempts": self.samples_attempted,
            "sample_valid": rate(self.samples_valid, self.samples_attempted),
            "sample_valid_strict": rate(self.samples_valid_strict, self.samples_attempted),
            "attempts": self.attempts, "call_valid": rate(self.valid, self.attempts),
            "call_valid_strict": rate(self.valid_strict, self.attempts),
            "error_kinds": dict(sorted(self.error_kinds.items())),
            "strict_error_kinds": dict(sorted(self.strict_error_kinds.items())),
        }


def _share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}% ({part}/{whole})"


def describe(name: str, v: Validity) -> str:
    """One format's validity in words, saying so when there was nothing to measure."""
    if not v.samples_attempted:
        return (f"{name}: no call attempted in {v.samples} samples: nothing to measure (the "
                "model answered without calling a tool; try more --turns, a larger "
                "--max-new-tokens or another model)")
    errors = ", ".join(f"{k} {n}" for k, n in sorted(v.error_kinds.items())) or "none"
    strict = ", ".join(f"{k} {n}" for k, n in sorted(v.strict_error_kinds.items())) or "none"
    return (f"{name}: {v.samples_attempted} of {v.samples} samples attempted a call "
            f"({v.attempts} attempts). Calls valid: {_share(v.valid, v.attempts)} lenient, "
            f"{_share(v.valid_strict, v.attempts)} strict. Samples with every attempt valid: "
            f"{_share(v.samples_valid, v.samples_attempted)} lenient, "
            f"{_share(v.samples_valid_strict, v.samples_attempted)} strict. Errors: {errors} "
            f"(strict parser: {strict}).")


def validity(samples: list[Sample], fmt_name: str, toolset: Toolset | None = None) -> Validity:
    toolset = toolset or build_toolset("math")
    fmt = get_format(fmt_name)
    fmt.prepare([], toolset.schemas(), False)  # xml learns the schemas
    out = Validity()
    for sample in samples:
        out.samples += 1
        attempts = valid = valid_strict = 0
        for turn in sample.turns:
            for mode in ("lenient", "strict"):
                result = fmt.parse(turn["raw"], lenient=mode == "lenient")
                ok = sum(toolset.check(c) is None for c in result.calls)
                kinds = out.error_kinds if mode == "lenient" else out.strict_error_kinds
                for e in result.errors:
                    kinds[e.kind] = kinds.get(e.kind, 0) + 1
                for c in result.calls:
                    problem = toolset.check(c)
                    if problem:
                        kinds[problem[0]] = kinds.get(problem[0], 0) + 1
                if mode == "lenient":
                    n = len(result.calls) + len(result.errors)
                    attempts += n
                    valid += ok
                else:
                    valid_strict += min(ok, n)
        out.attempts += attempts
        out.valid += valid
        out.valid_strict += valid_strict
        if attempts:
            out.samples_attempted += 1
            out.samples_valid += valid == attempts
            out.samples_valid_strict += valid_strict == attempts
    return out
