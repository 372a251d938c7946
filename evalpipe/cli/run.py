"""`evalpipe run` and `evalpipe score`: generate a grid, or re-score a run without a model."""

from __future__ import annotations

from pathlib import Path

import click

from evalpipe.backends.local.cpu import AUTO, DTYPES
from evalpipe.cli.common import DEFAULT_CONFIG, echo, handle_errors
from evalpipe.errors import InputError


@click.command()
@click.option("--config", "config_path", default=DEFAULT_CONFIG, show_default=True,
              type=click.Path(dir_okay=False), help="YAML run configuration.")
@click.option("--limit", type=click.IntRange(min=1), help="At most N questions per suite.")
@click.option("--out", "out_root", default="outputs", show_default=True,
              type=click.Path(file_okay=False), help="Folder that receives the run directory.")
@click.option("--models", help="Comma-separated model ids, replacing the config's models.")
@click.option("--suites", help="Comma-separated suites to keep (arithmetic, plan, ...).")
@click.option("--dtype", type=click.Choice([AUTO, *DTYPES]),
              help="Weights dtype for every local model (auto: float32; bfloat16 is fast only "
                   "on CPUs with native bfloat16, see docs/speed.md).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Override a config key, e.g. --set generation.batch_size=8 (repeatable).")
@click.option("--resume", "resume_dir", type=click.Path(exists=True, file_okay=False),
              help="Continue a killed run in RUN_DIR with its own recorded config.")
@click.option("--retry-infra", is_flag=True,
              help="With --resume: re-run the samples that failed for infrastructure reasons "
                   "(backend down, timeout), replacing them in place.")
@click.option("--no-cache", is_flag=True, help="Generate every reply; do not use the cache.")
@click.option("--dry-run", is_flag=True,
              help="Print the plan (cells, samples, cache hits, prompt tokens, estimated "
                   "wall time) without loading a model, and stop: as `evalpipe plan`.")
@handle_errors
def run(config_path, limit, out_root, models, suites, dtype, sets, resume_dir, retry_infra,
        no_cache, dry_run):
    """Run the grid of a config and print its score table.

    Writes outputs/<run_id>/ with manifest.json, questions.jsonl, samples.jsonl,
    scores.json and table.md, and points outputs/latest at it once it finished. Replies
    are cached (~/.cache/evalpipe/generations.sqlite) so a re-run pays only for what
    changed. Exit codes: 0 finished, 2 bad input, 129/130/143 interrupted (SIGHUP/SIGINT/SIGTERM;
    continue with --resume), 1 anything else.
    """
    from evalpipe import api

    def split(text):
        return [t.strip() for t in text.split(",")] if text else None

    if dry_run:
        if resume_dir:
            raise InputError("--dry-run plans a new run", field="--resume",
                             expected="--dry-run without --resume")
        _print_plan(api.load(config_path, limit=limit, models=split(models),
                             suites=split(suites), dtype=dtype, sets=sets), out_root, no_cache)
        return
    result = api.run(None if resume_dir else config_path, out=out_root, resume=resume_dir,
                     use_cache=not no_cache, retry_infra=retry_infra, echo=echo,
                     progress=True,
                     limit=limit,
                     models=split(models), suites=split(suites), dtype=dtype, sets=sets)
    if result.helper_rank:  # rank 0 merges, scores and prints the table
        return
    echo("")
    echo(result.table)
    echo(f"results: {result.run_dir}")


@click.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--k", type=click.IntRange(min=1), help="Rank cut-off for retrieval metrics.")
@handle_errors
def score(run_dir, k):
    """Recompute scores.json and table.md of RUN_DIR with the current scorer (no model)."""
    from evalpipe import api

    api.score(run_dir, k=k)
    echo((Path(run_dir) / "table.md").read_text(encoding="utf-8"))


def _print_plan(config, out_root: str, no_cache: bool) -> None:
    from evalpipe.cache import GenerationCache
    from evalpipe.dryrun import make_plan, render_plan

    cache = None if no_cache else GenerationCache()
    try:
        echo(render_plan(make_plan(config, out_root=Path(out_root), cache=cache)), nl=False)
    finally:
        if cache is not None:
            cache.close()


@click.command()
@click.option("--config", "config_path", default=DEFAULT_CONFIG, show_default=True,
              type=click.Path(dir_okay=False), help="YAML run configuration.")
@click.option("--limit", type=click.IntRange(min=1), help="At most N questions per suite.")
@click.option("--out", "out_root", default="outputs", show_default=True,
              type=click.Path(file_okay=False),
              help="Folder of earlier runs (the wall-time estimate comes from them).")
@click.option("--models", help="Comma-separated model ids, replacing the config's models.")
@click.option("--suites", help="Comma-separated suites to keep (arithmetic, plan, ...).")
@click.option("--dtype", type=click.Choice([AUTO, *DTYPES]),
              help="Weights dtype for every local model.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Override a config key, e.g. --set limit=2 (repeatable).")
@click.option("--no-cache", is_flag=True, help="Plan as if the reply cache were empty.")
@handle_errors
def plan(config_path, limit, out_root, models, suites, dtype, sets, no_cache):
    """What a run of the config would do, without loading a model.

    Prints the cells, the samples of each, how many the reply cache already holds,
    the prompt tokens per cell (the model's tokenizer on the rendered prompts) and an
    estimate of wall time from the last run of the same model on this machine.
    """
    from evalpipe import api

    def split(text):
        return [t.strip() for t in text.split(",")] if text else None

    _print_plan(api.load(config_path, limit=limit, models=split(models), suites=split(suites),
                         dtype=dtype, sets=sets), out_root, no_cache)
