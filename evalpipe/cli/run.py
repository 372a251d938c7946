"""`evalpipe run` and `evalpipe score`: generate a grid, or re-score a run without a model."""

from __future__ import annotations

from pathlib import Path

import click

from evalpipe.cli.common import DEFAULT_CONFIG, handle_errors


@click.command()
@click.option("--config", "config_path", default=DEFAULT_CONFIG, show_default=True,
              type=click.Path(dir_okay=False), help="YAML run configuration.")
@click.option("--limit", type=click.IntRange(min=1), help="At most N questions per suite.")
@click.option("--out", "out_root", default="outputs", show_default=True,
              type=click.Path(file_okay=False), help="Folder that receives the run directory.")
@click.option("--models", help="Comma-separated model ids, replacing the config's models.")
@click.option("--suites", help="Comma-separated suites to keep (arithmetic, plan, ...).")
@click.option("--dtype", type=click.Choice(["float32", "bfloat16"]),
              help="Weights dtype for every local model (bfloat16 is faster on recent CPUs).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Override a config key, e.g. --set generation.batch_size=8 (repeatable).")
@click.option("--resume", "resume_dir", type=click.Path(exists=True, file_okay=False),
              help="Continue a killed run in RUN_DIR with its own recorded config.")
@click.option("--no-cache", is_flag=True, help="Generate every reply; do not use the cache.")
@handle_errors
def run(config_path, limit, out_root, models, suites, dtype, sets, resume_dir, no_cache):
    """Run the grid of a config and print its score table.

    Writes outputs/<run_id>/ with manifest.json, questions.jsonl, samples.jsonl,
    scores.json and table.md, and points outputs/latest at it. Replies are cached
    (~/.cache/evalpipe/generations.sqlite) so a re-run pays only for what changed.
    """
    from evalpipe.config import load_config, parse_config
    from evalpipe.runner import execute_run
    from evalpipe.store import RunStore

    if resume_dir:
        manifest = RunStore(resume_dir).read_json("manifest.json")
        config = parse_config(manifest["config"], source=manifest.get("config_source", resume_dir))
    else:
        model_list = [{"id": m.strip()} for m in models.split(",")] if models else None
        overrides = {"limit": limit, "models": model_list,
                     "suites": [s.strip() for s in suites.split(",")] if suites else None}
        config = load_config(config_path, sets=sets, dtype=dtype, **overrides)
    run_dir = execute_run(config, Path(out_root), resume=Path(resume_dir) if resume_dir else None,
                          use_cache=not no_cache, echo=click.echo)
    from evalpipe.parallel import rank_world

    if rank_world()[0] > 0:  # a helper rank: rank 0 merges, scores and prints the table
        return
    click.echo("")
    click.echo((run_dir / "table.md").read_text(encoding="utf-8"))
    click.echo(f"results: {run_dir}")


@click.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--k", type=click.IntRange(min=1), help="Rank cut-off for retrieval metrics.")
@handle_errors
def score(run_dir, k):
    """Recompute scores.json and table.md of RUN_DIR with the current scorer (no model)."""
    from evalpipe.runner import score_run
    from evalpipe.store import RunStore

    store = RunStore(run_dir)
    with store:
        score_run(store, k=k)
    click.echo((store.path / "table.md").read_text(encoding="utf-8"))
