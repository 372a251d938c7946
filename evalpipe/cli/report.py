"""`evalpipe report` and `evalpipe compare`: tables of a run, and the paired gate."""

from __future__ import annotations

import click

from evalpipe._report import REPORT_FORMATS as FORMATS
from evalpipe.cli.common import echo, handle_errors, write_output
from evalpipe.errors import NotCompared, RegressionFound


@click.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="md", show_default=True,
              help="md (GitHub Markdown), csv (tidy: one row per cell x suite x metric), "
                   "latex (booktabs), html (one self-contained file), json (table data).")
@click.option("--out", type=click.Path(dir_okay=False), help="Write here instead of stdout.")
@click.option("--plots", "plots_dir", type=click.Path(file_okay=False),
              help="Also write the plots as PNG files into this folder.")
@click.option("--standalone", is_flag=True,
              help="latex: a whole compilable document instead of table environments.")
@click.option("--max-samples", type=click.IntRange(min=0), default=20_000, show_default=True,
              help="html: at most this many samples (with transcripts) in the sample browser; "
                   "0 for all.")
@click.option("--allow-partial", is_flag=True,
              help="Read a run that did not finish (running, interrupted or failed).")
@handle_errors
def report(run_dir, fmt, out, plots_dir, standalone, max_samples, allow_partial):
    """Tables (and plots) of a run: accuracy per cell x suite, failure categories, cost.

    Reads RUN_DIR/scores.json (computed in memory when missing) and never writes
    into RUN_DIR unless --out or --plots point there.
    """
    from evalpipe import api

    text = api.report(run_dir, fmt, plots_dir=plots_dir, standalone=standalone,
                      max_samples=max_samples, allow_partial=allow_partial,
                      warn=lambda line: echo(line, err=True))
    write_output(text, out)


@click.command()
@click.argument("run_a", type=click.Path(exists=True, file_okay=False))
@click.argument("run_b", type=click.Path(exists=True, file_okay=False))
@click.option("--fail-on-regression", is_flag=True,
              help="Exit 3 when a metric of a matched cell (or the pooled row) regresses; exit 4 "
                   "when there is nothing to judge (no or too few pairs, grids that differ, a "
                   "run mostly infra errors).")
@click.option("--threshold", type=click.FloatRange(min=0.0, max=1.0), default=0.02,
              show_default=True,
              help="Smallest drop (as a fraction: 0.02 = 2 points) that counts as a regression; "
                   "the paired 95% interval must also lie entirely below zero.")
@click.option("--format", "fmt", type=click.Choice(("text", "md", "json")), default="text",
              show_default=True, help="text for a CI log, md for a PR comment, json.")
@click.option("--strict", is_flag=True,
              help="Refuse (exit 2) when a cell id matches but its fingerprint differs.")
@click.option("--resamples", type=click.IntRange(min=100), default=2000, show_default=True,
              help="Bootstrap resamples.")
@click.option("--seed", type=int, default=0, show_default=True, help="Bootstrap seed.")
@click.option("--out", type=click.Path(dir_okay=False), help="Write here instead of stdout.")
@click.option("--junit", "junit", type=click.Path(dir_okay=False),
              help="Also write a JUnit XML report here: one test per matched cell and gated "
                   "metric (a regression fails; a comparison not judged is skipped, one "
                   "refused by --strict is an error, each with the reason).")
@click.option("--summary", "summary", type=click.Path(dir_okay=False),
              help="Also write a Markdown step summary here (the verdict and one row per "
                   "cell and metric). With $GITHUB_STEP_SUMMARY set, it is appended there too.")
@click.option("--allow-partial", is_flag=True,
              help="Read a run that did not finish (running, interrupted or failed).")
@handle_errors
def compare(run_a, run_b, fail_on_regression, threshold, fmt, strict, resamples, seed, out,
            junit, summary, allow_partial):
    """Paired comparison of RUN_B against RUN_A (the baseline).

    Pairs samples by cell fingerprint and question id. Per metric: the
    difference B - A with a paired bootstrap 95% interval, McNemar's exact test
    for binary metrics, the questions that flipped, and category moves.
    Exit codes: 0 ok, 3 regression with --fail-on-regression, 4 not compared with
    --fail-on-regression (nothing the gate could judge), 2 bad input, an unfinished run
    (without --allow-partial) or refused with --strict, 1 other. A comparison that is
    refused or not compared still writes its report (and --junit, --summary), with the
    reason first and the differences it could compute.
    """
    from evalpipe import api
    from evalpipe._report.compare import CompareRefused

    refused: CompareRefused | None = None
    try:
        cmp = api.compare(run_a, run_b, threshold=threshold, strict=strict,
                          resamples=resamples, seed=seed, allow_partial=allow_partial)
    except CompareRefused as exc:  # reported below, then the exit code it means
        cmp, refused = exc.comparison, exc
    write_comparison(cmp, fmt, out, junit, summary)
    if refused is not None:
        raise refused
    if fail_on_regression and cmp.not_compared:
        more = len(cmp.not_compared) - 1
        raise NotCompared(f"regression gate: not compared: {cmp.not_compared[0]}"
                          + (f" (and {more} more reason{'s' if more > 1 else ''})" if more else ""))
    if fail_on_regression and cmp.regressions:
        raise RegressionFound(f"regression gate: {len(cmp.regressions)} metric(s) regressed")


def write_comparison(cmp, fmt: str, out: str | None, junit: str | None,
                     summary: str | None) -> None:
    """The report (stdout or --out), the JUnit XML and the step summary of a comparison;
    the summary is appended to $GITHUB_STEP_SUMMARY as well when that is set."""
    import json
    import os
    from pathlib import Path

    from evalpipe._report.ci import junit_xml, step_summary
    from evalpipe._report.compare import render_markdown, render_text

    if fmt == "md":
        text = render_markdown(cmp)
    elif fmt == "json":
        text = json.dumps(cmp.to_dict(), indent=2, ensure_ascii=False, default=str) + "\n"
    else:
        text = render_text(cmp)
    write_output(text, out)
    if junit:
        write_output(junit_xml(cmp).decode("utf-8"), junit)
    steps = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary or steps:
        page = step_summary(cmp)
        # --summary naming the step summary itself is appended to, never overwritten
        if summary and not (steps and Path(summary).resolve() == Path(steps).resolve()):
            write_output(page, summary)
        if steps:
            with open(steps, "a", encoding="utf-8") as f:
                f.write(page)
