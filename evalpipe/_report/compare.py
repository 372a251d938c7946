"""Paired comparison of two runs and the regression gate.

Samples are paired by cell (matched on the cell fingerprint, else on the cell id
with a warning) and question id. The question is the unit: with repeats, a
question's score in a run is the mean over its repeats. Per metric: the
difference B - A of the paired means, a seeded percentile bootstrap 95% interval
that resamples questions (clusters: a question's repeats, and in the pooled row
its cells, stay together), so the interval carries repeat variance; for binary
metrics without repeats, McNemar's exact test (a binomial test on the discordant
pairs). The noise floor is the smallest difference the two runs' sizes and
spreads could detect (scoring.stats.detectable_difference).

The gate: a metric regresses when the drop is larger than the threshold AND the
whole interval lies below zero: diff < -threshold and hi < 0. Before that, the gate
asks whether there is anything to judge (`not_compared`): a comparison with no
matched cell, grids that differ, fewer than MIN_PAIRS paired questions, or a run
whose matched cells are mostly infrastructure errors cannot vouch for "no regression".
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from evalpipe._report.load import RunData
from evalpipe.errors import InputError
from evalpipe.questions import Question
from evalpipe.records import ScoredSample
from evalpipe.scoring.stats import Z80, Z95, cluster_bootstrap, detectable_difference

METRICS = ("exact", "format_valid", "plan_exact", "recall@k")
BINARY = {"exact", "format_valid", "plan_exact"}
POOLED = "(all matched cells)"

# The fewest paired questions the gate judges: below this, the noise floor of a binary
# metric at its widest spread (50% right in both runs) is over 50 points, so even a
# drop from every question right to half of them right would be missed more often than
# not (docs/reports.md). (z.975 + z.80)^2 * (0.25 + 0.25) / 0.5^2 = 15.7 -> 16.
WIDEST_FLOOR = 0.5
MIN_PAIRS = math.ceil((Z95 + Z80) ** 2 * (0.25 + 0.25) / WIDEST_FLOOR ** 2)
MOSTLY = 0.5  # a run whose matched cells are more than half infra errors is not judged


class CompareRefused(InputError):
    """--strict and the runs' cells are not the same experiment. `comparison` holds what
    could be computed anyway (every cell paired as without --strict), for the report."""

    def __init__(self, comparison: Comparison):
        self.comparison = comparison
        super().__init__("--strict: cells are not the same experiment: "
                         + " | ".join(comparison.refused))


# -- statistics --------------------------------------------------------------------------------

def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value: binomial test of b successes in b + c discordant
    pairs at p = 0.5 (b: right in A, wrong in B; c: wrong in A, right in B)."""
    if b + c == 0:
        return 1.0
    from scipy.stats import binomtest

    return float(binomtest(b, b + c, 0.5).pvalue)


def paired_bootstrap(a: Any, b: Any, resamples: int = 2000, seed: int = 0
                     ) -> tuple[float, float] | None:
    """95% interval of mean(b - a) over pairs (the pairs are resampled)."""
    d = np.asarray(b, dtype=float) - np.asarray(a, dtype=float)
    return cluster_bootstrap(d, np.ones_like(d), resamples, seed)


# -- results -----------------------------------------------------------------------------------

@dataclass
class MetricDiff:
    metric: str
    n: int
    a: float | None
    b: float | None
    diff: float | None
    lo: float | None
    hi: float | None
    p_mcnemar: float | None = None
    a_only: int | None = None  # right in A, wrong in B (binary metrics)
    b_only: int | None = None  # wrong in A, right in B
    regression: bool = False
    improvement: bool = False
    noise_floor: float | None = None  # smallest difference detectable at this size


@dataclass
class CellComparison:
    a_cell: str
    b_cell: str
    matched_by: str  # fingerprint | cell_id | pooled
    n_pairs: int
    n_infra: int
    metrics: list[MetricDiff]
    right_to_wrong: list[str] = field(default_factory=list)
    wrong_to_right: list[str] = field(default_factory=list)
    category_moves: list[tuple[str, str, int]] = field(default_factory=list)
    unchanged_categories: int = 0
    # exact match per suite (shown for reading; never gated: small n, many checks)
    by_suite: list[tuple[str, MetricDiff]] = field(default_factory=list)


@dataclass
class Comparison:
    run_a: str
    run_b: str
    path_a: str
    path_b: str
    k: int
    threshold: float
    resamples: int
    seed: int
    warnings: list[str]
    cells: list[CellComparison]
    pooled: CellComparison | None
    questions_shared: int
    questions_only_a: list[str]
    questions_only_b: list[str]
    questions_changed: list[str]
    repeats_a: int = 1
    repeats_b: int = 1
    # Why the gate cannot judge these runs, most basic reason first; [] when it can.
    not_compared: list[str] = field(default_factory=list)
    # Why --strict refuses these runs (not the same experiment); [] when it does not. The
    # cells are then paired as without --strict, so the report shows what changed.
    refused: list[str] = field(default_factory=list)

    @property
    def comparable(self) -> bool:
        return not self.not_compared

    @property
    def regressions(self) -> list[tuple[str, MetricDiff]]:
        rows = list(self.cells) + ([self.pooled] if self.pooled else [])
        return [(c.b_cell if c.matched_by != "pooled" else POOLED, m)
                for c in rows for m in c.metrics if m.regression]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["regressions"] = [{"cell": c, "metric": m.metric, "diff": m.diff, "lo": m.lo,
                             "hi": m.hi} for c, m in self.regressions]
        d["verdict"] = summary_line(self)
        return d


# -- matching ----------------------------------------------------------------------------------

def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict) and v:
            out.update(_flatten(v, key))
        else:
            out[key] = v
    return out


def settings_diff(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """'key: A -> B' for every setting that differs (nested keys dotted)."""
    fa, fb = _flatten(a or {}), _flatten(b or {})
    out = []
    for key in sorted(set(fa) | set(fb)):
        va, vb = fa.get(key, "<absent>"), fb.get(key, "<absent>")
        if va != vb:
            out.append(f"{key}: {va!r} -> {vb!r}")
    return out


def served_change(a: Any, b: Any) -> str:
    """What differs between two runs' records of the model their server ran (manifest
    cells[...]["served"]); "" when both match or either run did not record one."""
    if not isinstance(a, dict) or not isinstance(b, dict) or "unknown" in a or "unknown" in b:
        return ""
    diff = settings_diff(a, b)
    if any(d.startswith("probe:") for d in diff):
        diff = [d if not d.startswith("probe:") else
                "the reply to the probe differs" for d in diff]
    return "; ".join(diff)


def match_cells(a: RunData, b: RunData, strict: bool = False
                ) -> tuple[list[tuple[str, str, str]], list[str], list[str]]:
    """[(a_cell, b_cell, how)], warnings, and with strict what makes the runs not the
    same experiment. A cell pairs with the B cell of the same fingerprint; failing that,
    with the B cell of the same id (a warning names the settings that differ; with
    strict, a reason to refuse the comparison instead)."""
    warnings: list[str] = []
    b_by_fp: dict[str, str] = {}
    for c in b.cells():
        fp = b.cell_info(c).fingerprint
        if fp:
            b_by_fp.setdefault(fp, c)
    b_cells = set(b.cells())
    used: set[str] = set()
    matches = []
    refused: list[str] = []
    for c in a.cells():
        fp = a.cell_info(c).fingerprint
        if fp and fp in b_by_fp and b_by_fp[fp] not in used:
            other = b_by_fp[fp]
            if other != c:
                warnings.append(f"cell {c!r} (A) matched {other!r} (B) by fingerprint {fp}")
            matches.append((c, other, "fingerprint"))
            used.add(other)
        elif c in b_cells and c not in used:
            diff = settings_diff(a.cell_info(c).settings_dict(),
                                 b.cell_info(c).settings_dict())
            fp_b = b.cell_info(c).fingerprint
            what = ("; ".join(diff) if diff else
                    "settings are identical, so something else in the fingerprint changed: "
                    "model weights or config, tool schemas, corpus, chunking, system prompt "
                    "or the question set")
            if fp is None or fp_b is None:
                what = ("no fingerprint recorded in " + ("A and B" if fp is None and fp_b is None
                                                         else "A" if fp is None else "B")
                        + (f"; settings differ: {'; '.join(diff)}" if diff else ""))
                msg = f"cell {c!r}: matched by cell id; {what}"
            else:
                msg = (f"cell {c!r}: fingerprints differ ({fp} vs {fp_b}); matched by cell id; "
                       f"{what}")
            (refused if strict else warnings).append(msg)
            matches.append((c, c, "cell_id"))
            used.add(c)
        else:
            warnings.append(f"cell {c!r} is only in A; not compared")
    for c in b.cells():
        if c not in used:
            warnings.append(f"cell {c!r} is only in B; not compared")
    for ca, cb, _ in matches:  # the fingerprint leaves out what the server says it runs
        changed = served_change(a.cell_info(ca).served, b.cell_info(cb).served)
        if changed:
            msg = f"cell {cb!r}: the served model changed ({changed})"
            (refused if strict else warnings).append(msg)
    return matches, warnings, refused


def _question_sets(a: RunData, b: RunData) -> tuple[list[str], list[str], list[str], list[str]]:
    # without questions.jsonl, the ids of the scored samples (and no text to compare)
    qa: dict[str, Question | None] = {**a.questions} or {
        s["question_id"]: None for s in a.scores["samples"]}
    qb: dict[str, Question | None] = {**b.questions} or {
        s["question_id"]: None for s in b.scores["samples"]}
    shared = [q for q in qa if q in qb]
    changed = [q for q in shared if (x := qa[q]) is not None and (y := qb[q]) is not None
               and x.to_dict() != y.to_dict()]
    only_a = [q for q in qa if q not in qb]
    only_b = [q for q in qb if q not in qa]
    return [q for q in shared if q not in changed], only_a, only_b, changed


def _value(s: Mapping[str, Any], metric: str) -> float | None:
    if metric == "recall@k":
        r = s.get("retrieval")
        return None if r is None else float(r["recall"])
    v = s.get(metric)
    return None if v is None else float(bool(v))


# -- the comparison ----------------------------------------------------------------------------

def _mean_value(samples: Sequence[Mapping[str, Any]], metric: str) -> float | None:
    """A question's score in one run: the mean over its repeats that have a value."""
    values = [v for v in (_value(s, metric) for s in samples) if v is not None]
    return sum(values) / len(values) if values else None


Pair = tuple[str, list[ScoredSample], list[ScoredSample]]  # question id, its repeats in A, in B


def _metric_diffs(pairs: list[Pair], threshold: float, resamples: int,
                  seed: int, metrics: tuple[str, ...] = METRICS) -> list[MetricDiff]:
    out = []
    single = all(len(la) == 1 and len(lb) == 1 for _, la, lb in pairs)
    for metric in metrics:
        per_q: dict[str, list[float]] = {}
        va, vb = [], []
        for qid, la, lb in pairs:
            xa, xb = _mean_value(la, metric), _mean_value(lb, metric)
            if xa is None or xb is None:
                continue
            va.append(xa)
            vb.append(xb)
            per_q.setdefault(qid, []).append(xb - xa)
        n = len(va)
        if n == 0:
            out.append(MetricDiff(metric, 0, None, None, None, None, None))
            continue
        a_mean, b_mean = float(np.mean(va)), float(np.mean(vb))
        diff = b_mean - a_mean
        sums = np.array([sum(v) for v in per_q.values()])
        counts = np.array([len(v) for v in per_q.values()])
        ci = cluster_bootstrap(sums, counts, resamples, seed)
        lo, hi = ci if ci else (None, None)
        md = MetricDiff(metric, n, a_mean, b_mean, diff, lo, hi,
                        noise_floor=detectable_difference(va, vb))
        if metric in BINARY and single:  # McNemar pairs single verdicts, not repeats
            arr_a, arr_b = np.array(va) > 0.5, np.array(vb) > 0.5
            md.a_only = int(np.sum(arr_a & ~arr_b))
            md.b_only = int(np.sum(~arr_a & arr_b))
            md.p_mcnemar = mcnemar_exact(md.a_only, md.b_only)
        md.regression = bool(hi is not None and diff < -threshold and hi < 0)
        md.improvement = bool(lo is not None and diff > threshold and lo > 0)
        out.append(md)
    return out


def _cell_comparison(a_cell: str, b_cell: str, how: str, pairs: list[Pair],
                     n_infra: int, threshold: float, resamples: int, seed: int
                     ) -> CellComparison:
    cc = CellComparison(a_cell, b_cell, how, len(pairs), n_infra,
                        _metric_diffs(pairs, threshold, resamples, seed))
    suites = sorted({la[0].get("suite") or "" for _, la, _ in pairs})
    if len(suites) > 1:
        for suite in suites:
            sub = [p for p in pairs if (p[1][0].get("suite") or "") == suite]
            md = _metric_diffs(sub, threshold, resamples, seed, metrics=("exact",))[0]
            md.regression = md.improvement = False
            cc.by_suite.append((suite, md))
    moves: Counter = Counter()
    for qid, la, lb in pairs:
        label = qid if how != "pooled" else f"{lb[0]['cell_id']}:{qid}"
        # with repeats a question is right when most of its repeats are
        right_a = (_mean_value(la, "exact") or 0) > 0.5
        right_b = (_mean_value(lb, "exact") or 0) > 0.5
        if right_a and not right_b:
            cc.right_to_wrong.append(label)
        elif not right_a and right_b:
            cc.wrong_to_right.append(label)
        for sa, sb in zip(la, lb):  # repeat i of A against repeat i of B
            if sa.get("category") != sb.get("category"):
                moves[(sa.get("category"), sb.get("category"))] += 1
            else:
                cc.unchanged_categories += 1
    cc.category_moves = [(f, t, n) for (f, t), n in
                         sorted(moves.items(), key=lambda kv: (-kv[1], kv[0]))]
    return cc


def compare_runs(a: RunData, b: RunData, *, threshold: float = 0.02, strict: bool = False,
                 resamples: int = 2000, seed: int = 0) -> Comparison:
    matches, warnings, refused = match_cells(a, b, strict)
    shared, only_a, only_b, changed = _question_sets(a, b)
    if only_a or only_b or changed:
        warnings.append(
            f"question sets differ: {len(shared)} compared, {len(only_a)} only in A, "
            f"{len(only_b)} only in B, {len(changed)} with the same id but different content "
            "(left out)")
    if a.k != b.k:
        warnings.append(f"retrieval cut-off differs: k={a.k} in A, k={b.k} in B")
    if a.scores.get("scorer_version") != b.scores.get("scorer_version"):
        warnings.append(f"scorer versions differ ({a.scores.get('scorer_version')} vs "
                        f"{b.scores.get('scorer_version')}); re-score both with `evalpipe "
                        "score` for a like-for-like comparison")
    sa_all, sb_all = a.scored_by_question(), b.scored_by_question()
    cells = []
    pooled_pairs: list[Pair] = []
    pooled_infra = 0
    for ca, cb, how in matches:
        pairs, infra = [], 0
        for qid in shared:
            la, lb = sa_all.get((ca, qid)), sb_all.get((cb, qid))
            if la is None or lb is None:
                continue
            kept_a = [s for s in la if not s.get("infra")]
            kept_b = [s for s in lb if not s.get("infra")]
            infra += max(len(la) - len(kept_a), len(lb) - len(kept_b))
            if kept_a and kept_b:
                pairs.append((qid, kept_a, kept_b))
        if infra:
            warnings.append(f"cell {cb!r}: {infra} pair(s) left out for infrastructure errors")
        cells.append(_cell_comparison(ca, cb, how, pairs, infra, threshold, resamples, seed))
        pooled_pairs += pairs
        pooled_infra += infra
    pooled = None
    if len(cells) > 1:
        pooled = _cell_comparison(POOLED, POOLED, "pooled", pooled_pairs, pooled_infra,
                                  threshold, resamples, seed)
    compared = len({qid for qid, _, _ in pooled_pairs})
    return Comparison(a.run_id, b.run_id, str(a.path), str(b.path), a.k, threshold, resamples,
                      seed, warnings, cells, pooled, len(shared), only_a, only_b, changed,
                      repeats_a=a.repeats, repeats_b=b.repeats,
                      not_compared=_not_compared(a, b, matches, shared, compared),
                      refused=refused)


def _not_compared(a: RunData, b: RunData, matches: list[tuple[str, str, str]],
                  shared: list[str], compared: int) -> list[str]:
    """Why the gate cannot judge runs A and B, most basic reason first ([] if it can):
    nothing to pair, grids that differ, a matched cell without samples, a run whose
    matched cells are mostly infrastructure errors, too few paired questions."""
    reasons = []
    mine = {"A": {ca for ca, _, _ in matches}, "B": {cb for _, cb, _ in matches}}
    if not matches:
        reasons.append(f"no cell of B matches a cell of A (A has {_ids(a.cells(), 5) or 'none'}; "
                       f"B has {_ids(b.cells(), 5) or 'none'})")
    else:
        alone = [f"only in {name}: {_ids(missing, 5)}" for name, run in (("A", a), ("B", b))
                 if (missing := [c for c in run.cells() if c not in mine[name]])]
        if alone:
            reasons.append("the grids differ (cells " + "; ".join(alone) + ")")
    if not shared:
        reasons.append("the runs share no question")
    for name, run in (("A", a), ("B", b)):
        samples = [s for s in run.scores.get("samples", []) if s["cell_id"] in mine[name]]
        empty = sorted(mine[name] - {s["cell_id"] for s in samples})
        if empty:
            reasons.append(f"matched cell(s) without samples in {name}: {_ids(empty, 5)}")
        infra = sum(bool(s.get("infra")) for s in samples)
        if samples and infra > MOSTLY * len(samples):
            reasons.append(f"{infra} of {len(samples)} samples of {name} in the matched cells are "
                           f"infrastructure errors (the backend failed): fix it, then `evalpipe "
                           f"run --resume {run.path} --retry-infra`")
    if matches and shared and compared < MIN_PAIRS:
        reasons.append(f"only {compared} question(s) were paired; the gate needs at least "
                       f"{MIN_PAIRS} (with fewer, even a 50-point drop is missed more often "
                       "than not)")
    return reasons


def cost_changes(cmp: Comparison, a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """Per matched cell, each cost field's mean in A and in B and their ratio B / A, from
    the two runs' report data (build.build_report). Means only: costs are not gated."""
    from evalpipe._report.build import COST_FIELDS

    cost_a = {r["cell_id"]: r["fields"] for r in a["cost"]}
    cost_b = {r["cell_id"]: r["fields"] for r in b["cost"]}
    out = []
    for cc in cmp.cells:
        fa, fb = cost_a.get(cc.a_cell) or {}, cost_b.get(cc.b_cell) or {}
        rows = []
        for name, label in COST_FIELDS:
            ma = (fa.get(name) or {}).get("mean")
            mb = (fb.get(name) or {}).get("mean")
            if ma is None and mb is None:
                continue
            rows.append({"field": name, "label": label, "a": ma, "b": mb,
                         "ratio": mb / ma if ma and mb is not None else None})
        out.append({"a_cell": cc.a_cell, "b_cell": cc.b_cell, "fields": rows})
    return out


# -- rendering ---------------------------------------------------------------------------------

def _pct(x: float | None, signed: bool = False, scale: float = 100.0) -> str:
    if x is None:
        return "-"
    return f"{scale * x:+.1f}" if signed else f"{scale * x:.1f}"


def _metric_name(metric: str, k: int) -> str:
    return metric.replace("@k", f"@{k}")


def _verdict(m: MetricDiff) -> str:
    return "REGRESSION" if m.regression else ("improved" if m.improvement else "")


def _p(m: MetricDiff) -> str:
    return "-" if m.p_mcnemar is None else f"{m.p_mcnemar:.3g}"


def metric_rows(cc: CellComparison, k: int) -> list[list[str]]:
    rows = []
    named = []
    for m in cc.metrics:
        named.append((_metric_name(m.metric, k), m, _verdict(m)))
        if m.metric == "exact":  # its per-suite split right below it
            named += [(f"exact [{suite}]", sm, "not gated") for suite, sm in cc.by_suite]
    for name, m, verdict in named:
        if not m.n:
            continue
        ci = f"[{_pct(m.lo, True)}, {_pct(m.hi, True)}]"
        flips = "-" if m.a_only is None else f"{m.a_only}/{m.b_only}"
        rows.append([name, str(m.n), _pct(m.a), _pct(m.b), _pct(m.diff, True), ci,
                     _pct(m.noise_floor), flips, _p(m), verdict])
    return rows


HEADER = ["metric", "n", "A %", "B %", "diff pts", "95% CI", "noise floor", "lost/gained",
          "McNemar p", "verdict"]


@dataclass
class GateEntry:
    """What the gate made of one metric of one matched cell (or of the pooled row)."""

    cell: str  # the cell's title: its id, "A -> B" when renamed, or POOLED
    metric: str  # as shown: exact, format_valid, plan_exact, recall@3
    status: str  # passed | improved | regressed | no pairs | not compared | refused
    delta: str  # the difference in a line: A, B, diff and interval over n pairs
    reason: str  # why it is not passed ("" when passed or improved)
    figures: list[str]  # HEADER's columns after the metric's name ("-" where none)


def gate_entries(cmp: Comparison) -> list[GateEntry]:
    """One entry per matched cell (then the pooled row) and gated metric, in the order
    of the report: what a CI system shows as one test each (JUnit XML, step summary). A
    refused or not compared comparison gives every entry that status and the reason,
    beside the figures it could compute."""
    gate = summary_line(cmp).removeprefix("verdict: ")
    out = []
    for cc in cmp.cells + ([cmp.pooled] if cmp.pooled else []):
        title = (POOLED if cc.matched_by == "pooled" else cc.b_cell if cc.a_cell == cc.b_cell
                 else f"{cc.a_cell} -> {cc.b_cell}")
        for m in cc.metrics:
            name = _metric_name(m.metric, cmp.k)
            ci = f"[{_pct(m.lo, True)}, {_pct(m.hi, True)}]" if m.n else "-"
            flips = "-" if m.a_only is None else f"{m.a_only}/{m.b_only}"
            figures = [str(m.n), _pct(m.a), _pct(m.b), _pct(m.diff, True), ci,
                       _pct(m.noise_floor), flips, _p(m)]
            delta = (f"A {_pct(m.a)}% -> B {_pct(m.b)}%: {_pct(m.diff, True)} pts, 95% CI {ci}, "
                     f"{m.n} pairs" if m.n else "no pair where this metric applies")
            if cmp.refused:
                status, reason = "refused", gate
            elif cmp.not_compared:
                status, reason = "not compared", gate
            elif not m.n:
                status, reason = "no pairs", delta
            elif m.regression:
                status = "regressed"
                reason = (f"regression: the drop is over {100 * cmp.threshold:.1f} pts and the "
                          "whole 95% interval is below zero")
            else:
                status, reason = ("improved" if m.improvement else "passed"), ""
            out.append(GateEntry(title, name, status, delta, reason, figures))
    return out


def _unit_line(cmp: Comparison) -> str:
    """How the questions were resampled, and the noise floor's meaning."""
    if cmp.repeats_a == 1 and cmp.repeats_b == 1:
        unit = "one sample per question in each run"
    else:
        unit = (f"repeats: {cmp.repeats_a} in A, {cmp.repeats_b} in B; the question is the "
                "unit (cluster bootstrap over questions, repeats inside)")
    return (f"{unit}; noise floor: the smallest difference (pts) detectable at this size "
            "(5% two-sided, 80% power)")


def _ids(ids: list[str], limit: int = 30) -> str:
    more = f" ... (+{len(ids) - limit} more)" if len(ids) > limit else ""
    return ", ".join(ids[:limit]) + more


def render_text(cmp: Comparison) -> str:
    out = [summary_line(cmp), f"A: {cmp.run_a} ({cmp.path_a})", f"B: {cmp.run_b} ({cmp.path_b})",
           (f"paired over {cmp.questions_shared} shared questions; bootstrap {cmp.resamples} "
            f"resamples, seed {cmp.seed}; gate: diff < -{100 * cmp.threshold:.1f} pts and "
            "upper 95% bound < 0"), _unit_line(cmp)]
    for w in cmp.warnings:
        out.append(f"warning: {w}")
    for cc in cmp.cells + ([cmp.pooled] if cmp.pooled else []):
        title = cc.b_cell if cc.a_cell == cc.b_cell else f"{cc.a_cell} -> {cc.b_cell}"
        out.append("")
        out.append(f"== {title}  [{cc.matched_by}; {cc.n_pairs} pairs"
                   + (f", {cc.n_infra} infra left out" if cc.n_infra else "") + "]")
        rows = metric_rows(cc, cmp.k)
        widths = [max(len(r[i]) for r in [HEADER, *rows]) for i in range(len(HEADER))]
        for r in [HEADER, *rows]:
            out.append("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        out.append(f"  right -> wrong ({len(cc.right_to_wrong)}): {_ids(cc.right_to_wrong)}")
        out.append(f"  wrong -> right ({len(cc.wrong_to_right)}): {_ids(cc.wrong_to_right)}")
        if cc.category_moves:
            out.append(f"  category moves ({cc.unchanged_categories} unchanged):")
            for f, t, n in cc.category_moves:
                out.append(f"    {f} -> {t}: {n}")
    out.append("")
    out.append(summary_line(cmp))
    return "\n".join(out) + "\n"


def summary_line(cmp: Comparison) -> str:
    """The verdict in one line: refused (--strict), not compared, a regression, or none."""
    regs = cmp.regressions
    if cmp.refused:
        return ("verdict: REFUSED (--strict): not the same experiment: "
                + "; ".join(cmp.refused))
    if cmp.not_compared:
        return "verdict: NOT COMPARED: " + "; ".join(cmp.not_compared)
    if not regs:
        return "verdict: no significant regression"
    items = "; ".join(f"{c} {_metric_name(m.metric, cmp.k)} {_pct(m.diff, True)} pts "
                      f"[{_pct(m.lo, True)}, {_pct(m.hi, True)}]" for c, m in regs)
    return f"verdict: REGRESSION in {len(regs)} metric(s): {items}"


def render_markdown(cmp: Comparison) -> str:
    from evalpipe._report.escape import md, md_code
    from evalpipe._report.tables import markdown_table

    regs = cmp.regressions
    icon = ":warning:" if cmp.not_compared or cmp.refused else \
        ":x:" if regs else ":white_check_mark:"
    out = [f"## evalpipe compare: {md_code(cmp.run_a)} -> {md_code(cmp.run_b)}\n",
           f"{icon} **{md(summary_line(cmp).removeprefix('verdict: '))}**\n",
           (f"Paired over {cmp.questions_shared} shared questions. Differences are B - A in "
            f"percentage points with a paired bootstrap 95% interval ({cmp.resamples} "
            f"resamples, seed {cmp.seed}); McNemar's exact test for binary metrics. A metric "
            f"regresses when it drops more than {100 * cmp.threshold:.1f} points and the whole "
            "interval is below zero.\n"), f"{_unit_line(cmp)[0].upper()}{_unit_line(cmp)[1:]}.\n"]
    if cmp.warnings:
        out.append("**Warnings**\n")
        out += [f"- {md(w)}" for w in cmp.warnings]
        out.append("")
    for cc in cmp.cells + ([cmp.pooled] if cmp.pooled else []):
        title = cc.b_cell if cc.a_cell == cc.b_cell else f"{cc.a_cell} -> {cc.b_cell}"
        out.append(f"### {md_code(title)} ({md(cc.matched_by)}, {cc.n_pairs} pairs)\n")
        out.append(markdown_table(HEADER, metric_rows(cc, cmp.k)))
        if cc.right_to_wrong or cc.wrong_to_right or cc.category_moves:
            out.append("<details><summary>flips and category moves</summary>\n")
            out.append(f"- right -> wrong ({len(cc.right_to_wrong)}): "
                       f"{md(_ids(cc.right_to_wrong)) or '-'}")
            out.append(f"- wrong -> right ({len(cc.wrong_to_right)}): "
                       f"{md(_ids(cc.wrong_to_right)) or '-'}\n")
            if cc.category_moves:
                out.append(markdown_table(["from", "to", "count"],
                                          [[f, t, str(n)] for f, t, n in cc.category_moves]))
            out.append("</details>\n")
    return "\n".join(out) + "\n"
