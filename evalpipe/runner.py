"""A run from config to scores: questions, corpus, cells, engine, store, scoring."""

from __future__ import annotations

import dataclasses
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from evalpipe import parallel
from evalpipe.backends import load_backend
from evalpipe.cache import GenerationCache
from evalpipe.config import Cell, RunConfig, stable_hash
from evalpipe.corpus import chunk_corpus, corpus_version, load_corpus
from evalpipe.engine import DEFAULT_SYSTEM_PROMPT, CellRuntime, Engine
from evalpipe.errors import InfraError, InputError
from evalpipe.formats import get_format
from evalpipe.questions import Question, load_questions, question_files
from evalpipe.records import SCHEMA_VERSION
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
        # only when set, so the cells of runs made before the setting keep their fingerprint
        **({"final_answer_line": True} if config.final_answer_line else {}),
        **({"schema_tools": config.schema_tools} if any(q.tools for q in questions) else {}),
        "questions": stable_hash([q.to_dict() for q in questions]),
    }, n=16)


def execute_run(config: RunConfig, out_root: Path | None = None, *, resume: Path | None = None,
                use_cache: bool = True, echo: Callable[[str], None] = print,
                engine: Engine | None = None) -> Path:
    """Run every cell of the grid and score it; returns the run directory.

    With `resume`, continue a killed run in place: samples already written are
    kept (a torn last line is cut), and only the missing cell x question pairs run.
    """
    rank, world = parallel.rank_world()
    token = parallel.launch_key(config.hash()) if world > 1 else None
    if resume is not None:
        store = RunStore(resume)
        manifest = store.read_json("manifest.json")
        run_id = manifest["run_id"]
    else:
        out = Path(out_root or "outputs")
        run_id = parallel.shared_run_id(out, config.hash(),
                                        lambda: new_run_id(config.name, config.hash()),
                                        rank, world)
        store = RunStore(out / run_id)
        manifest = None
    cells = config.cells()
    corpus = None
    if config.corpus and any(c.retrieval["mode"] != "none" for c in cells):
        docs = load_corpus(config.corpus)
        corpus = Corpus(chunk_corpus(docs, config.chunking["size"], config.chunking["overlap"]),
                        corpus_version(docs))
    cache = GenerationCache() if use_cache else None
    engine = engine or Engine(cache.session if cache else None)
    if rank > 0:  # a helper rank: its share of every cell into its own part, no manifest
        _run_rank(config, store, run_id, rank, world, token, cells, corpus, engine,
                  resumed=manifest is not None)
        if cache is not None:
            cache.close()
        return store.path
    with store:
        if manifest is None:
            questions = select_questions(config)
            manifest = {
                "run_id": run_id, "schema_version": SCHEMA_VERSION, "config": config.to_dict(), "config_source": config.source,
                "config_hash": config.hash(), "started": _now(),
                "versions": package_versions(), "git_commit": git_commit(), "machine": machine(),
                "corpus_version": corpus.version if corpus else None,
                "questions": len(questions), "cells": {},
            }
            store.write_questions(questions)
            done: set[tuple[str, str, int]] = set()
        else:
            questions = list(store.questions().values())
            store.read_samples(repair=True)
            done = parallel.done_pairs(store.path)  # samples.jsonl and any rank's part
            manifest.setdefault("resumed", []).append(_now())
        if world > 1:
            manifest["world_size"] = world
            parallel.repair_part(store.path, rank)
        mine = parallel.shard(questions, rank, world)
        store.write_json("manifest.json", manifest)
        _point_latest(store.path)
        seeds = config.repeat_seeds()
        manifest["repeats"] = {"requested": config.repeats, "seeds": seeds}
        store.write_json("manifest.json", manifest)
        if config.repeats > len(seeds):
            echo(f"repeats: {config.repeats} requested, but decoding is greedy (temperature 0): "
                 "every repeat would give the same replies, so each question runs once; set "
                 "generation.temperature > 0 to sample")
        echo(f"run {run_id}: {len(cells)} cells x {len(questions)} questions "
             + (f"x {len(seeds)} repeats " if len(seeds) > 1 else "") + f"-> {store.path}"
             + (f" (resuming: {len(done)} samples already written)" if done else ""))
        def record_cell(cell: Cell, runtime: CellRuntime, facts: dict) -> None:
            recorded = manifest["cells"].get(cell.id)
            if recorded and recorded["fingerprint"] != runtime.fingerprint:
                raise InputError(
                    f"cell {cell.id} no longer matches the run (model, settings, corpus or "
                    "questions changed since it started); start a new run instead",
                    file=str(store.manifest_path), field="cells")
            manifest["cells"][cell.id] = {"fingerprint": runtime.fingerprint,
                                          "settings": runtime.settings, "model": facts}
            store.write_json("manifest.json", manifest)

        def write(samples: list[dict]) -> None:
            if world > 1:
                parallel.append_part(store.path, rank, samples)
            else:
                store.append_samples(samples)

        _run_cells(config, cells, corpus, engine, questions, mine, done, run_id, write,
                   on_cell=record_cell, progress=True)
        if world > 1:
            parallel.mark_done(store.path, rank, token=token)
            missing = parallel.wait_for_parts(store.path, world, token=token,
                                              timeout=float(os.environ.get(
                                                  "EVALPIPE_PART_TIMEOUT", str(24 * 3600))))
            if missing:
                raise InfraError(f"ranks {missing} did not finish their share of {store.path}; "
                                 "their parts are kept: continue with --resume")
            merged = parallel.merge_parts(store.path, world, cell_order=[c.id for c in cells])
            parallel.forget_run_id(Path(out_root or "outputs"), config.hash())
            echo(f"merged {world} parts: {merged} samples")
        manifest["finished"] = _now()
        if cache is not None:
            manifest["cache"] = {"hits": cache.hits, "misses": cache.misses, "path": str(cache.path)}
            echo(f"generation cache: {cache.hits} replies reused, {cache.misses} generated")
            cache.close()
        store.write_json("manifest.json", manifest)
        score_run(store)
    return store.path


def _run_cells(config: RunConfig, cells: list[Cell], corpus: Corpus | None, engine: Engine,
               questions: list[Question], mine: list[Question],
               done: set[tuple[str, str, int]], run_id: str,
               write: Callable[[list[dict]], None], *,
               on_cell: Callable[[Cell, CellRuntime, dict], None] | None = None,
               progress: bool = False) -> int:
    """Generate every (cell, question, repeat) of `mine` not yet `done`, one model loaded
    at a time, a cell's repeats one after another (each with its own seed); each finished
    group of samples goes to `write`. Returns the count written."""
    count = 0
    seeds = config.repeat_seeds()
    for model in config.models:
        model_cells = [c for c in cells if c.model is model]
        todo = {(c.id, r): [q for q in mine if (c.id, q.id, r) not in done]
                for c in model_cells for r in range(len(seeds))}
        if not any(todo.values()):
            continue
        backend = load_backend(model)
        facts = backend.describe()
        for cell in model_cells:
            runtime = _runtime(cell, backend, facts, config, corpus, questions)
            if on_cell is not None:
                on_cell(cell, runtime, facts)
            for r, seed in enumerate(seeds):
                left = todo[(cell.id, r)]
                if not left:
                    continue
                # A repeat differs from the first only in its seed (and its number).
                repeat = dataclasses.replace(runtime, repeat=r, generation=dataclasses.replace(
                    runtime.generation, seed=seed))
                desc = cell.id if len(seeds) == 1 else f"{cell.id} #{r + 1}/{len(seeds)}"
                with tqdm(total=len(mine), initial=len(mine) - len(left), desc=desc,
                          unit="q", dynamic_ncols=True, disable=not progress) as bar:
                    for samples in engine.run(repeat, left, run_id,
                                              window=max(64, 4 * config.generation.batch_size),
                                              progress=bar.update):
                        write([s.to_dict() for s in samples])
                        count += len(samples)
    return count


def _run_rank(config: RunConfig, store: RunStore, run_id: str, rank: int, world: int,
              token: str | None, cells: list[Cell], corpus: Corpus | None, engine: Engine,
              resumed: bool) -> None:
    """A rank other than 0: its round-robin share of every cell into
    samples.part{rank}.jsonl, then a done marker. Rank 0 writes the manifest and
    questions.jsonl, merges the parts and scores."""
    store.path.mkdir(parents=True, exist_ok=True)
    # The same list rank 0 works from: its snapshot on resume, else the same selection.
    questions = list(store.questions().values()) if resumed else select_questions(config)
    parallel.repair_part(store.path, rank)
    count = _run_cells(config, cells, corpus, engine, questions,
                       parallel.shard(questions, rank, world), parallel.done_pairs(store.path),
                       run_id, lambda samples: parallel.append_part(store.path, rank, samples))
    parallel.mark_done(store.path, rank, count, token=token)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def _point_latest(run_dir: Path) -> None:
    """outputs/latest -> the newest run (a relative symlink, replaced atomically)."""
    run_dir = run_dir.resolve()  # resuming through the pointer itself must not loop it
    link = run_dir.parent / "latest"
    tmp = run_dir.parent / f".latest.{os.getpid()}"
    try:
        if tmp.is_symlink():
            tmp.unlink()
        tmp.symlink_to(run_dir.name)
        os.replace(tmp, link)
    except OSError:
        pass  # a file system without symlinks keeps no pointer; the run is unaffected


def _runtime(cell: Cell, backend, facts: dict, config: RunConfig, corpus: Corpus | None,
             questions: list[Question]) -> CellRuntime:
    retrieval = cell.retrieval
    search = corpus.searcher(retrieval) if corpus and retrieval["mode"] != "none" else None
    k = int(retrieval.get("k", config.k))
    limits = ToolLimits(**config.tool_limits)
    if retrieval["mode"] == "tool":  # k whole chunks must fit in one search result
        limits.max_result_chars = max(limits.max_result_chars,
                                      k * (config.chunking["size"] + 200))
    toolset = build_toolset(cell.toolset, custom=config.custom_tools, limits=limits)
    toolset.stub_result = config.schema_tools["result"]
    if retrieval["mode"] == "tool":  # agentic RAG: retrieval is one more tool
        toolset = toolset.with_tools(search_site_tool(search, k))
    fmt = get_format(cell.format, tools=toolset.schemas())
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
        final_answer_line=config.final_answer_line,
        retrieve=search if retrieval["mode"] == "prepend" else None, k=k,
        question_tools=cell.toolset != "none",
        call_only=config.schema_tools["mode"] == "call_only")


def score_run(store: RunStore, k: int | None = None) -> dict[str, Any]:
    """(Re)compute scores.json and table.md from samples.jsonl and questions.jsonl."""
    from evalpipe.report.tables import score_table
    from evalpipe.scoring.run import score_records

    scores = score_records(store.read_json("manifest.json"), store.questions(),
                           store.read_samples(), k=k, source=str(store.samples_path))
    store.write_json("scores.json", scores)
    store.write_text("table.md", score_table(scores))
    return scores
