"""The evalpipe command line."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import click

from evalpipe.errors import EvalpipeError

DEFAULT_CONFIG = "configs/default.yaml"


def handle_errors(fn):
    """Print an EvalpipeError as one line and exit with its code (2 for bad input)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except EvalpipeError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(exc.exit_code)

    return wrapper


@click.group()
@click.version_option(package_name="evalpipe")
def main():
    """Batch evaluation of LLM tool calling, agent loops and RAG."""


@main.command()
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
        config = load_config(config_path, sets=sets, **overrides)
        if dtype:
            for model in config.models:
                model["dtype"] = dtype
            config.raw["models"] = config.models
    run_dir = execute_run(config, Path(out_root), resume=Path(resume_dir) if resume_dir else None,
                          use_cache=not no_cache, echo=click.echo)
    from evalpipe.parallel import rank_world

    if rank_world()[0] > 0:  # a helper rank: rank 0 merges, scores and prints the table
        return
    click.echo("")
    click.echo((run_dir / "table.md").read_text(encoding="utf-8"))
    click.echo(f"results: {run_dir}")


@main.command()
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


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--corpus", default="datasets/site", show_default=True,
              type=click.Path(file_okay=False), help="Corpus the gold passages point into.")
@handle_errors
def validate(paths, corpus):
    """Check question files or folders: schema, ids, tools, plans, gold spans."""
    from evalpipe.validate import validate_paths

    errors = validate_paths(list(paths), corpus_root=corpus)
    for line in errors:
        click.echo(line, err=True)
    if errors:
        click.echo(f"{len(errors)} problem(s) found", err=True)
        sys.exit(2)
    click.echo("ok: no problems found")


@main.command()
@handle_errors
def models():
    """List the known model aliases and where each is cached."""
    from evalpipe.backends.models import ALIASES, DEFAULT_MODEL, converted_dir, is_cached

    for name, alias in ALIASES.items():
        state = "cached" if is_cached(name) else "not fetched yet"
        default = " (default)" if name == DEFAULT_MODEL else ""
        click.echo(f"{name}{default}: {alias.description}; license {alias.license}")
        click.echo(f"    from {', '.join(alias.wheels)}; {state}: {converted_dir(name)}")


def _register_plugins():
    """Commands that live beside the code they drive (report, compare, retrieve, ...)."""
    import importlib

    for module in ("evalpipe.report.cli", "evalpipe.retrieval.cli"):
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
            continue
        for command in getattr(mod, "COMMANDS", []):
            main.add_command(command)


_register_plugins()

if __name__ == "__main__":
    main()
