"""A run from config to scores: questions, corpus, cells, engine, store, scoring."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from tqdm.auto import tqdm

from evalpipe.backends import load_backend
from evalpipe.config import Cell, RunConfig, stable_hash
from evalpipe.corpus import chunk_corpus, corpus_version, load_corpus
from evalpipe.engine import DEFAULT_SYSTEM_PROMPT, CellRuntime, Engine
from evalpipe.errors import InputError
from evalpipe.formats import get_format
from evalpipe.questions import Question, load_questions, question_files
from evalpipe.store import RunStore, git_commit, machine, new_run_id, package_versions
from evalpipe.tools import ToolLimits, build_toolset
from evalpipe.tools.builtin import search_site_tool


def select_questions(config: RunConfig) -> list[Question]:
    """The questions of the run: every file, filtered by suite, `limit` per suite."""
    questions: list[Question] = []
    origin: dict[str, str] = {}
    for path in question_files(config.questions):
        for q in load_questions(path):
            if q.id in origin:
                raise InputError(f"question id {q.id!r} also in {origin[q.id]}", file=str(path),
                                 field="id", expected="ids unique across the run's question sets")
            origin[q.id] = str(path)
            questions.append(q)
    if config.suites:
        questions = [q for q in questions if q.suite in config.suites]
    if config.limit:
        per_suite: Counter[str] = Counter()
        kept = []
        for q in questions:
            per_suite[q.suite] += 1
            if per_suite[q.suite] <= config.limit:
                kept.append(q)
        questions = kept
    if not questions:
        raise InputError("no questions left after suite and limit filters", file=config.source,
                         field="suites")
    return questions


@dataclass
class Corpus:
    chunks: list
    version: str

    def __post_init__(self):
        self._retrievers: dict[str, Any] = {}

    def searcher(self, settings: dict[str, Any]) -> Callable[[str, int], list[dict[str, Any]]]:
        """A search function for one retrieval setting; indexes are built once and shared."""
        from evalpipe.retrieval import build_retriever

        key = stable_hash({k: v for k, v in settings.items() if k not in ("mode", "k")})
        if key not in self._retrievers:
            self._retrievers[key] = build_retriever(settings, self.chunks)
        retriever = self._retrievers[key]

        def search(query: str, k: int) -> list[dict[str, Any]]:
            return [{"chunk_id": h.chunk.id, "doc": h.chunk.doc, "start": h.chunk.start,
                     "end": h.chunk.end, "rank": h.rank, "score": round(float(h.score), 6),
                     "text": h.chunk.text} for h in retriever.search(query, k)]

        return search


def fingerprint(cell: Cell, backend_facts: dict, toolset_schemas: list, config: RunConfig,
                corpus: Corpus | None, questions: list[Question]) -> str:
    """A hash of everything that decides a cell's outputs."""
    return stable_hash({
        "model": backend_facts, "format": cell.format, "toolset": cell.toolset,
        "tools": toolset_schemas, "retrieval": cell.retrieval,
        "corpus": corpus.version if corpus and cell.retrieval["mode"] != "none" else None,
        "chunking": config.chunking if cell.retrieval["mode"] != "none" else None,
        "generation": config.generation.to_dict(), "max_turns": config.max_turns,
        "system_prompt": config.system_prompt or DEFAULT_SYSTEM_PROMPT,
        "questions": stable_hash([q.to_dict() for q in questions]),
    }, n=16)


def execute_run(config: RunConfig, out_root: Path, *, echo: Callable[[str], None] = print,
                engine: Engine | None = None) -> Path:
    """Run every cell of the grid and score it; returns the run directory."""
    questions = select_questions(config)
    cells = config.cells()
    corpus = None
    if config.corpus and any(c.retrieval["mode"] != "none" for c in cells):
        docs = load_corpus(config.corpus)
        corpus = Corpus(chunk_corpus(docs, config.chunking["size"], config.chunking["overlap"]),
                        corpus_version(docs))
    run_id = new_run_id(config.name, config.hash())
    store = RunStore(Path(out_root) / run_id)
    engine = engine or Engine()
    with store:
        manifest: dict[str, Any] = {
            "run_id": run_id, "config": config.raw, "config_source": config.source,
            "config_hash": config.hash(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "versions": package_versions(), "git_commit": git_commit(), "machine": machine(),
            "corpus_version": corpus.version if corpus else None,
            "questions": len(questions), "cells": {},
        }
        store.write_questions(questions)
        store.write_json("manifest.json", manifest)
        echo(f"run {run_id}: {len(cells)} cells x {len(questions)} questions -> {store.path}")
        for model in config.models:
            model_cells = [c for c in cells if c.model is model]
            if not model_cells:
                continue
            backend = load_backend(model)
            facts = backend.describe()
            for cell in model_cells:
                runtime = _runtime(cell, backend, facts, config, corpus, questions)
                manifest["cells"][cell.id] = {"fingerprint": runtime.fingerprint,
                                              "settings": runtime.settings}
                store.write_json("manifest.json", manifest)
                with tqdm(total=len(questions), desc=cell.id, unit="q", leave=True) as bar:
                    for samples in engine.run(runtime, questions, run_id, progress=bar.update):
                        store.append_samples(s.to_dict() for s in samples)
        manifest["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        store.write_json("manifest.json", manifest)
        score_run(store)
    return store.path


def _runtime(cell: Cell, backend, facts: dict, config: RunConfig, corpus: Corpus | None,
             questions: list[Question]) -> CellRuntime:
    retrieval = cell.retrieval
    search = corpus.searcher(retrieval) if corpus and retrieval["mode"] != "none" else None
    k = int(retrieval.get("k", config.k))
    toolset = build_toolset(cell.toolset, custom=config.custom_tools,
                            limits=ToolLimits(**config.tool_limits))
    if retrieval["mode"] == "tool":  # agentic RAG: retrieval is one more tool
        toolset = toolset.with_tools(search_site_tool(search, k))
    fmt = get_format(cell.format)
    settings = {
        **cell.settings(), "tools_offered": toolset.names, "max_turns": config.max_turns,
        "generation": config.generation.to_dict(), "k": k,
        "format_effective": cell.format if (cell.format != "native"
                                            or backend.template_supports_tools) else "hermes",
        "dtype": facts.get("dtype"),
    }
    return CellRuntime(
        cell_id=cell.id,
        fingerprint=fingerprint(cell, facts, toolset.schemas(), config, corpus, questions),
        settings=settings, backend=backend, fmt=fmt, toolset=toolset,
        generation=config.generation, max_turns=config.max_turns,
        system_prompt=config.system_prompt or DEFAULT_SYSTEM_PROMPT,
        retrieve=search if retrieval["mode"] == "prepend" else None, k=k)


def score_run(store: RunStore, k: int | None = None) -> dict[str, Any]:
    """(Re)compute scores.json and table.md from samples.jsonl and questions.jsonl."""
    from evalpipe.report.tables import score_table
    from evalpipe.scoring import SCORER_VERSION, aggregate, score_sample

    questions = store.questions()
    samples = store.read_samples()
    manifest = store.read_json("manifest.json")
    k = k or int((manifest.get("config") or {}).get("k", 3))
    scored = []
    for s in samples:
        q = questions.get(s["question_id"])
        if q is None:
            raise InputError(f"sample for unknown question {s['question_id']!r}",
                             file=str(store.samples_path))
        scored.append(score_sample(s, q, k=k))
    scores = {"run_id": manifest["run_id"], "scorer_version": SCORER_VERSION, "k": k,
              "groups": aggregate(scored), "samples": scored}
    store.write_json("scores.json", scores)
    store.write_text("table.md", score_table(scores))
    return scores
