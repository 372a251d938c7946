"""`evalpipe show`: one question of a run, turn by turn, exactly as the model saw it."""

from __future__ import annotations

import click

from evalpipe.cli.common import echo, handle_errors


@click.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.argument("question_id", required=False)
@click.option("--cell", help="Only this cell (default: every cell that ran the question).")
@click.option("--table", is_flag=True,
              help="Instead of one question's turns: one row per sample (question, calls "
                   "made, answer, verdict).")
@handle_errors
def show(run_dir, question_id, cell, table):
    """Print each turn's exact prompt and raw reply for QUESTION_ID in RUN_DIR, or with
    --table the calls, answer and verdict of every sample."""
    from evalpipe.errors import InputError

    if table:
        from evalpipe._report.load import load_run
        from evalpipe._report.show import calls_table

        run = load_run(run_dir, allow_partial=True)
        samples = [s for s in run.samples if question_id is None
                   or s.get("question_id") == question_id]
        echo(calls_table(samples, run.scores.get("samples", []), run.questions, cell=cell),
             nl=False)
        return
    if question_id is None:
        raise InputError("missing QUESTION_ID", field="QUESTION_ID",
                         expected="a question id of the run, or --table")
    from evalpipe._report.show import find_samples, render_sample

    samples, texts = find_samples(run_dir, question_id, cell)
    echo("\n".join(render_sample(s, texts) for s in samples), nl=False)
