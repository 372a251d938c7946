"""PNG plots of report data (matplotlib, headless Agg backend).

Needs the `report` extra (matplotlib). Every function takes the dict from
build.build_report and returns PNG bytes, or None when the plot has nothing to
show (e.g. no cell has a known parameter count). Cell ids, suites and configurations
are drawn as written: mathtext and TeX are off (escape.PLOT_RC) and every label passes
through escape.plot_text.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evalpipe._report.escape import PLOT_RC, plot_text
from evalpipe.errors import EvalpipeError

# one colour per category (scoring/categories.py), stable across plots and runs
CATEGORY_COLOURS = {
    "correct": "#2e7d32", "infra_error": "#616161", "tool_failure": "#9e9e9e",
    "scorer_error": "#212121", "malformed_reply": "#4e342e", "malformed_call": "#c62828",
    "unknown_tool": "#ad1457", "invalid_arguments": "#6a1b9a", "turn_limit": "#4527a0",
    "no_tool_call": "#1565c0", "unneeded_tool_call": "#0277bd", "wrong_plan": "#ef6c00",
    "misreported_result": "#f9a825", "retrieval_miss": "#00838f",
    "misread_context": "#4db6ac", "hallucinated_answer": "#8d6e63", "wrong_answer": "#bdbdbd",
}


def _plt():
    try:
        import matplotlib
    except ModuleNotFoundError:
        raise EvalpipeError("plots need matplotlib: pip install 'evalpipe[report]'") from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _as_written(plot: Callable[[dict[str, Any]], bytes | None]
                ) -> Callable[[dict[str, Any]], bytes | None]:
    """Draw a plot with mathtext and TeX off: a `$` in a cell id is a dollar sign (and a
    malformed `$\\frac$` no error), whatever the matplotlib settings around it."""

    @functools.wraps(plot)
    def drawn(data: dict[str, Any]) -> bytes | None:
        try:
            import matplotlib
        except ModuleNotFoundError:
            return plot(data)  # nothing to draw, or the install hint from _plt
        with matplotlib.rc_context(PLOT_RC):
            return plot(data)

    return drawn


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    _plt().close(fig)
    return buf.getvalue()


def _config_of(cell: dict[str, Any]) -> str:
    """A cell's settings without the model: what a size curve connects."""
    cid, model = cell["cell_id"], cell.get("model")
    # the model facet, not the id's parts: a model id may hold "/" itself
    return cid.removeprefix(f"{model}/") if model else cid


def _exact(data: dict[str, Any], cell_id: str, suite: str) -> dict[str, Any] | None:
    for r in data["accuracy"]:
        if r["cell_id"] == cell_id and r["suite"] == suite:
            m = r["metrics"].get("exact")
            return m if m and m.get("n") and m.get("rate") is not None else None
    return None


def _err(m: dict[str, Any]) -> tuple[float, float]:
    lo = m.get("lo") if m.get("lo") is not None else m["rate"]
    hi = m.get("hi") if m.get("hi") is not None else m["rate"]
    return m["rate"] - lo, hi - m["rate"]


def human(n: float) -> str:
    """135M, 1.5B"""
    for scale, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:.3g}"


def _scale_x(ax, values: list[float], ticks_at_values: bool = False,
             notes: dict[float, str] | None = None) -> None:
    """Log scale when the values span more than 10x, else linear; with ticks_at_values,
    ticks sit at the values themselves, labelled 135M, 1.5B (and below, `notes` of a
    value, e.g. the dtype the model ran in)."""
    from matplotlib.ticker import (
        FixedLocator,
        FuncFormatter,
        LogLocator,
        NullFormatter,
        NullLocator,
    )

    values = [v for v in values if v]
    if not values:
        return
    lo, hi = min(values), max(values)
    if ticks_at_values:
        ax.set_xscale("log")
        ax.set_xlim(lo / 1.6, hi * 1.6)
        ax.xaxis.set_major_locator(FixedLocator(sorted(set(values))))
        ax.xaxis.set_major_formatter(FuncFormatter(
            lambda v, _: human(v) + (f"\n{notes[v]}" if notes and notes.get(v) else "")))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_minor_formatter(NullFormatter())
    elif hi > 10 * lo:
        ax.set_xscale("log")  # ticks at 1, 2 and 5 of every decade, labelled 200, 5k, 1M
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: human(v)))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_minor_formatter(NullFormatter())
    else:
        pad = (hi - lo) * 0.15 or hi * 0.1
        ax.set_xlim(max(0, lo - pad), hi + pad)


def _sized_cells(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The cells of known size, when at least two sizes are known (one is no curve)."""
    cells = [c for c in data["cells"] if c.get("parameters")]
    return cells if len({c["parameters"] for c in cells}) >= 2 else []


def dtypes_by_size(cells: list[dict[str, Any]]) -> dict[float, str]:
    """Parameter count -> the weights dtype(s) its cells ran in ("bfloat16"; "float32,
    bfloat16" where one size ran in both): a size comparison is only fair when it says."""
    seen: dict[float, list[str]] = {}
    for c in cells:
        if c.get("dtype") and c["dtype"] not in seen.setdefault(c["parameters"], []):
            seen[c["parameters"]].append(c["dtype"])
    return {size: ", ".join(dtypes) for size, dtypes in seen.items() if dtypes}


@_as_written
def accuracy_vs_size(data: dict[str, Any]) -> bytes | None:
    """Exact match (95% interval) against parameter count, one panel per suite, one line
    per configuration (format/toolset/retrieval), each size labelled with the dtype its
    model ran in; None unless at least two model sizes are known (one size is no
    curve)."""
    cells = _sized_cells(data)
    if not cells:
        return None
    plt = _plt()
    suites = data["suites"]
    fig, axes = plt.subplots(1, len(suites), figsize=(4.2 * len(suites), 3.6), squeeze=False,
                             sharey=True)
    configs = sorted({_config_of(c) for c in cells})
    for ax, suite in zip(axes[0], suites):
        for ci, config in enumerate(configs):
            dodge = 1.05 ** (ci - (len(configs) - 1) / 2)  # configs at one size stay apart
            pts = []
            for c in cells:
                if _config_of(c) != config:
                    continue
                m = _exact(data, c["cell_id"], suite)
                if m:
                    pts.append((c["parameters"], m))
            if not pts:
                continue
            pts.sort(key=lambda p: p[0])
            xs = [p[0] * dodge for p in pts]
            ys = [p[1]["rate"] for p in pts]
            errs = list(zip(*[_err(p[1]) for p in pts]))
            ax.errorbar(xs, ys, yerr=errs, marker="o", capsize=3, label=plot_text(config))
        _scale_x(ax, [c["parameters"] for c in cells], ticks_at_values=True,
                 notes=dtypes_by_size(cells))
        ax.set_title(plot_text(suite))
        ax.set_xlabel("parameters (weights dtype)")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("exact match")
    handles, labels = axes[0][0].get_legend_handles_labels()
    for ax in axes[0][1:]:
        h, lab = ax.get_legend_handles_labels()
        for hh, ll in zip(h, lab):
            if ll not in labels:
                handles.append(hh)
                labels.append(ll)
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=min(3, len(labels)),
                   bbox_to_anchor=(0.5, -0.06 - 0.05 * ((len(labels) - 1) // 3 + 1)),
                   fontsize="small")
    fig.suptitle("Accuracy vs model size", y=1.03)
    return _png(fig)


@_as_written
def categories_stacked(data: dict[str, Any]) -> bytes | None:
    """Share of each primary failure category per cell, as stacked horizontal bars."""
    rows = data["categories"]
    if not rows:
        return None
    plt = _plt()
    order = data["category_order"]
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(rows) + 1.6))
    labels = [plot_text(r["cell_id"]) for r in rows]
    left = [0.0] * len(rows)
    for cat in order:
        widths = [r["shares"][cat]["rate"] or 0.0 for r in rows]
        ax.barh(labels, widths, left=left, label=cat,
                color=CATEGORY_COLOURS.get(cat), edgecolor="white", linewidth=0.5)
        left = [a + b for a, b in zip(left, widths)]
    ax.set_xlim(0, 1)
    ax.invert_yaxis()
    ax.set_xlabel("share of samples")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18 - 0.03 * len(rows)), ncol=4,
              fontsize="small")
    ax.set_title("Failure categories per cell")
    return _png(fig)


CostPoint = tuple[str, float, float | None, dict[str, Any]]


def _cost_points(data: dict[str, Any]) -> list[CostPoint]:
    """(cell, mean tokens, mean wall ms or None, exact match) of the cells with both."""
    pts: list[CostPoint] = []
    for r in data["cost"]:
        m = _exact(data, r["cell_id"], "all")
        f = r["fields"]
        prompt, completion = ((f.get(x) or {}).get("mean")
                              for x in ("prompt_tokens", "completion_tokens"))
        if m is None or prompt is None or completion is None:
            continue
        pts.append((r["cell_id"], prompt + completion, (f.get("wall_ms") or {}).get("mean"), m))
    return pts


WALL_LABEL = "wall ms per sample, under load (inside the running batch)"


@_as_written
def accuracy_vs_cost(data: dict[str, Any]) -> bytes | None:
    """Exact match (suite all) against mean tokens and mean wall time per sample. The
    wall time is measured under load (a row waits for the rows batched with it) and
    leaves out samples served from the reply cache (scoring/cost.py)."""
    pts = _cost_points(data)
    if not pts:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, xs, label in ((axes[0], [p[1] for p in pts], "tokens per sample (prompt + completion)"),
                          (axes[1], [p[2] for p in pts], WALL_LABEL)):
        for i, (p, x) in enumerate(zip(pts, xs, strict=True)):
            if x is None:
                continue
            lo, hi = _err(p[3])
            ax.errorbar([x], [p[3]["rate"]], yerr=[[lo], [hi]], marker="o", capsize=3,
                        color=f"C{i % 10}", label=plot_text(p[0]))
        ax.set_xlabel(label)
        _scale_x(ax, [x for x in xs if x is not None])
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("exact match (all suites)")
    axes[0].set_ylim(-0.02, 1.02)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize="small",
               bbox_to_anchor=(0.5, -0.08 - 0.05 * ((len(labels) + 1) // 2)))
    cached = sum(r.get("cached") or 0 for r in data["cost"])
    fig.suptitle("Accuracy vs cost" + (f" ({cached} samples from the reply cache: not in the "
                                        "wall time)" if cached else ""))
    return _png(fig)


PLOTS = {
    "accuracy_vs_size": accuracy_vs_size,
    "categories": categories_stacked,
    "accuracy_vs_cost": accuracy_vs_cost,
}


def applicable(data: dict[str, Any]) -> list[str]:
    """The names of the plots that have something to show, without drawing them."""
    has = {"accuracy_vs_size": bool(_sized_cells(data)), "categories": bool(data["categories"]),
           "accuracy_vs_cost": bool(_cost_points(data))}
    return [name for name in PLOTS if has[name]]


def render_plots(data: dict[str, Any]) -> dict[str, bytes]:
    """name -> PNG bytes, for the plots that have something to show."""
    out = {}
    for name, fn in PLOTS.items():
        png = fn(data)
        if png:
            out[name] = png
    return out


def write_plots(data: dict[str, Any], folder: str | Path) -> list[Path]:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, png in render_plots(data).items():
        path = folder / f"{name}.png"
        path.write_bytes(png)
        paths.append(path)
    return paths
