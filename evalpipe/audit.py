"""The determinism audit: do a run's replies survive another batch shape or dtype?

`audit_run` takes up to N recorded turns per cell (a seeded choice), and sends
each turn's exact stored prompt (evalpipe.prompts) to the cell's model again,
with the turn's own generation settings and seed, under these conditions:

  batch 1              one prompt at a time, the run's dtype
  batched              the chosen turns of the model together, the run's batch size
  batch 1 <dtype>      one at a time in the other dtype (float32 <-> bfloat16),
                       where the backend has a dtype (transformers)

Per cell and condition it counts the replies identical to the recorded ones and
the identical verdicts: the calls parsed from the reply (name and arguments), the
kinds of parse error, or for an answer its exact match against the gold. The
result goes to the run directory as audit.json, which reports show.
"""

from __future__ import annotations

import dataclasses
import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evalpipe.backends import model_entry
from evalpipe.backends.base import GenerationSettings
from evalpipe.backends.replay import ReplayModel
from evalpipe.errors import InputError
from evalpipe.formats import get_format
from evalpipe.prompts import block_texts, turn_prompt
from evalpipe.records import SampleRecord
from evalpipe.scoring.answers.match import match_answer
from evalpipe.scoring.score import gold_for
from evalpipe.scoring.stats import rate
from evalpipe.store import RunStore

OTHER_DTYPE = {"float32": "bfloat16", "bfloat16": "float32", "float16": "float32"}


@dataclasses.dataclass
class _Turn:
    cell_id: str
    prompt: str
    raw: str  # the recorded reply
    settings: GenerationSettings  # the turn's own, its repeat's seed included
    fmt: Any
    gold: Any

    def verdict(self, text: str) -> str:
        return verdict(self.fmt, text, self.gold)


def verdict(fmt, text: str, gold) -> str:
    """What a reply decides, as a comparable string: calls, unreadable calls, or the
    answer's exact match."""
    parsed = fmt.parse(text, lenient=True)
    if parsed.calls:
        return json.dumps(["calls", [[c.name, c.arguments] for c in parsed.calls]],
                          sort_keys=True, default=str)
    if parsed.errors:
        return json.dumps(["unreadable", sorted({e.kind for e in parsed.errors})])
    return json.dumps(["answer", match_answer(parsed.content, gold).exact])


def _settings(sample: SampleRecord) -> GenerationSettings:
    gen = dict((sample.get("settings") or {}).get("generation") or {})
    settings = GenerationSettings(**{k: v for k, v in gen.items()
                                     if k in GenerationSettings.model_fields})
    seed = sample.get("seed")
    if seed is not None:  # the repeat's own seed
        settings = settings.model_copy(update={"seed": int(seed)})
    return settings


def choose_turns(samples: list[SampleRecord], questions, per_cell: int,
                 seed: int = 0) -> tuple[dict[str, list[_Turn]], int]:
    """Up to `per_cell` recorded turns of each cell, chosen at random with `seed`;
    and how many turns had no stored prompt."""
    texts = block_texts(samples)
    by_cell: dict[str, list[_Turn]] = {}
    missing = 0
    for s in samples:
        q = questions.get(s["question_id"])
        settings = s.get("settings") or {}
        # xml reads argument types from the tool schemas; parsing both replies the same
        # way without them keeps the comparison fair
        fmt = get_format(settings.get("format_effective") or settings.get("format") or "hermes")
        for t in s.get("turns") or []:
            if t.get("finish_reason") == "error" or q is None:
                continue
            prompt = turn_prompt(t, texts)
            if prompt is None:
                missing += 1
                continue
            by_cell.setdefault(s["cell_id"], []).append(_Turn(
                s["cell_id"], prompt, t.get("raw") or "", _settings(s), fmt, gold_for(q)))
    rng = random.Random(seed)
    chosen = {c: rng.sample(turns, min(per_cell, len(turns))) for c, turns in by_cell.items()}
    return chosen, missing


def _generate(backend, turns: list[_Turn], batch: int | None) -> list[str]:
    """The replies to `turns`: one call per turn with batch=1, else one call per set of
    settings at the run's batch size."""
    out: dict[int, str] = {}
    if batch == 1:
        for i, t in enumerate(turns):
            (gen,) = backend.generate([t.prompt], t.settings.model_copy(update={"batch_size": 1}))
            out[i] = gen.text
    else:
        groups: dict[GenerationSettings, list[int]] = {}
        for i, t in enumerate(turns):
            groups.setdefault(t.settings, []).append(i)
        for settings, idx in groups.items():
            gens = backend.generate([turns[i].prompt for i in idx], settings)
            out.update({i: g.text for i, g in zip(idx, gens)})
    return [out[i] for i in range(len(turns))]


def audit_run(run_dir: str | Path, sample: int = 8, seed: int = 0,
              echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Generate the chosen turns again under each condition; write and return audit.json."""
    store = RunStore(run_dir)
    manifest = store.read_manifest()
    samples = store.read_samples()
    if not samples:
        raise InputError("the run has no samples to audit", file=str(store.samples_path))
    chosen, missing = choose_turns(samples, store.questions(), sample, seed)
    if not chosen:
        raise InputError("no recorded turn has its prompt stored (runs made before prompt "
                         "storage cannot be audited); run it again", file=str(store.path))
    skipped = [f"{missing} turns without a stored prompt were left out"] if missing else []
    model_of = {s["cell_id"]: (s.get("settings") or {}).get("model") for s in samples}
    by_model: dict[str, list[str]] = {}
    for cell in chosen:
        by_model.setdefault(json.dumps(model_of[cell], sort_keys=True), []).append(cell)

    conditions: list[dict[str, Any]] = []
    results: dict[str, dict[str, Any]] = {c: {} for c in chosen}

    def record(name: str, batch: int | None, dtype: Any, turns: list[_Turn],
               replies: list[str]) -> None:
        if not any(c["name"] == name for c in conditions):
            conditions.append({"name": name, "batch_size": batch or "run's", "dtype": dtype})
        for cell in dict.fromkeys(t.cell_id for t in turns):
            pairs = [(t, r) for t, r in zip(turns, replies) if t.cell_id == cell]
            results[cell][name] = {
                "identical_replies": rate(sum(t.raw == r for t, r in pairs), len(pairs)),
                "identical_verdicts": rate(sum(t.verdict(t.raw) == t.verdict(r)
                                               for t, r in pairs), len(pairs))}

    for key, cells in by_model.items():
        recorded = json.loads(key)
        model = model_entry(recorded) if isinstance(recorded, dict) else None
        if model is None or isinstance(model, ReplayModel):
            skipped.append(f"{cells[0]}: a replay model answers from its recording; "
                           "nothing to audit")
            continue
        turns = [t for c in cells for t in chosen[c]]
        backend = model.load()
        dtype = backend.describe().get("dtype")
        echo(f"audit: {len(turns)} turns of {len(cells)} cells of {model.id} ({dtype})")
        record("batch 1", 1, dtype, turns, _generate(backend, turns, 1))
        record("batched", None, dtype, turns, _generate(backend, turns, None))
        other = OTHER_DTYPE.get(str(dtype)) if "dtype" in type(model).model_fields else None
        if other is None:
            skipped.append(f"{model.id}: the backend has no dtype to change")
            continue
        del backend  # one model in memory at a time
        record(f"batch 1 {other}", 1, other, turns,
               _generate(model.model_copy(update={"dtype": other}).load(), turns, 1))
    audit = {
        "run_id": manifest.run_id, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "sample": sample, "seed": seed, "turns": sum(len(v) for v in chosen.values()),
        "conditions": conditions,
        "cells": [{"cell_id": c, "turns": len(chosen[c]), "results": results[c]}
                  for c in chosen],
        "skipped": skipped,
    }
    store.write_json("audit.json", audit)
    return audit
