"""Text renderers of report data: Markdown (GitHub), tidy CSV, LaTeX (booktabs), JSON."""

from __future__ import annotations

import csv
import io
import math
from typing import Any, TypeGuard

from evalpipe._report.build import COST_FIELDS, MAIN_METRICS, RATIO_FIELDS, metric_label
from evalpipe._report.escape import (
    MARKDOWN,
    PLAIN,
    Inline,
    csv_cell,
    json_text,
    md,
    md_code,
    tex,
)
from evalpipe._report.plots import human
from evalpipe._report.tables import BFCL_SUITE, markdown_table, unscored_text, verdicts_text

DASH = "-"


def _num(x: Any) -> TypeGuard[int | float]:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def fmt_metric(m: dict[str, Any] | None, proportion: bool = True, interval: bool = True) -> str:
    """'62.5% (10/16) [41.2, 80.1]' for a proportion, '0.625 [0.41, 0.80] n=16' for a mean."""
    if not m or not m.get("n") or m.get("rate") is None:
        return DASH
    rate, n, lo, hi = m["rate"], m["n"], m.get("lo"), m.get("hi")
    if proportion:
        hits = round(rate * n)
        text = f"{100 * rate:.1f}% ({hits}/{n})"
        if interval and _num(lo) and _num(hi):
            text += f" [{100 * lo:.1f}, {100 * hi:.1f}]"
    else:
        text = f"{rate:.3f}"
        if interval and _num(lo) and _num(hi):
            text += f" [{lo:.3f}, {hi:.3f}]"
        text += f" n={n}"
    return text


def fmt_float(x: Any, digits: int = 1) -> str:
    return f"{x:,.{digits}f}" if _num(x) else DASH


def fmt_ratio(x: Any) -> str:
    return f"{x:.2f}x" if _num(x) else DASH


def _acc_lookup(data: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["cell_id"], r["suite"]): r for r in data["accuracy"]}


def _cells(data: dict[str, Any]) -> list[str]:
    return [c["cell_id"] for c in data["cells"]]


def accuracy_grid(data: dict[str, Any], metric: str, proportion: bool,
                  interval: bool = True) -> tuple[list[str], list[list[str]]]:
    """One metric as a cell x suite grid: header and rows of formatted strings."""
    acc = _acc_lookup(data)
    header = ["cell", *data["suites"]]
    rows = []
    for c in _cells(data):
        rows.append([c, *[fmt_metric((acc.get((c, s)) or {}).get("metrics", {}).get(metric),
                                     proportion, interval) for s in data["suites"]]])
    return header, rows


def category_grid(data: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    order = data["category_order"]
    header = ["cell", "n", *order]
    rows = []
    for r in data["categories"]:
        cells = []
        for cat in order:
            sh = r["shares"][cat]
            cells.append(f"{sh['count']} ({100 * sh['rate']:.1f}%)" if sh["rate"] is not None
                         else DASH)
        rows.append([r["cell_id"], str(r["n"]), *cells])
    return header, rows


COST_NOTE = (
    "Tokens, turns and prefill compute do not depend on batching (prefill compute: the "
    "sample's share of each batched prefill, split by the tokens each row brought). "
    "\"Unbatched\": the latency probe re-ran a few samples of the cell one at a time with "
    "nothing else in flight (`latency_probe` in the config), what one user would wait. "
    "\"Under load\": measured inside the running batch, so it includes waiting for other "
    "rows. `x` columns: this cell's mean divided by the mean of its baseline, the cell of "
    "the same model without tools and without retrieval.")


def facts_line(data: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, value) pairs for the top of a report: config, models, date, commit, status."""
    run = data.get("run") or {}
    commit = run.get("commit") or ""
    commit = commit[:12] + ("-dirty" if commit.endswith("-dirty") else "") if commit else ""
    pairs = [("config", " ".join(filter(None, [run.get("config_name"),
                                              f"({run['config_source']})"
                                              if run.get("config_source") else None]))),
             ("models", ", ".join(map(str, run.get("models") or []))),
             ("started", (run.get("started") or "").replace("T", " ")),
             ("commit", commit), ("status", run.get("status") or "")]
    return [(k, v) for k, v in pairs if v]


def models_grid(data: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """One row per model: its parameters, the dtype its weights ran in, the path it took
    and its resident size (the manifest's facts), so a size comparison says what ran."""
    header = ["model", "parameters", "dtype", "path", "resident"]
    rows, seen = [], set()
    for c in data["cells"]:
        key = (c["model"], c.get("dtype"))
        if key in seen:
            continue
        seen.add(key)
        dtype = c.get("dtype") or DASH
        if c.get("activations") and c["activations"] != c.get("dtype"):
            dtype += f" (computing in {c['activations']})"
        path = c.get("path") or DASH
        if c.get("linear"):
            path += f", linears {c['linear']}"
        resident = c.get("resident_bytes")
        rows.append([c["model"], human(c["parameters"]) if c.get("parameters") else DASH, dtype,
                     path, f"{resident / 2**30:.2f} GiB" if _num(resident) else DASH])
    return header, rows


def report_notes(data: dict[str, Any], inline: Inline = PLAIN) -> list[str]:
    """What a reader must know before reading the numbers, one line each: an unfinished
    run, warnings the run recorded, replies served from the cache. Written in the output
    kind of `inline` (escape.MARKDOWN, escape.HTML; PLAIN: text with `code` marks)."""
    t, c = inline.text, inline.code
    run = data.get("run") or {}
    notes = []
    if run.get("status") and run["status"] != "finished":
        state = {"running": "is still running", "interrupted": "was interrupted",
                 "failed": "failed"}.get(run["status"], f"is {run['status']}")
        notes.append(t(f"This run {state}") + (t(f" ({run['error']})") if run.get("error")
                                                else "")
                     + t(": the figures cover the samples written so far."))
    notes += [t(f"Warning: {w}") for w in run.get("warnings") or []]
    cached = [c(r["cell_id"]) + t(f" {r['cached']} of {r['n']}") for r in data["cost"]
              if r.get("cached")]
    if cached:
        notes.append(t("Replies from the generation cache: ") + t("; ").join(cached)
                     + t(" samples. Their times are left out of every time column and plot "
                         "(their wall time would measure a cache look-up); tokens and turns "
                         "still count. Run with ") + c("--no-cache")
                     + t(" to time every sample."))
    if any(str(s).startswith(BFCL_SUITE) for s in data.get("suites", [])) \
            and run.get("match", "bfcl") != "bfcl":
        notes.append(t("BFCL suites scored with evalpipe's argument rules (")
                     + c("match: evalpipe") + t("): not comparable with the BFCL "
                                                "leaderboard; set ") + c("match: bfcl")
                     + t(" for that (docs/bfcl.md)."))
    return notes


NOISE_FLOOR_NOTE = ("the smallest difference in exact match, in points, that a second run of "
                    "this size could be told apart from (5% two-sided, 80% power)")


def noise_floor_line(data: dict[str, Any]) -> str:
    """Each cell's noise floor in one line (runs without repeats)."""
    floors = [f"{r['cell_id']}: {100 * r['noise_floor']:.1f}" for r in data.get("repeats") or []
              if _num(r.get("noise_floor"))]
    return (f"Noise floor ({NOISE_FLOOR_NOTE}): " + "; ".join(floors)) if floors else ""


def cost_grid(data: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["cell", *[label for _, label in COST_FIELDS], "baseline",
              *[f"x {dict(COST_FIELDS)[f]}" for f in RATIO_FIELDS]]
    rows = []
    for r in data["cost"]:
        vals = [fmt_float((r["fields"].get(f) or {}).get("mean"), 0 if "tokens" in f else 1)
                for f, _ in COST_FIELDS]
        base = r["baseline"]
        ratios = [fmt_ratio(r["ratios"].get(f)) for f in RATIO_FIELDS]
        rows.append([r["cell_id"], *vals, "(self)" if base == r["cell_id"] else (base or DASH),
                     *ratios])
    return header, rows


def repeats_grid(data: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """pass^k for every k, pass@N, flip rate and noise floor per cell (suite all)."""
    most = max((r["repeats"] for r in data.get("repeats") or []), default=1)
    header = ["cell", "repeats", *[f"pass^{k}" for k in range(1, most + 1)],
              f"pass@{most}", "flip rate", "noise floor pts"]
    rows = []
    for r in data.get("repeats") or []:
        hat = [fmt_metric(r["pass^k"].get(str(k)), False) for k in range(1, most + 1)]
        floor = r.get("noise_floor")
        rows.append([r["cell_id"], str(r["repeats"]), *hat,
                     fmt_metric(r["pass@k"].get(str(most)), False),
                     fmt_metric(r.get("flip_rate")), fmt_float(100 * floor if _num(floor)
                                                               else None)])
    return header, rows


def audit_grid(data: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Share of identical replies and verdicts per cell and audit condition."""
    audit = data.get("audit") or {}
    names = [c["name"] for c in audit.get("conditions", [])]
    header = ["cell", "turns", *[f"{n}: {what}" for n in names for what in
                                  ("same reply", "same verdict")]]
    rows = []
    for c in audit.get("cells", []):
        values = []
        for n in names:
            res = c["results"].get(n) or {}
            values += [fmt_metric(res.get("identical_replies")),
                       fmt_metric(res.get("identical_verdicts"))]
        rows.append([c["cell_id"], str(c["turns"]), *values])
    return header, rows


# -- Markdown ----------------------------------------------------------------------------------

def render_markdown(data: dict[str, Any]) -> str:
    """The report as GitHub Markdown: every value from the run is written as literal text
    (escape.md in tables and prose, escape.md_code for names)."""
    k = data["k"]
    out = [f"# Report: {md(data['run_id'])}\n",
           "; ".join(f"{k}: {md(v)}" for k, v in facts_line(data)) + "\n",
           *(f"> {n}\n" for n in report_notes(data, MARKDOWN)),
           (f"Scorer version {data['scorer_version']}; retrieval cut-off k = {k}. "
            "Rates are shown as `rate (hits/n) [95% interval]`: Wilson intervals for "
            "proportions, Student t for recall (a mean of per-question recall). Samples "
            "that failed for infrastructure reasons are kept out of every rate.\n")]
    if data.get("rescored"):
        out.append("_scores.json was missing: scores were computed for this report._\n")
    infra = [md(f"{r['cell_id']} ({r['suite']}): {r['n_infra']}") for r in data["accuracy"]
             if r.get("n_infra") and r["suite"] == "all"]
    if infra:
        out.append("Infrastructure errors, left out of the rates: " + "; ".join(infra) + "\n")
    failed = [md(f"{r['cell_id']}: {r['n_tool_failure']}") for r in data["accuracy"]
              if r.get("n_tool_failure") and r["suite"] == "all"]
    if failed:
        out.append("Tool failures (a tool raised or timed out on a right call), left out of "
                   "the rates: " + "; ".join(failed) + "\n")
    if data.get("unscored"):
        out.append(unscored_text(data["unscored"]))
    out.append(verdicts_text({"verdicts": data.get("verdicts")}))
    header, rows = models_grid(data)
    out.append("## Models\n")
    out.append(markdown_table(header, rows))
    for metric, _, proportion in MAIN_METRICS:
        header, rows = accuracy_grid(data, metric, proportion)
        out.append(f"## {metric_label(metric, k)}\n")
        out.append(markdown_table(header, rows))
    header, rows = category_grid(data)
    out.append("## Failure categories (suite all)\n")
    out.append("Count and share of samples per primary category.\n")
    out.append(markdown_table(header, rows))
    header, rows = cost_grid(data)
    out.append("## Cost per sample (suite all, means)\n")
    out.append(COST_NOTE + "\n")
    out.append(markdown_table(header, rows))
    if any(r["repeats"] > 1 for r in data.get("repeats") or []):
        header, rows = repeats_grid(data)
        out.append("## Repeats (suite all)\n")
        out.append("pass^k: all of k repeats right; pass@k: at least one; unbiased estimates "
                   "from every question's repeats, with a t interval over questions. Flip rate: "
                   "share of questions whose repeats disagree. Noise floor: the smallest "
                   "difference in exact match a second run of this size could be told apart "
                   "from (5% two-sided, 80% power).\n")
        out.append(markdown_table(header, rows))
        for r in data["repeats"]:
            if r["flipping"]:
                out.append(f"- flipping in {md_code(r['cell_id'])} ({len(r['flipping'])}): "
                           + md(", ".join(map(str, r["flipping"]))))
        out.append("")
    elif noise_floor_line(data):
        out.append(md(noise_floor_line(data)) + "\n")
    if data.get("audit"):
        header, rows = audit_grid(data)
        audit = data["audit"]
        out.append("## Determinism audit\n")
        out.append(f"{md(audit.get('turns', 0))} recorded turns generated again "
                   "(`evalpipe audit`): share whose reply, and whose verdict (the calls "
                   "parsed, or the answer's exact match), equal the recorded ones.\n")
        out.append(markdown_table(header, rows))
        for note in audit.get("skipped", []):
            out.append(f"- {md(note)}")
    return "\n".join(out)


# -- CSV ---------------------------------------------------------------------------------------

CSV_HEADER = ["cell_id", "model", "format", "toolset", "retrieval", "retrieval_method", "suite",
              "metric", "value", "n", "lo", "hi"]


def tidy_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per cell x suite x metric. Metrics: every rate (exact, format_valid, ...,
    recall@k with k spelled out), category:<name> (share, Wilson interval),
    cost:<field>:mean|p50|p95 and cost_ratio:<field> (vs the baseline cell), pass^<k>,
    pass@<k>, flip_rate and noise_floor (docs/noise.md); suite "all" for categories,
    costs and repeats."""
    k = data["k"]
    rows = []
    for r in data["accuracy"]:
        for metric, m in r["metrics"].items():
            if not m or not m.get("n"):  # the metric does not apply to this group
                continue
            rows.append({"cell_id": r["cell_id"], "suite": r["suite"],
                         "metric": metric.replace("@k", f"@{k}"), "value": m.get("rate"),
                         "n": m.get("n"), "lo": m.get("lo"), "hi": m.get("hi")})
    for r in data["categories"]:
        for cat, sh in r["shares"].items():
            rows.append({"cell_id": r["cell_id"], "suite": "all", "metric": f"category:{cat}",
                         "value": sh["rate"], "n": sh["n"], "lo": sh["lo"], "hi": sh["hi"]})
    for r in data["cost"]:
        for f, _ in COST_FIELDS:
            s = r["fields"].get(f) or {}
            for stat in ("mean", "p50", "p95"):
                if s.get(stat) is not None:
                    rows.append({"cell_id": r["cell_id"], "suite": "all",
                                 "metric": f"cost:{f}:{stat}", "value": s[stat],
                                 "n": s.get("n"), "lo": None, "hi": None})
        for f in RATIO_FIELDS:
            if r["ratios"].get(f) is not None:
                rows.append({"cell_id": r["cell_id"], "suite": "all",
                             "metric": f"cost_ratio:{f}", "value": r["ratios"][f],
                             "n": r["n"], "lo": None, "hi": None})
    for r in data.get("repeats") or []:
        named = [(f"{est}{k}", m) for est, key in (("pass^", "pass^k"), ("pass@", "pass@k"))
                 for k, m in r[key].items()] + [("flip_rate", r.get("flip_rate"))]
        for metric, m in named:
            if m and m.get("n"):
                rows.append({"cell_id": r["cell_id"], "suite": "all", "metric": metric,
                             "value": m["rate"], "n": m["n"], "lo": m["lo"], "hi": m["hi"]})
        rows.append({"cell_id": r["cell_id"], "suite": "all", "metric": "noise_floor",
                     "value": r.get("noise_floor"), "n": r["questions"], "lo": None,
                     "hi": None})
    return rows


def render_csv(data: dict[str, Any]) -> str:
    """tidy_rows with each cell's model, format, toolset and retrieval (mode, method) in
    columns of their own."""
    facets = {c["cell_id"]: {"model": c.get("model"), "format": c.get("format"),
                             "toolset": c.get("toolset"), "retrieval": c.get("retrieval_mode"),
                             "retrieval_method": c.get("retrieval_method")}
              for c in data["cells"]}
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_HEADER, lineterminator="\n")
    writer.writeheader()
    for row in tidy_rows(data):
        row = {**row, **facets.get(row["cell_id"], {})}
        writer.writerow({k: csv_cell(v) for k, v in row.items()})
    return buf.getvalue()


# -- LaTeX -------------------------------------------------------------------------------------

def _tex_table(caption: str, label: str, header: list[str], rows: list[list[str]],
               note: str = "") -> str:
    cols = "l" + "r" * (len(header) - 1)
    lines = [r"\begin{table}[ht]", r"\centering", r"\small",
             rf"\caption{{{tex(caption)}}}", rf"\label{{tab:{label}}}",
             r"\resizebox{\linewidth}{!}{%",
             rf"\begin{{tabular}}{{{cols}}}", r"\toprule",
             " & ".join(tex(h) for h in header) + r" \\", r"\midrule"]
    lines += [" & ".join(tex(c) for c in row) + r" \\" for row in rows]
    lines += [r"\bottomrule", r"\end{tabular}}"]
    if note:
        lines.append(rf"\par\footnotesize {tex(note)}")
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


def render_latex(data: dict[str, Any], standalone: bool = False) -> str:
    """booktabs tables (needs \\usepackage{booktabs,graphicx}); a whole document
    with standalone=True."""
    k = data["k"]
    parts = [(f"% evalpipe report for run {tex(data['run_id'])}\n"
              "% requires \\usepackage{booktabs} and \\usepackage{graphicx}\n")]
    for metric, _, proportion in MAIN_METRICS:
        header, rows = accuracy_grid(data, metric, proportion)
        parts.append(_tex_table(
            f"{metric_label(metric, k)} per cell and suite, with 95% intervals",
            "acc-" + metric.replace("@k", "").replace("_", "-"), header, rows))
    header, rows = category_grid(data)
    parts.append(_tex_table("Failure categories: count (share) per cell", "categories",
                            header, rows))
    header, rows = cost_grid(data)
    parts.append(_tex_table("Cost per sample (means) and ratios to the cell of the same "
                            "model without tools and retrieval", "cost", header, rows))
    body = "\n".join(parts)
    if not standalone:
        return body
    return ("\\documentclass{article}\n\\usepackage[T1]{fontenc}\n\\usepackage[utf8]{inputenc}"
            "\n\\usepackage{booktabs}\n\\usepackage{graphicx}\n"
            "\\usepackage[margin=1.5cm,landscape]{geometry}\n"
            "\\begin{document}\n" + body + "\\end{document}\n")


# -- JSON --------------------------------------------------------------------------------------

def render_json(data: dict[str, Any]) -> str:
    return json_text(data, indent=2) + "\n"
