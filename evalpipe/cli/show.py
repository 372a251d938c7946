"""`evalpipe show`: one question of a run, turn by turn, exactly as the model saw it."""

from __future__ import annotations

import click

from evalpipe.cli.common import echo, handle_errors


@click.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.argument("question_id")
@click.option("--cell", help="Only this cell (default: every cell that ran the question).")
@handle_errors
def show(run_dir, question_id, cell):
    """Print each turn's exact prompt and raw reply for QUESTION_ID in RUN_DIR."""
    from evalpipe._report.show import find_samples, render_sample

    samples, texts = find_samples(run_dir, question_id, cell)
    echo("\n".join(render_sample(s, texts) for s in samples), nl=False)
