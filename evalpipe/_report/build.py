"""Report data: the numbers behind every table and plot, as plain JSON-able dicts.

Renderers (render.py, html.py, plots.py) only format what is built here, so
every output format shows the same figures.
"""

from __future__ import annotations

from typing import Any

from evalpipe._report.load import (
    RunData,
    baseline_cells,
    cell_facets,
    model_engine,
    model_parameters,
    run_facts,
)
from evalpipe._report.tables import CATEGORY_ORDER
from evalpipe.scoring.cost import probe_summary
from evalpipe.scoring.stats import wilson

# (key in group["rates"], label, is a proportion); recall@k is a mean of per-question recalls
MAIN_METRICS = [
    ("exact", "exact match", True),
    ("format_valid_strict", "format valid (strict)", True),
    ("format_valid", "format valid (lenient)", True),
    ("plan_exact", "plan match", True),  # over questions whose gold plan is not empty
    ("no_unneeded_call", "no unneeded call", True),  # over questions whose plan is empty
    ("recall@k", "recall@k", False),
]
ALL_RATES = ["exact", "exact_strict", "exact_lenient", "format_valid", "format_valid_strict",
             "call_valid", "plan_exact", "no_unneeded_call", "recall@k", "hit@k", "mrr", "ndcg"]
# Consumption (batching-independent), then latency as one user sees it (the latency probe,
# probe_*), then latency inside the running batch ("under load"); docs/reports.md.
COST_FIELDS = [("prompt_tokens", "prompt tokens"), ("prefix_tokens", "of which shared prefix"),
               ("completion_tokens", "completion tokens"), ("turns", "turns"),
               ("prefill_compute_ms", "prefill compute ms"),
               ("probe_ttft_ms", "time to first token ms (unbatched)"),
               ("probe_decode_tps", "decode tokens/s (unbatched)"),
               ("ttft_ms", "time to first token ms (under load)"),
               ("wall_ms", "wall ms (under load)")]
FACETS = ("model", "format", "toolset", "retrieval_mode", "retrieval_method")
RATIO_FIELDS = ["prompt_tokens", "completion_tokens", "prefill_compute_ms", "probe_ttft_ms",
                "ttft_ms", "wall_ms"]


def metric_label(key: str, k: int) -> str:
    for name, label, _ in MAIN_METRICS:
        if name == key:
            return label.replace("@k", f"@{k}")
    return key.replace("@k", f"@{k}")


def _rates(group: dict[str, Any]) -> dict[str, Any]:
    """The rates of a group; tolerates flat groups (rates at the top level)."""
    rates = group.get("rates")
    if isinstance(rates, dict):
        return rates
    return {k: v for k, v in group.items() if isinstance(v, dict) and "rate" in v}


def suites_of(run: RunData) -> list[str]:
    seen: list[str] = []
    for g in run.scores["groups"]:
        if g["suite"] != "all" and g["suite"] not in seen:
            seen.append(g["suite"])
    return sorted(seen) + ["all"]


def build_report(run: RunData) -> dict[str, Any]:
    """{run_id, run, k, suites, cells, accuracy, categories, cost, repeats, audit}
    (see docs/reports.md)."""
    k = run.k
    cells = run.cells()
    groups: dict[tuple[str, str], dict[str, Any]] = {
        (g["cell_id"], g["suite"]): dict(g) for g in run.scores["groups"]}
    suites = suites_of(run)
    bases = baseline_cells(run)

    cell_rows = []
    for c in cells:
        params, source = model_parameters(run, c)
        cell_rows.append({"cell_id": c, **cell_facets(run, c), "parameters": params,
                          "parameters_source": source, **model_engine(run, c),
                          "baseline": bases.get(c),
                          "fingerprint": run.cell_info(c).fingerprint})

    # model, format, toolset and retrieval beside each row's cell id, so tables and
    # exports group by them without parsing the id
    facet_of = {r["cell_id"]: {k: r[k] for k in FACETS} for r in cell_rows}

    accuracy = []
    for c in cells:
        for s in suites:
            g = groups.get((c, s))
            if g is None:
                continue
            rates = _rates(g)
            accuracy.append({"cell_id": c, **facet_of[c], "suite": s, "n": g.get("n"),
                             "n_infra": g.get("n_infra", 0),
                             "n_tool_failure": g.get("n_tool_failure", 0),
                             "n_scorer_error": g.get("n_scorer_error", 0),
                             "metrics": {m: rates.get(m) for m in ALL_RATES if m in rates}})

    present = set()
    for c in cells:
        g = groups.get((c, "all"))
        if g:
            present |= {cat for cat, n in g.get("categories", {}).items() if n}
    order = [c for c in CATEGORY_ORDER if c in present] + sorted(present - set(CATEGORY_ORDER))
    categories = []
    for c in cells:
        g = groups.get((c, "all"))
        if g is None:
            continue
        n = g.get("n") or 0
        counts = {cat: int(g.get("categories", {}).get(cat, 0)) for cat in order}
        shares = {}
        for cat, cnt in counts.items():
            lo, hi = wilson(cnt, n)
            shares[cat] = {"rate": cnt / n if n else None, "n": n, "lo": lo, "hi": hi,
                           "count": cnt}
        categories.append({"cell_id": c, **facet_of[c], "n": n, "counts": counts, "shares": shares,
                           "subtypes": g.get("subtypes", {}), "flags": g.get("flags", {})})

    probe = probe_summary(run.probe)

    def cost_fields(cell: str) -> dict[str, Any]:
        gc = (groups.get((cell, "all")) or {}).get("cost", {})
        pc = probe.get(cell) or {}
        return {f: pc.get(f[len("probe_"):]) if f.startswith("probe_") else gc.get(f)
                for f, _ in COST_FIELDS}

    cost = []
    for c in cells:
        g = groups.get((c, "all"))
        if g is None:
            continue
        fields = cost_fields(c)
        row = {"cell_id": c, **facet_of[c], "baseline": bases.get(c), "n": g.get("n"),
               "cached": (g.get("cost") or {}).get("cached_samples", 0),
               "probe_n": (probe.get(c) or {}).get("n", 0), "fields": fields, "ratios": {}}
        base_cell = bases.get(c)
        base = cost_fields(base_cell) if base_cell else {}
        for f in RATIO_FIELDS:
            mine = (fields.get(f) or {}).get("mean")
            theirs = (base.get(f) or {}).get("mean")
            row["ratios"][f] = (mine / theirs) if (mine is not None and theirs) else None
        cost.append(row)

    # pass@k, pass^k, flips and the noise floor of each cell (scoring/repeats.py)
    repeats = [{"cell_id": c, **groups[(c, "all")]["repeats"]} for c in cells
               if (groups.get((c, "all")) or {}).get("repeats")]

    facts = run_facts(run.manifest)
    facts["models"] = list(dict.fromkeys([*facts["models"],
                                          *(c["model"] for c in cell_rows if c["model"])]))
    return {"run_id": run.run_id, "run": facts, "k": k,
            "scorer_version": run.scores.get("scorer_version"), "rescored": run.rescored,
            "suites": suites, "cells": cell_rows,
            "category_order": order, "accuracy": accuracy, "categories": categories,
            "cost": cost, "repeats": repeats, "audit": run.audit,
            "unscored": run.scores.get("unscored") or [],
            "verdicts": run.scores.get("verdicts") or {}}
