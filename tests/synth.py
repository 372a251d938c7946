"""Build sample dicts shaped like the engine's, without a model.

For tests, benchmarks and documentation examples:

    q = Question(id="q1", suite="plan", question="Tính (12 + 30) nhân 7.", answer=294,
                 answer_type="number", lang="vi", gold_calls=[...])
    s = make_sample(q, "The answer is 360.",
                    steps=[[call("multiply", {"a": 12, "b": 30}, 360)]])

`steps` lists the tool-calling turns, one list of calls per turn; a final turn
with the answer follows unless `stop_reason` says the loop ended otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from evalpipe.questions import Question
from evalpipe.tools.builtin import TOOLSETS

# The toolsets of tools/builtin.py, plus two shorthands for a cell with retrieval
# mode "tool" (the runner adds search_site to the cell's toolset).
TOOLSET_TOOLS = {name: [t.name for t in TOOLSETS[name]] for name in TOOLSETS}
TOOLSET_TOOLS.update(search=[*TOOLSET_TOOLS["none"], "search_site"],
                     full=[*TOOLSET_TOOLS["math"], "search_site"])


def call(name: str, arguments: Any, result: Any = None, *, error: str | None = None,
         truncated: bool = False, message: str = "") -> dict[str, Any]:
    """One call of a turn: what the model asked for and what the tool answered."""
    return {"name": name, "arguments": arguments, "result": result, "error": error,
            "truncated": truncated, "error_message": message or (error or "")}


def chunk(doc: str, start: int, end: int, rank: int, *, score: float | None = None,
          source: str = "prepend", query_index: int = 0, text: str = "") -> dict[str, Any]:
    return {"chunk_id": f"{doc}:{start}-{end}", "doc": doc, "start": start, "end": end,
            "rank": rank, "score": score if score is not None else 1.0 / rank, "text": text,
            "source": source, "query_index": query_index}


def _turn(index: int, raw: str, **fields: Any) -> dict[str, Any]:
    turn = {
        "index": index, "prompt_hash": f"{index:016x}", "prompt_chars": 500 + 200 * index,
        "raw": raw, "calls": [], "parse_errors": [], "repaired": False,
        "prompt_tokens": 120 + 60 * index, "completion_tokens": 24, "prefill_ms": 12.0,
        "decode_ms": 80.0, "finish_reason": "stop", "cached": False, "tool_events": [],
        "strict_errors": [],
    }
    turn.update(fields)
    return turn


def make_sample(question: Question, final_answer: str = "", *,
                steps: Sequence[list[dict[str, Any]] | dict[str, Any]] = (),
                retrieved: Sequence[dict[str, Any]] = (), stop_reason: str = "answered",
                error: str | None = None, toolset: str = "calculator",
                tools_offered: list[str] | None = None, retrieval_mode: str = "none",
                final_turn: dict[str, Any] | None = None, cell_id: str = "cell-1",
                run_id: str = "run-1", model: str = "tiny", fmt: str = "hermes",
                wall_ms: float = 250.0, max_turns: int = 5) -> dict[str, Any]:
    """A sample dict as the engine writes it (Sample.to_dict()).

    Each entry of `steps` is one generation turn: a list of `call(...)` (the
    calls parsed from it and their tool events), or a dict of Turn fields to
    set directly (parse_errors, strict_errors, repaired, calls, tool_events...).
    """
    offered = TOOLSET_TOOLS.get(toolset, []) if tools_offered is None else tools_offered
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": question.question},
    ]
    turns: list[dict[str, Any]] = []
    for index, spec in enumerate(steps):
        if isinstance(spec, dict):
            fields = {k: v for k, v in spec.items() if k != "raw"}
            turn = _turn(index, spec.get("raw", "<tool_call>"), **fields)
            turns.append(turn)
            messages.append({"role": "assistant", "content": turn["raw"]})
            continue
        calls, events, raw = [], [], []
        for i, c in enumerate(spec):
            cid = f"call_{index}_{i}"
            calls.append({"name": c["name"], "arguments": c["arguments"], "id": cid})
            events.append({"call_id": cid, "name": c["name"], "arguments": c["arguments"],
                           "result": None if c["error"] else c["result"], "error": c["error"],
                           "error_message": c["error_message"], "truncated": c["truncated"],
                           "ms": 0.2})
            raw.append("<tool_call>" + json.dumps({"name": c["name"], "arguments": c["arguments"]},
                                                  ensure_ascii=False) + "</tool_call>")
        turns.append(_turn(index, "\n".join(raw), calls=calls, tool_events=events))
        messages.append({"role": "assistant", "content": "\n".join(raw), "tool_calls": [
            {"id": c["id"], "type": "function",
             "function": {"name": c["name"], "arguments": c["arguments"]}} for c in calls]})
        for e in events:
            content = json.dumps({"error": e["error_message"]}) if e["error"] else json.dumps(
                e["result"], ensure_ascii=False)
            messages.append({"role": "tool", "tool_call_id": e["call_id"], "name": e["name"],
                             "content": content})
    if stop_reason in ("answered", "length"):
        extra = dict(final_turn or {})
        if stop_reason == "length":
            extra.setdefault("finish_reason", "length")
        turns.append(_turn(len(turns), final_answer, **extra))
        messages.append({"role": "assistant", "content": final_answer})
    elif stop_reason == "infra_error":
        turns.append(_turn(len(turns), "", finish_reason="error", completion_tokens=0))
        final_answer = ""
    else:
        final_answer = ""
    return {
        "run_id": run_id, "cell_id": cell_id, "cell_fingerprint": cell_id[:16],
        "question_id": question.id, "suite": question.suite,
        "settings": {"model": model, "format": fmt, "toolset": toolset,
                     "tools_offered": list(offered),
                     "retrieval": {"mode": retrieval_mode, "method": "bm25", "k": 3},
                     "max_turns": max_turns},
        "messages": messages, "turns": turns, "retrieved": list(retrieved),
        "final_answer": final_answer, "reasoning": "", "stop_reason": stop_reason,
        "error": error if error is not None else (
            "backend failed" if stop_reason == "infra_error" else None),
        "wall_ms": wall_ms,
    }
