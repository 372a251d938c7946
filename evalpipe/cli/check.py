"""`evalpipe validate` and `evalpipe models`: checks that need no run."""

from __future__ import annotations

import sys

import click

from evalpipe.cli.common import echo, handle_errors


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(exists=True))
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False),
              help="A run config: its custom tools count as known tools (gold plans may "
                   "call them, and they are run to check the plans), and without PATHS its "
                   "question files and corpus are checked.")
@click.option("--corpus", type=click.Path(file_okay=False),
              help="Corpus the gold passages point into [default: the config's corpus, "
                   "else datasets/site].")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Override a config key as `evalpipe run` does, e.g. --set "
                   "question_limits.max_rows=2000000 (without --config: question_limits "
                   "keys only).")
@handle_errors
def validate(paths, config_path, corpus, sets):
    """Check question files or folders: schema, ids, tools, plans, gold spans, sizes."""
    from evalpipe import api
    from evalpipe._validate import gold_warnings_paths
    from evalpipe.config import question_limits
    from evalpipe.errors import InputError

    custom_tools = []
    if config_path:
        config = api.load(config_path, sets=sets)
        custom_tools = config.custom_tools
        paths = paths or tuple(config.sources())
        corpus = corpus or config.corpus
        limits = config.question_limits.limits()
    else:
        limits = question_limits(sets)
    if not paths:
        raise InputError("nothing to check", field="PATHS",
                         expected="question files or folders, or --config with questions")
    corpus = corpus or "datasets/site"
    errors = api.validate(paths, corpus=corpus, custom_tools=custom_tools, limits=limits)
    for line in errors:
        echo(line, err=True)
    if errors:
        echo(f"{len(errors)} problem(s) found", err=True)
        sys.exit(2)
    # warnings do not fail: a chunk may state the answer of another question's fact
    warnings = gold_warnings_paths(list(paths), corpus_root=corpus, limits=limits)
    for line in warnings:
        echo(f"warning: {line}", err=True)
    echo("ok: no problems found" + (f"; {len(warnings)} gold-completeness warning(s)"
                                           if warnings else ""))


@click.command()
@handle_errors
def models():
    """List the known model aliases: what each is, its licence and provenance, its
    size, what its first use costs, and where it is cached."""
    from evalpipe.backends.models import ALIASES, DEFAULT_MODEL, describe_alias

    for name in ALIASES:
        default = " (default)" if name == DEFAULT_MODEL else ""
        lines = describe_alias(name)
        echo(f"{name}{default}: {lines[0]}")
        for line in lines[1:]:
            echo(f"    {line}")
