"""Score tables, comparisons and plots: the implementation of the public API's
`report()` (evalpipe.report) and `compare()`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

REPORT_FORMATS = ("md", "csv", "latex", "html", "json")


def _quiet(_: str) -> None:
    pass


def report(run_dir: str | Path, format: str = "md", *, plots_dir: str | Path | None = None,
           standalone: bool = False, max_samples: int | None = 20_000,
           allow_partial: bool = False, warn: Callable[[str], None] = _quiet) -> str:
    """A run's report as text in `format` (md, csv, latex, html, json); with
    `plots_dir`, the plots are also written there as PNG files. Never writes into
    the run directory."""
    from evalpipe._report.build import build_report
    from evalpipe._report.load import load_run
    from evalpipe._report.render import render_csv, render_json, render_latex, render_markdown
    from evalpipe.errors import EvalpipeError, InputError

    if format not in REPORT_FORMATS:
        raise InputError(f"unknown report format {format!r}", field="format",
                         expected=" | ".join(REPORT_FORMATS))
    data_run = load_run(run_dir, allow_partial=allow_partial)
    data = build_report(data_run)
    if plots_dir:
        from evalpipe._report.plots import write_plots

        for path in write_plots(data, plots_dir):
            warn(f"wrote {path}")
    if format == "html":
        from evalpipe._report.html import render_html

        try:
            from evalpipe._report.plots import render_plots

            plots = render_plots(data)
        except EvalpipeError as exc:  # no matplotlib: a report without plots
            warn(f"warning: {exc}; the HTML report has no plots")
            plots = {}
        return render_html(data_run, data, plots, max_samples=max_samples or None)
    render = {"csv": render_csv, "json": render_json, "md": render_markdown}.get(format)
    return render(data) if render else render_latex(data, standalone=standalone)
