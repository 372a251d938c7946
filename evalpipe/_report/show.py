"""One question of a run, as the model met it: each turn's exact prompt and raw reply.

`evalpipe show RUN_DIR QUESTION_ID [--cell CELL]` prints this; it is where "why
did the model not call the tool?" starts. Prompts are joined from the blocks the
run stored (evalpipe.prompts), byte for byte what the backend was sent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evalpipe._report.tables import markdown_table
from evalpipe.errors import InputError
from evalpipe.prompts import block_texts, turn_prompt
from evalpipe.records import SampleRecord
from evalpipe.store import RunStore


def find_samples(run_dir: str | Path, question_id: str, cell: str | None = None
                 ) -> tuple[list[SampleRecord], dict[str, str]]:
    """The samples of `question_id` (in one cell, or every cell), and the prompt block
    texts of their cells."""
    store = RunStore(run_dir)
    if not store.samples_path.is_file():
        raise InputError("no samples.jsonl: not a run directory", file=str(store.path))
    samples = store.read_samples()
    cells = sorted({s["cell_id"] for s in samples})
    if cell is not None and cell not in cells:
        raise InputError(f"no cell {cell!r} in this run", file=str(store.samples_path),
                         field="--cell", expected="one of " + ", ".join(cells))
    mine = [s for s in samples if s.get("question_id") == question_id
            and (cell is None or s["cell_id"] == cell)]
    if not mine:
        raise InputError(f"no sample for question {question_id!r}"
                         + (f" in cell {cell!r}" if cell else ""),
                         file=str(store.samples_path), field="question_id",
                         expected="a question id of the run (questions.jsonl)")
    wanted = {s["cell_id"] for s in mine}
    return mine, block_texts(s for s in samples if s["cell_id"] in wanted)


def _text(value: Any) -> str:
    """A recorded field as text, whatever a damaged or older record holds there."""
    if value is None or isinstance(value, str):
        return value or ""
    return json.dumps(value, ensure_ascii=False, default=str)


def _rule(text: str) -> str:
    return f"----- {text} " + "-" * max(0, 72 - len(text))


def render_sample(sample: dict[str, Any], texts: dict[str, str]) -> str:
    """Turn by turn: the prompt exactly as sent, the raw reply, the tool calls run."""
    head = (f"===== cell {sample['cell_id']} · question {sample['question_id']}"
            + (f" · repeat {sample['repeat']}" if sample.get("repeat") else "")
            + f" · {sample.get('stop_reason')}")
    out = [head]
    for t in sample.get("turns") or []:
        prompt = turn_prompt(t, texts)
        tokens = f"{t.get('prompt_tokens')} tokens"
        if t.get("prefix_tokens"):
            tokens += f", {t['prefix_tokens']} from the shared prefix"
        out.append(_rule(f"turn {t['index']} · prompt ({t.get('prompt_chars')} characters, "
                         f"{tokens})"))
        out.append(prompt if prompt is not None else
                   "[prompt not stored: a run from before prompts were kept, or the sample "
                   f"holding a block was removed; hash {t.get('prompt_hash')}]")
        out.append(_rule(f"turn {t['index']} · reply ({t.get('finish_reason')}, "
                         f"{t.get('completion_tokens')} tokens)"))
        out.append(_text(t.get("raw")))
        if t.get("malformed"):
            out.append(f"  malformed reply: {_text(t['malformed'])}")
        for e in t.get("tool_events") or []:
            result = (f"{e.get('error')}: {e.get('error_message')}" if e.get("error")
                      else json.dumps(e.get("result"), ensure_ascii=False, default=str))
            arguments = json.dumps(e.get("arguments"), ensure_ascii=False)
            out.append(f"  tool {e.get('name')}({arguments}) -> {result}")
        for p in t.get("parse_errors") or []:
            out.append(f"  parse error {p.get('kind')}: {p.get('message')}")
    out.append(_rule("final answer"))
    out.append(_text(sample.get("final_answer")))
    if sample.get("error"):
        out.append(f"error: {sample['error']}")
    return "\n".join(out) + "\n"


def _call_text(event: dict[str, Any]) -> str:
    args = event.get("arguments")
    if isinstance(args, dict):
        inner = ", ".join(json.dumps(v, ensure_ascii=False, default=str) for v in args.values())
    else:
        inner = json.dumps(args, ensure_ascii=False, default=str)
    outcome = (event.get("error") or "error") if event.get("error") else \
        json.dumps(event.get("result"), ensure_ascii=False, default=str)
    return f"{event.get('name')}({inner}) → {outcome}"


def calls_made(sample: dict[str, Any], limit: int = 160) -> str:
    """The tool calls a sample ran, in order; a call repeated turn after turn is written
    once with its count ("multiply(1234, 5678) → 7006652 ×5")."""
    runs: list[list[Any]] = []
    for turn in sample.get("turns") or ():
        for event in turn.get("tool_events") or ():
            text = _call_text(event)
            if runs and runs[-1][0] == text:
                runs[-1][1] += 1
            else:
                runs.append([text, 1])
    out = "; ".join(text + (f" ×{n}" if n > 1 else "") for text, n in runs) or "-"
    return out if len(out) <= limit else out[:limit - 1] + "…"


def _one_line(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def calls_table(samples: list[dict[str, Any]], scored: list[dict[str, Any]],
                questions: dict[str, Any], *, cell: str | None = None) -> str:
    """One Markdown row per sample: cell, question, the calls made, the final answer and
    the verdict (category, with its subtype)."""
    verdicts = {(s["cell_id"], s["question_id"], s.get("repeat", 0)): s for s in scored}
    rows = []
    for sample in samples:
        if cell is not None and sample["cell_id"] != cell:
            continue
        key = (sample["cell_id"], sample["question_id"], sample.get("repeat", 0))
        verdict = verdicts.get(key) or {}
        category = verdict.get("category") or "-"
        if verdict.get("subtype"):
            category += f" ({verdict['subtype']})"
        question = questions.get(sample["question_id"])
        text = question.question if question is not None else sample["question_id"]
        rows.append([sample["cell_id"], _one_line(text, 70), calls_made(sample),
                     _one_line(sample.get("final_answer") or "", 80) or "-", category])
    return markdown_table(["cell", "question", "calls made", "answer", "verdict"], rows)
