"""A small synthetic run directory for report, compare and HTML tests.

Two cells of one model ("tiny-135m"): the baseline without tools or retrieval and
a cell with a calculator and BM25 chunks prepended; four arithmetic questions and
two site_rag questions. Hand-computed figures (see tests/test_report.py):

  baseline: exact arithmetic 1/4, site_rag 1/2, all 2/6; no tool attempts
  tools:    exact arithmetic 3/4, site_rag 1/2, all 4/6; format valid 3/3;
            plan match 2/4; recall@3 site_rag (1 + 0)/2 = 0.5
  cost:     baseline 120 prompt / 24 completion tokens, 100 ms wall per sample;
            tools: 210 / 36 tokens, 250 ms -> ratios 1.75x, 1.5x, 2.5x
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from synth import call, chunk, make_sample

from evalpipe.questions import Question

MODEL = "tiny-135m"
BASE = f"{MODEL}/-/none/no-rag"
TOOLS = f"{MODEL}/hermes/calculator/bm25-prepend"

QUESTIONS = [
    Question(id="a1", suite="arithmetic", question="What is 12 + 30?", answer=42,
             answer_type="number", gold_calls=[{"id": "s1", "name": "add",
                                                "arguments": {"a": 12, "b": 30}}]),
    Question(id="a2", suite="arithmetic", question="What is 5 * 6?", answer=30,
             answer_type="number", gold_calls=[{"id": "s1", "name": "multiply",
                                                "arguments": {"a": 5, "b": 6}}]),
    Question(id="a3", suite="arithmetic", question="What is 7 + 8?", answer=15,
             answer_type="number", gold_calls=[{"id": "s1", "name": "add",
                                                "arguments": {"a": 7, "b": 8}}]),
    Question(id="a4", suite="arithmetic", question="What is 9 * 9?", answer=81,
             answer_type="number", gold_calls=[{"id": "s1", "name": "multiply",
                                                "arguments": {"a": 9, "b": 9}}]),
    Question(id="r1", suite="site_rag", question="Which reverse proxy do we run?",
             answer="Caddy", answer_type="text",
             gold_passages=[{"doc": "proxy.md", "start": 100, "end": 200}]),
    Question(id="r2", suite="site_rag", question="Which database do we use?",
             answer="Postgres", answer_type="text",
             gold_passages=[{"doc": "db.md", "start": 0, "end": 100}]),
]
Q = {q.id: q for q in QUESTIONS}


def settings_of(cell: str) -> dict[str, Any]:
    if cell == BASE:
        return {"model": {"id": MODEL, "backend": "transformers"}, "format": "hermes",
                "toolset": "none", "retrieval": {"mode": "none"}, "tools_offered": [], "k": 3}
    return {"model": {"id": MODEL, "backend": "transformers"}, "format": "hermes",
            "toolset": "calculator", "retrieval": {"mode": "prepend", "method": "bm25", "k": 3},
            "tools_offered": ["add", "subtract", "multiply", "divide"], "k": 3}


def base_sample(qid: str, answer: str, run_id: str = "run-a") -> dict[str, Any]:
    return make_sample(Q[qid], answer, cell_id=BASE, run_id=run_id, model=MODEL,
                       toolset="none", tools_offered=[], wall_ms=100.0)


def tools_sample(qid: str, answer: str, steps=(), retrieved=(), run_id: str = "run-a"
                 ) -> dict[str, Any]:
    return make_sample(Q[qid], answer, steps=list(steps), retrieved=list(retrieved),
                       cell_id=TOOLS, run_id=run_id, model=MODEL, toolset="calculator",
                       retrieval_mode="prepend" if retrieved or qid.startswith("r") else "none",
                       wall_ms=250.0)


def samples_a(run_id: str = "run-a") -> list[dict[str, Any]]:
    gold_r1 = chunk("proxy.md", 90, 210, 1, text="We moved the reverse proxy to Caddy.")
    return [
        base_sample("a1", "The answer is 42.", run_id),
        base_sample("a2", "31", run_id),
        base_sample("a3", "16", run_id),
        base_sample("a4", "80", run_id),
        base_sample("r1", "We use nginx.", run_id),
        base_sample("r2", "We use Postgres.", run_id),
        tools_sample("a1", "42", [[call("add", {"a": 12, "b": 30}, 42)]], run_id=run_id),
        tools_sample("a2", "30", [[call("multiply", {"a": 5, "b": 6}, 30)]], run_id=run_id),
        tools_sample("a3", "16", [[call("add", {"a": 7, "b": 9}, 16)]], run_id=run_id),
        tools_sample("a4", "81", run_id=run_id),
        tools_sample("r1", "Caddy", retrieved=[gold_r1, chunk("misc.md", 0, 50, 2,
                                                              text="Other things.")],
                     run_id=run_id),
        tools_sample("r2", "MySQL", retrieved=[chunk("misc.md", 0, 50, 1, text="Misc."),
                                               chunk("other.md", 0, 80, 2, text="Other.")],
                     run_id=run_id),
    ]


def write_run(path: Path, samples: list[dict[str, Any]], run_id: str = "run-a",
              fingerprints: dict[str, str] | None = None,
              settings: dict[str, dict[str, Any]] | None = None,
              questions: list[Question] | None = None, score: bool = True) -> Path:
    """Write manifest.json, questions.jsonl, samples.jsonl (and scores.json via the
    real scorer when score=True)."""
    from evalpipe.runner import score_run
    from evalpipe.store import RunStore

    path.mkdir(parents=True, exist_ok=True)
    cells = list(dict.fromkeys(s["cell_id"] for s in samples))
    fingerprints = fingerprints or {}
    settings = settings or {}
    manifest = {"run_id": run_id, "config": {"k": 3}, "questions": len(QUESTIONS),
                "cells": {c: {"fingerprint": fingerprints.get(c, "fp-" + c.replace("/", "_")),
                              "settings": settings.get(c, settings_of(c))} for c in cells}}
    (path / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    qs = questions or QUESTIONS
    (path / "questions.jsonl").write_text(
        "".join(json.dumps(q.to_dict()) + "\n" for q in qs), encoding="utf-8")
    (path / "samples.jsonl").write_text(
        "".join(json.dumps(s) + "\n" for s in samples), encoding="utf-8")
    if score:
        score_run(RunStore(path))
    return path


def make_run_a(path: Path) -> Path:
    return write_run(path, samples_a())
