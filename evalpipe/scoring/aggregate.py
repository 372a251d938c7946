"""aggregate: scored samples -> one row per group with rates, intervals, categories, cost."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from evalpipe.scoring.stats import mean_interval, rate, summary

ALL = "all"
PROPORTIONS = ("exact", "exact_strict", "exact_lenient", "format_valid", "format_valid_strict",
               "plan_exact")
RATE_NAMES = PROPORTIONS + ("call_valid", "recall@k", "hit@k", "mrr", "ndcg")
COST_FIELDS = ("prompt_tokens", "completion_tokens", "turns", "ttft_ms", "wall_ms",
               "prefill_ms", "decode_ms")


def _sort_key(key: tuple) -> tuple:
    return tuple((v == ALL, "" if v is None else str(v)) for v in key)


def _group_row(keys: Sequence[str], key: tuple, rows: list[dict[str, Any]],
               mean_method: str, seed: int) -> dict[str, Any]:
    counted = [r for r in rows if not r.get("infra")]
    out: dict[str, Any] = dict(zip(keys, key))
    out["n"] = len(rows)
    out["n_infra"] = len(rows) - len(counted)
    k_values = {r.get("k") for r in counted if r.get("retrieval") is not None}
    out["k"] = k_values.pop() if len(k_values) == 1 else (sorted(k_values) or None)

    rates: dict[str, Any] = {}
    for name in PROPORTIONS:
        values = [r.get(name) for r in counted]
        values = [v for v in values if v is not None]
        rates[name] = rate(sum(1 for v in values if v), len(values))
    attempted = sum(r.get("calls_attempted") or 0 for r in counted)
    rates["call_valid"] = rate(sum(r.get("calls_valid") or 0 for r in counted), attempted)
    retrievals = [r["retrieval"] for r in counted if r.get("retrieval") is not None]
    rates["recall@k"] = mean_interval([x["recall"] for x in retrievals], mean_method, seed)
    rates["hit@k"] = rate(sum(1 for x in retrievals if x["hit"]), len(retrievals))
    rates["mrr"] = mean_interval([x["mrr"] for x in retrievals], mean_method, seed)
    rates["ndcg"] = mean_interval([x["ndcg"] for x in retrievals], mean_method, seed)
    out["rates"] = rates

    categories: dict[str, int] = {}
    subtypes: dict[str, int] = {}
    flags: dict[str, int] = {}
    for r in rows:
        categories[r["category"]] = categories.get(r["category"], 0) + 1
        if r.get("subtype"):
            subtypes[r["subtype"]] = subtypes.get(r["subtype"], 0) + 1
        for f in r.get("flags") or ():
            flags[f] = flags.get(f, 0) + 1
    out["categories"] = dict(sorted(categories.items()))
    out["subtypes"] = dict(sorted(subtypes.items()))
    out["flags"] = dict(sorted(flags.items()))

    cost: dict[str, Any] = {}
    for name in COST_FIELDS:
        cost[name] = summary([c[name] for c in (r["cost"] for r in counted)
                              if c.get(name) is not None])
    cost["total_prompt_tokens"] = sum(r["cost"]["prompt_tokens"] for r in rows)
    cost["total_completion_tokens"] = sum(r["cost"]["completion_tokens"] for r in rows)
    out["cost"] = cost
    return out


def aggregate(scored: Iterable[dict[str, Any]], by: Sequence[str] = ("cell_id", "suite"), *,
              mean_interval_method: str = "t", seed: int = 0) -> list[dict[str, Any]]:
    """One row per group of `by`, plus, when "suite" is a key, a row with suite "all"
    for each combination of the other keys. Rows are sorted by key, "all" last.

    Each row: the keys; n (samples) and n_infra (infra errors, kept out of every
    rate and cost figure but counted in categories); k; rates: name ->
    {"rate", "n", "lo", "hi"} for exact, exact_strict, exact_lenient,
    format_valid, format_valid_strict, plan_exact (Wilson 95%, over the samples
    where the field is not None), call_valid (Wilson over calls), hit@k (Wilson),
    recall@k, mrr, ndcg (means with a t interval, or a seeded bootstrap); categories,
    subtypes and flags: name -> count; cost: name -> {mean, p50, p95, n} and
    token totals."""
    keys = tuple(by)
    groups: dict[tuple, list[dict[str, Any]]] = {}
    roll_up = "suite" in keys
    for row in scored:
        key = tuple(row.get(b) for b in keys)
        groups.setdefault(key, []).append(row)
        if roll_up:
            all_key = tuple(ALL if b == "suite" else row.get(b) for b in keys)
            groups.setdefault(all_key, []).append(row)
    return [_group_row(keys, key, groups[key], mean_interval_method, seed)
            for key in sorted(groups, key=_sort_key)]
