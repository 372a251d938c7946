"""The benchmark workloads, defined once for bench_turns.py and bench_peers.py.

- W1 single-turn: the arithmetic questions, no tools, greedy, 128 new tokens.
- W2 agent loop: arithmetic and plan questions interleaved, hermes + calculator,
  up to 5 turns. The embedded model calls no tool (0 of 64), so on it W2 is one
  generation per question, whatever the system.
- W2f forced-plan loop: W2's questions, but while a question's gold plan has
  steps left, the model's reply is replaced by the plan's next call (hermes
  text, arguments resolved from the real results of the earlier steps); the
  engine parses it and runs the real tool, and the next turn prefills that
  call, the tool result and a new turn header and decodes a reply again. So
  every later turn is real multi-turn work (prefill of tool results, decode)
  on a model that would never call a tool itself; what the model wrote in the
  forced turns is discarded. A plan of k steps gives k + 1 turns.
- W3 RAG prepend: the site_rag questions, BM25 top 3 prepended to the system
  prompt, no tools.
- W4 agent loop on Qwen2.5-Coder-0.5B-Instruct (`qwen2.5-coder-0.5b`): W2's
  questions, hermes + calculator, up to 5 turns. This model calls the
  calculator, so the multi-turn path runs for real: tool results prefilled,
  later turns decoded, on every system that runs the loop.

W1-W3 run the embedded default model (SmolLM2-135M-Instruct); each workload
names its model, and `build(..., model=...)` replaces it (a smoke test of W4's
mechanics on the default model).
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

NAMES = {
    "W1": "single-turn arithmetic (no tools)",
    "W2": "agent loop, hermes + calculator (the model calls no tool: one turn each)",
    "W2f": "forced-plan loop: assistant tool calls replaced by the gold plan's, real tool "
           "results, the model decodes every turn",
    "W3": "RAG prepend, BM25 top 3 (no tools)",
    "W4": "agent loop on the tool-calling 0.5B, hermes + calculator (real multi-turn)",
}
DEFAULT_MODEL = "smollm2-135m"
TOOL_MODEL = "qwen2.5-coder-0.5b"  # Qwen2.5-Coder-0.5B-Instruct: calls the calculator


@dataclass
class Workload:
    name: str
    questions: list
    toolset: str  # evalpipe toolset name ("none": no tools)
    max_new_tokens: int
    max_turns: int
    retrieve: Any = None  # prepend retrieval: query, k -> chunks
    forced: dict[int, list[str]] | None = None  # question index -> forced replies (W2f)
    model: str = DEFAULT_MODEL  # evalpipe model alias

    @property
    def label(self) -> str:
        return f"{self.name} {NAMES[self.name]} [{self.model}]"


def _load(name: str):
    from evalpipe.questions import load_questions

    return load_questions(REPO / "datasets" / name)


def interleaved(n: int) -> list:
    """Arithmetic and plan questions, alternating (bench_engine's set)."""
    sys.path.insert(0, str(REPO / "bench"))
    from bench_engine import bench_questions

    return bench_questions(n)


def bm25_search():
    from evalpipe.corpus import chunk_corpus, load_corpus
    from evalpipe.retrieval import build_retriever

    retriever = build_retriever({"method": "bm25"},
                                chunk_corpus(load_corpus(REPO / "datasets/site"), 800, 0))

    def search(query: str, k: int) -> list[dict[str, Any]]:
        return [{"chunk_id": h.chunk.id, "doc": h.chunk.doc, "start": h.chunk.start,
                 "end": h.chunk.end, "rank": h.rank, "score": float(h.score),
                 "text": h.chunk.text} for h in retriever.search(query, k)]

    return search


def forced_replies(questions, fmt) -> dict[int, list[str]]:
    """Per question index, the gold plan's calls as the format writes them, one per turn,
    arguments resolved from the real results of the earlier steps."""
    from evalpipe.plans import execute_gold_plan, resolve
    from evalpipe.records import ToolCall
    from evalpipe.tools import build_toolset

    tools = build_toolset("calculator")
    out = {}
    for i, q in enumerate(questions):
        steps = q.gold_calls or []
        run = execute_gold_plan(steps, tools)
        if run.failed or run.skipped:  # a plan the calculator cannot run whole
            continue
        results = run.results
        done: dict[str, Any] = {}
        replies = []
        for step in steps:
            call = ToolCall(step["name"], resolve(step["arguments"], done))
            replies.append(fmt.render_call(call))
            done[step["id"]] = results[step["id"]]
        out[i] = replies
    return out


def build(name: str, n: int | None = None, max_new_tokens: int | None = None,
          model: str | None = None) -> Workload:
    w = _build(name, n, max_new_tokens)
    return dataclasses.replace(w, model=model) if model else w


def _build(name: str, n: int | None, max_new_tokens: int | None) -> Workload:
    if name == "W1":
        qs = _load("arithmetic.jsonl")
        return Workload(name, qs[:n] if n else qs, "none", max_new_tokens or 128, 1)
    if name in ("W2", "W2f"):
        from evalpipe.formats import get_format

        qs = interleaved(n or 64)
        forced = forced_replies(qs, get_format("hermes")) if name == "W2f" else None
        return Workload(name, qs, "calculator", max_new_tokens or 128, 5, forced=forced)
    if name == "W3":
        qs = _load("site_rag.jsonl")
        return Workload(name, qs[:n] if n else qs, "none", max_new_tokens or 128, 1,
                        retrieve=bm25_search())
    if name == "W4":
        return Workload(name, interleaved(n or 32), "calculator", max_new_tokens or 128, 5,
                        model=TOOL_MODEL)
    raise SystemExit(f"unknown workload {name!r}: one of {', '.join(NAMES)}")


class ForcedSession:
    """A generation session whose replies, while a conversation's forced list lasts,
    are replaced by the next forced reply (the model still prefilled and decoded)."""

    def __init__(self, inner, forced: dict[int, list[str]]):
        self.inner, self.forced, self.turn = inner, forced, {}

    @property
    def pending(self) -> int:
        return self.inner.pending

    def submit(self, key, prompt: str, group=None) -> None:
        self.inner.submit(key, prompt, group=group)

    def poll(self):
        out = []
        for key, gen in self.inner.poll():
            t = self.turn.get(key, 0)
            self.turn[key] = t + 1
            replies = self.forced.get(key, [])
            if t < len(replies) and gen.finish_reason != "error":
                gen = dataclasses.replace(gen, text=replies[t], tool_calls=None)
            out.append((key, gen))
        return out


def runtime(backend, w: Workload, batch_size: int | None = None):
    """The engine's settings for `w`; `batch_size` None: the default a user's run gets."""
    from evalpipe.backends.base import GenerationSettings
    from evalpipe.engine import CellRuntime
    from evalpipe.formats import get_format
    from evalpipe.tools import build_toolset

    return CellRuntime(
        cell_id=w.name, fingerprint=w.name, settings={}, backend=backend,
        fmt=get_format("hermes"), toolset=build_toolset(w.toolset),
        generation=GenerationSettings(max_new_tokens=w.max_new_tokens,
                                      **({"batch_size": batch_size} if batch_size else {})),
        max_turns=w.max_turns, retrieve=w.retrieve, k=3)


def run_engine(backend, w: Workload, batch_size: int | None = None) -> dict[str, Any]:
    """Wall seconds, samples, token counts, final answers and every turn's raw reply
    (per question id) of one engine run of `w`."""
    import time

    from evalpipe.engine import Engine

    def open_session(b, settings):
        session = b.session(settings)
        return ForcedSession(session, w.forced) if w.forced is not None else session

    samples = []
    t0 = time.perf_counter()
    for batch in Engine(open_session).run(runtime(backend, w, batch_size), w.questions, w.name):
        samples += batch
    wall = time.perf_counter() - t0
    turns = [t for s in samples for t in s.turns]
    return {"wall_s": wall, "samples": samples, "turns": len(turns),
            "prompt_tokens": sum(t.get("prompt_tokens") or 0 for t in turns),
            "completion_tokens": sum(t.get("completion_tokens") or 0 for t in turns),
            "answers": {s.question_id: s.final_answer for s in samples},
            "replies": {s.question_id: [t.get("raw") or "" for t in s.turns] for s in samples}}
