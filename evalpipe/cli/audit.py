"""evalpipe audit: how much of a run's replies depend on batch shape and dtype."""

from __future__ import annotations

import click

from evalpipe.cli.common import echo, handle_errors


@click.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--sample", "sample", default=8, show_default=True, type=click.IntRange(min=1),
              help="Recorded turns per cell to generate again.")
@click.option("--seed", default=0, show_default=True, help="Seed of the choice of turns.")
@handle_errors
def audit(run_dir, sample, seed):
    """Generate N recorded turns of each cell again, one at a time, batched, and in the
    other dtype (float32 <-> bfloat16) where the backend has one; print the share of
    identical replies and verdicts per cell and write RUN_DIR/audit.json (shown by
    `evalpipe report`)."""
    from evalpipe._report.render import audit_grid
    from evalpipe._report.tables import markdown_table
    from evalpipe.audit import audit_run

    result = audit_run(run_dir, sample=sample, seed=seed, echo=echo)
    header, rows = audit_grid({"audit": result})
    echo(markdown_table(header, rows))
    for note in result["skipped"]:
        echo(f"note: {note}")
    echo(f"wrote {run_dir}/audit.json")
