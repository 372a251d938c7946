"""Scores of a whole run, from its records alone (pure: no files, no model)."""

from __future__ import annotations

from typing import Any

from evalpipe.errors import InputError
from evalpipe.questions import Question
from evalpipe.scoring.aggregate import aggregate
from evalpipe.scoring.score import SCORER_VERSION, score_sample


def score_records(manifest: dict[str, Any], questions: dict[str, Question],
                  samples: list[dict[str, Any]], k: int | None = None,
                  source: str = "samples.jsonl") -> dict[str, Any]:
    """scores.json content: every sample scored, and the per cell x suite aggregates."""
    k = k or int((manifest.get("config") or {}).get("k", 3))
    scored = []
    for s in samples:
        q = questions.get(s["question_id"])
        if q is None:
            raise InputError(f"sample for unknown question {s['question_id']!r}", file=source)
        scored.append(score_sample(s, q, k=k))
    return {"run_id": manifest.get("run_id"), "scorer_version": SCORER_VERSION, "k": k,
            "groups": aggregate(scored), "samples": scored}
