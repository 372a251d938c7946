"""What a page that shows runs reads of the reports (`evalpipe view`).

A run page, a comparison page and a sample's transcript show what the reports show,
formatted as they format it: the tables, notes, plots and comparisons are made
here, from the report's data, and a page only lays them out. The viewer imports
this module alone of the reports.
"""

from __future__ import annotations

from typing import Any

from evalpipe._report.build import MAIN_METRICS, build_report, metric_label
from evalpipe._report.compare import HEADER, compare_runs, cost_changes, metric_rows, summary_line
from evalpipe._report.html import sample_view
from evalpipe._report.load import RunData, run_facts
from evalpipe._report.render import (
    COST_NOTE,
    accuracy_grid,
    category_grid,
    cost_grid,
    noise_floor_line,
    repeats_grid,
    report_notes,
)
from evalpipe.errors import EvalpipeError


class RunReport:
    """A run and its report, built once: what its pages show."""

    def __init__(self, run: RunData):
        self.run, self.data = run, build_report(run)

    def summary(self) -> dict[str, Any]:
        """The run's facts, notes and tables (id, title, header, formatted rows)."""
        data = self.data
        tables = []
        for metric, _, proportion in MAIN_METRICS:
            header, rows = accuracy_grid(data, metric, proportion)
            tables.append({"id": f"acc-{metric}", "title": metric_label(metric, data["k"]),
                           "header": header, "rows": rows})
        for table_id, title, (header, rows) in (
                ("categories", "Failure categories (suite all)", category_grid(data)),
                ("cost", "Cost per sample (suite all, means)", cost_grid(data))):
            tables.append({"id": table_id, "title": title, "header": header, "rows": rows})
        if any(r["repeats"] > 1 for r in data.get("repeats") or []):
            header, rows = repeats_grid(data)
            tables.append({"id": "repeats", "title": "Repeats", "header": header, "rows": rows})
        notes = report_notes(data)
        if self.run.rescored:
            notes.append("Scored here with the current scorer as samples arrive (no "
                         "scores.json yet).")
        return {"run": data["run"], "notes": notes, "cost_note": COST_NOTE,
                "noise": noise_floor_line(data), "tables": tables, "cells": self.run.cells()}

    def plot_names(self) -> list[str]:
        """The plots the run has, without drawing them; [] without matplotlib."""
        try:
            import matplotlib  # noqa: F401 -- the plots' one extra
        except ModuleNotFoundError:
            return []
        from evalpipe._report.plots import applicable

        return applicable(self.data)

    def plots(self) -> dict[str, bytes]:
        """The plots as PNG; {} without matplotlib."""
        from evalpipe._report.plots import render_plots

        try:
            return render_plots(self.data)
        except EvalpipeError:
            return {}


def compare_page(a: RunReport, b: RunReport) -> dict[str, Any]:
    """Run b against run a, paired, as the comparison page shows it: the verdict, the
    warnings, each matched cell's metric rows and category moves, and cost changes."""
    cmp = compare_runs(a.run, b.run)
    cells = []
    for cc in cmp.cells + ([cmp.pooled] if cmp.pooled else []):
        cells.append({
            "title": cc.b_cell if cc.a_cell == cc.b_cell else f"{cc.a_cell} -> {cc.b_cell}",
            "a_cell": cc.a_cell, "b_cell": cc.b_cell, "matched_by": cc.matched_by,
            "pairs": cc.n_pairs, "header": HEADER, "rows": metric_rows(cc, cmp.k),
            "right_to_wrong": cc.right_to_wrong, "wrong_to_right": cc.wrong_to_right,
            "category_moves": [list(m) for m in cc.category_moves],
            "unchanged": cc.unchanged_categories})
    return {"a": a.data["run"], "b": b.data["run"], "verdict": summary_line(cmp),
            "warnings": cmp.warnings, "questions": cmp.questions_shared, "cells": cells,
            "cost": cost_changes(cmp, a.data, b.data)}


__all__ = ["RunData", "RunReport", "compare_page", "run_facts", "sample_view"]
