"""`evalpipe validate` and `evalpipe models`: checks that need no run."""

from __future__ import annotations

import sys

import click

from evalpipe.cli.common import handle_errors


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--corpus", default="datasets/site", show_default=True,
              type=click.Path(file_okay=False), help="Corpus the gold passages point into.")
@handle_errors
def validate(paths, corpus):
    """Check question files or folders: schema, ids, tools, plans, gold spans."""
    from evalpipe import api

    errors = api.validate(paths, corpus=corpus)
    for line in errors:
        click.echo(line, err=True)
    if errors:
        click.echo(f"{len(errors)} problem(s) found", err=True)
        sys.exit(2)
    click.echo("ok: no problems found")


@click.command()
@handle_errors
def models():
    """List the known model aliases and where each is cached."""
    from evalpipe.backends.models import ALIASES, DEFAULT_MODEL, converted_dir, is_cached

    for name, alias in ALIASES.items():
        state = "cached" if is_cached(name) else "not fetched yet"
        default = " (default)" if name == DEFAULT_MODEL else ""
        click.echo(f"{name}{default}: {alias.description}; license {alias.license}")
        click.echo(f"    from {', '.join(alias.wheels)}; {state}: {converted_dir(name)}")
