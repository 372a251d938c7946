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
unless --dump is given (the raw replies, for fixtures). `render_table` writes the
results as one Markdown table; a format under which the model never tried to call
a tool says so instead of showing empty rates.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from evalpipe.backends.base import Backend
from evalpipe.config import parse_config
from evalpipe.engine import Engine
from evalpipe.questions import Question
from evalpipe.records import Sample
from evalpipe.runplan import RunPlan
from evalpipe.scoring.score import call_stats

DEFAULT_QUESTIONS = ["datasets/sample/arithmetic.jsonl", "datasets/sample/plan.jsonl"]


def run_format(backend: Backend, fmt_name: str, questions: list[Question], *,
               toolset: str = "math", max_new_tokens: int = 96,
               max_turns: int = 2) -> list[Sample]:
    """One cell (this backend x format x toolset, no retrieval), prepared as a run
    prepares its cells (runplan.RunPlan)."""
    config = parse_config({
        "name": "measure-formats", "questions": ["-"], "models": [{"id": backend.model_id}],
        "formats": [fmt_name], "toolsets": [toolset], "max_turns": max_turns,
        "generation": {"max_new_tokens": max_new_tokens, "batch_size": 16}},
        source="measure-formats")
    plan = RunPlan.of(config, questions)
    [cell] = plan.cells
    runtime = plan.runtime(cell, backend, backend.describe())
    return [s for group in Engine().run(runtime, questions, "measure") for s in group]


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


def _share(part: int, whole: int) -> str:
    return f"{part}/{whole} ({part / whole:.0%})"


def _kinds(kinds: dict[str, int]) -> str:
    return ", ".join(f"{k} {n}" for k, n in sorted(kinds.items(), key=lambda kv: -kv[1])) or "-"


def render_table(rows: list[tuple[str, str, Validity]]) -> str:
    """(model, format, validity) rows as a Markdown table: call-level and sample-level
    validity, lenient (what the engine runs) and strict, and the error kinds seen."""
    header = ["model", "format", "samples with a call attempt", "attempts",
              "calls valid, lenient", "calls valid, strict", "samples valid, lenient",
              "samples valid, strict", "errors (lenient)", "errors (strict)"]
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for model, fmt, v in rows:
        if not v.attempts:
            cells = [f"0/{v.samples}", "0", *["no call attempted"] * 4, "-", "-"]
        else:
            cells = [_share(v.samples_attempted, v.samples), str(v.attempts),
                     _share(v.valid, v.attempts), _share(v.valid_strict, v.attempts),
                     _share(v.samples_valid, v.samples_attempted),
                     _share(v.samples_valid_strict, v.samples_attempted),
                     _kinds(v.error_kinds), _kinds(v.strict_error_kinds)]
        out.append("| " + " | ".join([model, fmt, *cells]) + " |")
    return "\n".join(out) + "\n"
