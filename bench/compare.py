"""How bench_peers.py turns runs into a table a reader can check: the alternating
order, medians and ranges, ratios per round, and replies counted against evalpipe's.

Pure functions over plain data (no clock, no model), so tests can check them.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

BASE = "evalpipe"


def alternating(sides: list[str], repeats: int) -> list[tuple[int, str]]:
    """(round, side) in the order they run: every side once per round, rounds one
    after another (A B C A B C ...), so slow drift of the machine hits all sides alike."""
    return [(r, side) for r in range(repeats) for side in sides]


def median_range(values: list[float]) -> tuple[float, float, float]:
    """(median, lowest, highest)."""
    if not values:
        raise ValueError("no values")
    return statistics.median(values), min(values), max(values)


def same_replies(ours: dict[str, list[str]], theirs: dict[str, list[str]],
                 mode: str = "all") -> tuple[int, int]:
    """(identical, compared): questions whose replies are identical to evalpipe's. Mode
    "all": turn for turn over the whole conversation; "first": the first reply only
    (a peer that runs one turn); "last": the final reply only (a peer whose transcript
    keeps only the text around the tool calls it parsed). A question the peer did not
    answer counts as different."""
    if mode not in ("all", "first", "last"):
        raise ValueError(f"unknown mode {mode!r}")
    same = 0
    for qid, mine in ours.items():
        other = theirs.get(qid)
        if not other or not mine:
            continue
        if mode == "all":
            same += mine == other
        else:
            i = 0 if mode == "first" else -1
            same += mine[i] == other[i]
    return same, len(ours)


@dataclass
class Run:
    """One timed run of one row (a system at one setting) in one round."""

    row: str
    round: int
    wall_s: float | None = None  # None: the run failed (error says why)
    error: str | None = None
    questions: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    processed_tokens: int | None = None  # tokens fed to the model (evalpipe only)
    turns: int = 0
    parity: tuple[int, int] | None = None  # (identical, compared) against its reference
    parity_against: str = ""  # whose replies: evalpipe's unless said
    replies: dict[str, list[str]] | None = None  # its own, a later row's reference
    parity_unit: str = "conversations"
    load: tuple[float, float] = (0.0, 0.0)  # 1-minute load average before, after
    threads: str = ""  # who computed: the worker's busy threads and their CPUs
    notes: list[str] = field(default_factory=list)


def best_against_best(runs: list[Run], ours: str, theirs: str) -> str | None:
    """The peer at its best against evalpipe at its best: per round, the fastest of the
    rows named `theirs`... over the fastest of the rows named `ours`... (each system's
    dtypes and settings), as the median of the rounds and its range, with the rows that
    were fastest; None where a round lacks either."""
    per_round: dict[int, dict[str, Run]] = {}
    for r in runs:
        if not r.wall_s:
            continue
        side = ours if r.row.startswith(ours) else theirs if r.row.startswith(theirs) else None
        if side is None:
            continue
        best = per_round.setdefault(r.round, {}).get(side)
        if best is None or r.wall_s < best.wall_s:
            per_round[r.round][side] = r
    pairs = [(b[theirs], b[ours]) for b in per_round.values() if ours in b and theirs in b]
    if not pairs:
        return None
    med, lo, hi = median_range([t.wall_s / o.wall_s for t, o in pairs])
    rows_ours = ", ".join(dict.fromkeys(o.row for _, o in pairs))
    rows_theirs = ", ".join(dict.fromkeys(t.row for t, _ in pairs))
    return (f"{theirs} at its best ({rows_theirs}) over {ours} at its best ({rows_ours}), per "
            f"round: **{med:.2f}x** ({_span(lo, hi, '.2f')})")


def _span(lo: float, hi: float, fmt: str) -> str:
    return format(lo, fmt) if format(lo, fmt) == format(hi, fmt) else \
        f"{format(lo, fmt)}-{format(hi, fmt)}"


def summary(runs: list[Run], ceiling_s_per_token: float | None = None) -> list[dict[str, str]]:
    """One table row per `Run.row`, in first-seen order: median wall and its range,
    the ratio to evalpipe's wall (median over rounds of the per-round ratio, and its
    range), parity, questions/s and tokens/s at the median, load and threads."""
    base = {r.round: r.wall_s for r in runs if r.row == BASE and r.wall_s}
    rows: dict[str, list[Run]] = {}
    for r in runs:
        rows.setdefault(r.row, []).append(r)
    out = []
    for name, rs in rows.items():
        ok = [r for r in rs if r.wall_s]
        errors = sorted({r.error for r in rs if r.error})
        loads = "; ".join(f"{r.load[0]:.1f}->{r.load[1]:.1f}" for r in rs)
        notes = sorted({n for r in rs for n in r.notes} | set(errors))
        row = {"system": name, "runs": f"{len(ok)}/{len(rs)}", "load": loads,
               "threads": "; ".join(dict.fromkeys(r.threads for r in rs if r.threads)),
               "note": "; ".join(notes)}
        if not ok:
            out.append(row | {"wall": "-", "ratio": "-", "parity": "-", "q/s": "-",
                              "tok/s": "-", "ceiling": "-"})
            continue
        med, lo, hi = median_range([r.wall_s for r in ok])
        ratios = [r.wall_s / base[r.round] for r in ok if base.get(r.round)]
        if name == BASE:
            ratio = "1.00x"
        elif ratios:
            rmed, rlo, rhi = median_range(ratios)
            ratio = f"**{rmed:.2f}x** ({_span(rlo, rhi, '.2f')})"
        else:
            ratio = "- (no evalpipe run in the same round)"
        parities = [r.parity for r in ok if r.parity]
        parity = "-" if not parities else \
            f"{_span(min(p[0] for p in parities), max(p[0] for p in parities), 'd')}/" \
            f"{parities[0][1]} {ok[0].parity_unit}" + \
            (f" (against {ok[0].parity_against})" if ok[0].parity_against else "")
        first = min(ok, key=lambda r: abs(r.wall_s - med))
        tokens = first.prompt_tokens + first.completion_tokens
        processed = first.processed_tokens if first.processed_tokens is not None else tokens
        row |= {"wall": f"{med:.1f} ({_span(lo, hi, '.1f')})", "ratio": ratio,
                "parity": parity, "q/s": f"{first.questions / med:.3f}",
                "tok/s": f"{tokens / med:.0f} ({first.prompt_tokens}+{first.completion_tokens})",
                "ceiling": f"{processed * ceiling_s_per_token / first.wall_s:.0%}"
                if ceiling_s_per_token else "-"}
        out.append(row)
    return out


COLUMNS = [("system", "system"), ("runs", "runs ok"), ("wall", "wall s, median (range)"),
           ("ratio", "wall / evalpipe's, median (range)"),
           ("parity", "replies identical to evalpipe's (float32 unless said)"),
           ("q/s", "questions/s"),
           ("tok/s", "tokens/s (prompt+completion tokens)"), ("ceiling", "share of ceiling"),
           ("threads", "threads that computed (cores used: CPUs allowed)"),
           ("load", "load before->after, per run"), ("note", "note")]


def markdown(rows: list[dict[str, str]]) -> str:
    """The rows as a markdown table (pipes in cells escaped)."""
    lines = ["| " + " | ".join(title for _, title in COLUMNS) + " |",
             "|" + "---|" * len(COLUMNS)]
    for row in rows:
        lines.append("| " + " | ".join(row.get(key, "").replace("|", "\\|")
                                       for key, _ in COLUMNS) + " |")
    return "\n".join(lines)
