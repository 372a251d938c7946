"""Format validity of one model per format, strict and lenient.

    evalpipe measure-formats [--model smollm2-135m] [--formats hermes,json,xml]
        [--questions datasets/sample/arithmetic.jsonl ...] [--max-new-tokens 96] [--turns 2]
        [--dump replies.json]

Runs each question through the engine with each format (calculator + math
tools) and counts, over every tool-call attempt (a parsed call or a parse
error), how many parsed and validated against the tool's schema, by the
scorer's rule (format_valid and format_valid_strict, scoring/score.py): lenient
is what the engine executes; strict is the engine's strict parse of the same
replies. A sample is valid when all of its attempts are. Nothing is written
unless --dump is given (the raw replies, for fixtures).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from evalpipe.backends.base import Backend, GenerationSettings
from evalpipe.engine import CellRuntime, Engine
from evalpipe.formats import get_format
from evalpipe.questions import Question
from evalpipe.records import Sample
from evalpipe.scoring.score import call_stats
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


def validity(samples: list[Sample]) -> Validity:
    """Counts of valid call attempts by the scorer's own rule (scoring.score.call_stats:
    what the engine parsed, leniently and strictly, and what the tools accepted), and of
    the error kinds that made the others invalid."""
    out = Validity()
    for sample in samples:
        record = sample.to_dict()
        turns = record["turns"]
        stats = call_stats(turns, set(record["settings"].get("tools_offered") or ()))
        out.samples += 1
        out.attempts += stats.attempted
        out.valid += stats.valid
        out.valid_strict += stats.valid_strict
        if stats.attempted:
            out.samples_attempted += 1
            out.samples_valid += bool(stats.format_valid)
            out.samples_valid_strict += bool(stats.format_valid_strict)
        for turn in turns:
            refused = [e["error"] for e in turn.get("tool_events") or ()
                       if e.get("error") in ("unknown_tool", "invalid_arguments")]
            for kinds, errors in ((out.error_kinds, turn.get("parse_errors")),
                                  (out.strict_error_kinds, turn.get("strict_errors"))):
                for kind in [e["kind"] for e in errors or ()] + refused:
                    kinds[kind] = kinds.get(kind, 0) + 1
    return out
