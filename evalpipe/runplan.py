"""What a run of a config will do, prepared once: its questions, its corpus, its cells
grouped by model, and for each cell with its backend the runtime the engine runs.

`RunPlan.of(config)` selects the questions (every file, suite and limit filters
applied; an id twice is an error) and, when a cell retrieves, reads and chunks the
corpus. `models()` gives the cells of each model, by model id and in the grid's order:
one backend serves them all. `runtime(cell, backend, facts)` makes a cell's
`CellRuntime`: its tools (with the retrieval tool in mode `tool`), its format, its
retrieval, its settings as recorded, and its fingerprint. A run (runner.Run), the
plan shown before a run (dryrun), measure-formats and the public API all start here,
so a cell is prepared one way.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from evalpipe.backends import Backend, ModelEntry
from evalpipe.backends.base import model_identity
from evalpipe.config import Cell, RetrievalSection, RunConfig, stable_hash
from evalpipe.corpus import Chunk, chunk_corpus, corpus_version, load_corpus
from evalpipe.engine import DEFAULT_SYSTEM_PROMPT, CellRuntime
from evalpipe.errors import InputError
from evalpipe.formats import get_format
from evalpipe.questions import Question, load_questions, question_sources
from evalpipe.tools import ToolLimits, build_toolset
from evalpipe.tools.builtin import search_site_tool


def select_questions(config: RunConfig) -> list[Question]:
    """The questions of the run: every file, filtered by suite, `limit` per suite."""
    questions: list[Question] = []
    origin: dict[str, str] = {}
    for source in question_sources(config.sources()):
        for q in load_questions(source, config.question_limits.limits()):
            if q.id in origin:
                raise InputError(f"question id {q.id!r} also in {origin[q.id]}",
                                 file=source.path, field="id",
                                 expected="ids unique across the run's question sets")
            origin[q.id] = source.path
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
    """The run's chunks and their version; each retrieval setting's index is built once
    and shared by the cells that use it."""

    chunks: list[Chunk]
    version: str
    _retrievers: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def read(cls, config: RunConfig) -> Corpus:
        docs = load_corpus(config.corpus or "")
        return cls(chunk_corpus(docs, config.chunking.size, config.chunking.overlap),
                   corpus_version(docs))

    def searcher(self, settings: RetrievalSection) -> Callable[[str, int], list[dict[str, Any]]]:
        """A search function for one retrieval setting; indexes are built once and shared."""
        from evalpipe.retrieval import build_retriever

        key = stable_hash({k: v for k, v in settings.record().items() if k not in ("mode", "k")})
        if key not in self._retrievers:
            self._retrievers[key] = build_retriever(settings, self.chunks)
        retriever = self._retrievers[key]

        def search(query: str, k: int) -> list[dict[str, Any]]:
            return [{"chunk_id": h.chunk.id, "doc": h.chunk.doc, "start": h.chunk.start,
                     "end": h.chunk.end, "rank": h.rank, "score": round(float(h.score), 6),
                     "text": h.chunk.text} for h in retriever.search(query, k)]

        return search


@dataclass(frozen=True)
class ModelCells:
    """The cells of one model, in the grid's order: one backend serves them all, and
    they share its generation session."""

    model: ModelEntry
    cells: list[Cell]


@dataclass
class RunPlan:
    config: RunConfig
    questions: list[Question]
    cells: list[Cell]
    corpus: Corpus | None

    @classmethod
    def of(cls, config: RunConfig, questions: list[Question] | None = None) -> RunPlan:
        """The plan of `config`; `questions`: the run's own snapshot when it is resumed
        (else they are selected from the config's files). Bad input fails here, before
        anything that looks like a run exists."""
        cells = config.cells()
        questions = select_questions(config) if questions is None else questions
        retrieves = config.corpus and any(c.retrieval.on for c in cells)
        return cls(config, questions, cells, Corpus.read(config) if retrieves else None)

    @property
    def seeds(self) -> list[int]:
        """The sampling seed of each repeat (RunConfig.repeat_seeds)."""
        return self.config.repeat_seeds()

    def models(self) -> list[ModelCells]:
        """The cells of each model, by model id (a cell's id starts with it), models in
        the order the grid meets them."""
        groups: dict[str, ModelCells] = {}
        for cell in self.cells:
            groups.setdefault(cell.model.id, ModelCells(cell.model, [])).cells.append(cell)
        return list(groups.values())

    def runtime(self, cell: Cell, backend: Backend, facts: dict[str, Any]) -> CellRuntime:
        """What the engine runs for `cell` on `backend` (whose describe() is `facts`)."""
        config, retrieval = self.config, cell.retrieval
        search = self.corpus.searcher(retrieval) if self.corpus and retrieval.on else None
        k = retrieval.k or config.k
        limits = ToolLimits(**config.tool_limits.model_dump())
        if retrieval.mode == "tool":  # k whole chunks must fit in one search result
            limits.max_result_chars = max(limits.max_result_chars,
                                          k * (config.chunking.size + 200))
        toolset = build_toolset(cell.toolset, custom=config.custom_tools, limits=limits)
        toolset.stub_result = config.schema_tools.result
        if retrieval.mode == "tool":  # agentic RAG: retrieval is one more tool
            if search is None:
                raise InputError("a retrieval tool needs a corpus", field="corpus",
                                 expected="a corpus folder beside retrieval mode 'tool'")
            toolset = toolset.with_tools(search_site_tool(search, k))
        schemas = toolset.schemas()
        settings = {
            **cell.settings(), "tools_offered": toolset.names, "max_turns": config.max_turns,
            "generation": config.generation.to_dict(), "k": k,
            "format_effective": cell.format if (cell.format != "native"
                                                or backend.template_supports_tools) else "hermes",
            # as text, as the manifest writes it, whatever a backend's facts hold
            "dtype": None if facts.get("dtype") is None else str(facts["dtype"]),
        }
        return CellRuntime(
            cell_id=cell.id, fingerprint=self.fingerprint(cell, facts, schemas),
            settings=settings, backend=backend, fmt=get_format(cell.format, tools=schemas),
            toolset=toolset, generation=config.generation, max_turns=config.max_turns,
            system_prompt=config.system_prompt or DEFAULT_SYSTEM_PROMPT,
            final_answer_line=config.final_answer_line,
            retrieve=search if retrieval.mode == "prepend" else None, k=k,
            question_tools=cell.toolset != "none",
            call_only=config.schema_tools.mode == "call_only")

    def fingerprint(self, cell: Cell, facts: dict[str, Any],
                    toolset_schemas: list[dict[str, Any]]) -> str:
        """A hash of everything that decides a cell's outputs."""
        config, corpus = self.config, self.corpus
        return stable_hash({
            # How this machine runs the model decides no output: a run resumed, or compared,
            # where a kernel did not build (in time) is the same cell (backends.base).
            "model": model_identity(facts), "format": cell.format, "toolset": cell.toolset,
            "tools": toolset_schemas, "retrieval": cell.retrieval.record(),
            "corpus": corpus.version if corpus and cell.retrieval.on else None,
            "chunking": config.chunking.model_dump() if cell.retrieval.on else None,
            "generation": config.generation.to_dict(), "max_turns": config.max_turns,
            "system_prompt": config.system_prompt or DEFAULT_SYSTEM_PROMPT,
            # only when set, so the cells of runs made before the setting keep their print
            **({"final_answer_line": True} if config.final_answer_line else {}),
            **({"schema_tools": config.schema_tools.model_dump()}
               if any(q.tools for q in self.questions) else {}),
            "questions": stable_hash([q.to_dict() for q in self.questions]),
        }, n=16)


__all__ = ["Corpus", "ModelCells", "RunPlan", "select_questions"]
