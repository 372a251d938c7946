"""What a sample cost, and what a single user would wait (pure: records in, numbers out).

Two kinds of figure, kept apart because they answer different questions:
- consumption, in units batching does not change: prompt tokens (and how many of
  them came from the shared-prefix store), completion tokens, turns, and the
  prefill compute attributed to the sample (each batched prefill's time split by
  the tokens each row brought);
- latency under load (`ttft_ms`, `wall_ms`): measured inside the running batch,
  so they include waiting for other rows. The unbatched latency comes from the
  latency probe (`probe_summary`), never from these.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from evalpipe.records import SampleRecord, TurnRecord
from evalpipe.scoring.stats import summary

TIME_FIELDS = ("prefill_compute_ms", "prefill_ms", "ttft_ms", "decode_ms", "wall_ms")


def sample_cost(sample: SampleRecord) -> dict[str, Any]:
    """The `cost` field of a scored sample (docs/scoring.md). A sample with a reply
    from the generation cache has no times: its wall time measured a cache look-up,
    and its recorded reply times were measured in another batch. They are None (left
    out of every mean) and `cached_turns` says why; tokens and turns still count."""
    turns = sample.get("turns") or []
    compute = [t.get("prefill_compute_ms") for t in turns]
    known = [c for c in compute if c is not None]
    cost: dict[str, Any] = {
        "prompt_tokens": sum(t.get("prompt_tokens") or 0 for t in turns),
        "prefix_tokens": sum(t.get("prefix_tokens") or 0 for t in turns),
        "completion_tokens": sum(t.get("completion_tokens") or 0 for t in turns),
        "turns": len(turns),
        "cached_turns": sum(bool(t.get("cached")) for t in turns),
        "prefill_compute_ms": sum(known) if known and len(known) == len(compute) else None,
        "prefill_ms": sum(t.get("prefill_ms") or 0.0 for t in turns),
        "ttft_ms": (turns[0].get("prefill_ms") or 0.0) if turns else None,
        "decode_ms": sum(t.get("decode_ms") or 0.0 for t in turns),
        "wall_ms": sample.get("wall_ms") or 0.0,
    }
    if cost["cached_turns"]:
        cost.update(dict.fromkeys(TIME_FIELDS))
    return cost


def decode_rate(turns: list[TurnRecord]) -> float | None:
    """Tokens per second after the first token, over the turns that decoded any."""
    tokens = sum(max(0, (t.get("completion_tokens") or 0) - 1) for t in turns)
    ms = sum(t.get("decode_ms") or 0.0 for t in turns)
    return tokens / ms * 1000 if ms > 0 and tokens else None


def probe_summary(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per cell, from the latency probe's records (samples re-run one at a time):
    time to first token of the first turn and decode tokens/s, as one user sees them."""
    by_cell: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        if r.get("stop_reason") != "infra_error" and r.get("turns"):
            by_cell[r["cell_id"]].append(r)
    out = {}
    for cell, rows in by_cell.items():
        rates = [decode_rate(r["turns"]) for r in rows]
        out[cell] = {
            "ttft_ms": summary([r["turns"][0].get("prefill_ms") or 0.0 for r in rows]),
            "decode_tps": summary([x for x in rates if x is not None]),
            "prompt_tokens": summary([r["turns"][0].get("prompt_tokens") or 0 for r in rows]),
            "n": len(rows),
        }
    return out
