"""The score table printed at the end of a run: one row per cell."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from evalpipe._report.escape import md
from evalpipe.records import DEFAULT_K, Scores
from evalpipe.scoring.categories import DISPLAY_ORDER as CATEGORY_ORDER


def fmt_rate(metric: Mapping[str, Any] | None) -> str:
    """'62.5% (10/16)' or '-' when the metric does not apply."""
    if not metric or not metric.get("n"):
        return "-"
    rate, n = metric["rate"], metric["n"]
    hits = metric.get("k", round(rate * n))
    return f"{100 * rate:.1f}% ({hits:g}/{n})" if float(hits).is_integer() else \
        f"{100 * rate:.1f}% (n={n})"


def markdown_table(header: list[Any], rows: list[list[Any]]) -> str:
    """A GitHub Markdown table; every cell, header included, is written as literal text
    (escape.md), so callers pass cells as they are."""
    lines = ["| " + " | ".join(md(h) for h in header) + " |",
             "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(md(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def score_table(scores: Scores) -> str:
    """Markdown: per cell, exact match, format validity, plan match, tool calls per
    question, recall@k, category counts."""
    k = scores.get("k", DEFAULT_K)
    overall = [g for g in scores["groups"] if g["suite"] == "all"]
    categories = [c for c in CATEGORY_ORDER if any(g["categories"].get(c) for g in overall)]
    header = ["cell", "n", "exact match", "format valid", "plan match", "calls/q",
              f"recall@{k}", *categories]
    rows = []
    for g in overall:
        r: Mapping[str, Any] = g.get("rates") or g  # nested, or flat in older scores
        rows.append([g["cell_id"], g["n"], fmt_rate(r.get("exact")),
                     fmt_rate(r.get("format_valid")), fmt_rate(r.get("plan_exact")),
                     _fmt_calls(r.get("calls_per_question")),
                     fmt_mean(r.get("recall@k") or r.get(f"recall@{k}") or r.get("recall")),
                     *[g["categories"].get(c, 0) for c in categories]])
    return (markdown_table(header, rows) + bfcl_table(scores) + verdicts_text(scores)
            + unscored_text(scores.get("unscored") or []))


def verdicts_text(scores: Mapping[str, Any]) -> str:
    """Which answer verdicts came from the judge, and how many the rules left undecided."""
    v = scores.get("verdicts") or {}
    parts = []
    if v.get("judge"):
        parts.append(f"{md(v['judge'])} answer verdicts came from the judge "
                     f"({md(', '.join(map(str, v.get('judge_models') or [])))}; flag `judged`)")
    if v.get("undecided"):
        parts.append(f"{md(v['undecided'])} answers the rules left undecided without a judge "
                     "verdict (flag `undecided`; scored by the rules' reading)")
    return "".join(f"\n{p}.\n" for p in parts)


BFCL_SUITE = "bfcl_"  # the suites evalpipe.bfcl writes: bfcl_simple_python, ...


def bfcl_table(scores: Mapping[str, Any]) -> str:
    """BFCL-style accuracy per category (rows) and cell (columns), with format validity;
    empty when the run has no BFCL suite. For answer_type "calls" exact match is BFCL's
    verdict: every call valid and the plan matched."""
    groups = [g for g in scores["groups"] if str(g["suite"]).startswith(BFCL_SUITE)]
    if not groups:
        return ""
    cells = list(dict.fromkeys(g["cell_id"] for g in groups))
    by_key = {(g["cell_id"], g["suite"]): g for g in groups}
    rows = []
    for suite in dict.fromkeys(g["suite"] for g in groups):
        row = [suite[len(BFCL_SUITE):]]
        for cell in cells:
            g = by_key.get((cell, suite))
            r = (g.get("rates") if isinstance(g.get("rates"), dict) else g) if g else {}
            row.append(f"{fmt_rate(r.get('exact'))}, valid {fmt_rate(r.get('format_valid'))}"
                       if g else "-")
        rows.append(row)
    rules = scores.get("match") or "evalpipe"
    caveat = ("" if rules == "bfcl" else
              f"\nArguments compared by evalpipe's rules (match: {md(rules)}): these numbers are "
              "NOT comparable with the BFCL leaderboard; set match: bfcl for that.\n")
    return (caveat + "\nBFCL accuracy per category (every call valid and the plan matched; "
            "format validity counts samples with a call attempt):\n\n"
            + markdown_table(["category", *cells], rows))


MAX_UNSCORED_LISTED = 50


def unscored_text(unscored: Sequence[Mapping[str, Any]]) -> str:
    """The samples the scorer failed on (kept out of every rate), one line each."""
    if not unscored:
        return ""
    lines = [(f"\n{len(unscored)} sample(s) could not be scored and are left out of every "
             "rate (category scorer_error):\n")]
    for u in unscored[:MAX_UNSCORED_LISTED]:
        lines.append(f"- cell {md(u.get('cell_id'))}, question {md(u.get('question_id'))}, "
                     f"repeat {md(u.get('repeat'))}: {md(u.get('scorer_error'))}")
    if len(unscored) > MAX_UNSCORED_LISTED:
        lines.append(f"- ... and {len(unscored) - MAX_UNSCORED_LISTED} more (scores.json, "
                     '"unscored")')
    return "\n".join(lines) + "\n"


def _fmt_calls(metric: Mapping[str, Any] | None) -> str:
    """'1.8' mean calls per question, '-' where no tools were offered."""
    if not metric or not metric.get("n") or metric.get("rate") is None:
        return "-"
    return f"{metric['rate']:.1f}"


def fmt_mean(metric: Mapping[str, Any] | None) -> str:
    """'0.625 (n=16)' for a mean such as recall@k, '-' when it does not apply."""
    if not metric or not metric.get("n") or metric.get("rate") is None:
        return "-"
    return f"{metric['rate']:.3f} (n={metric['n']})"
