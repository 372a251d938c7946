"""`evalpipe import bfcl`: benchmark data turned into evalpipe question files."""

from __future__ import annotations

import click

from evalpipe.bfcl.convert import DEFAULT_CATEGORIES
from evalpipe.cli.common import echo, handle_errors


@click.group(name="import")
def import_group():
    """Turn a published benchmark into evalpipe question files."""


@import_group.command(name="bfcl")
@click.option("--categories", default=",".join(DEFAULT_CATEGORIES), show_default=True,
              help="Comma-separated BFCL categories (docs/bfcl.md lists them).")
@click.option("--out", default="datasets/bfcl", show_default=True,
              type=click.Path(file_okay=False), help="Folder for one question file per category.")
@click.option("--wheel", type=click.Path(dir_okay=False),
              help="A local bfcl-eval wheel instead of the cached download "
                   "(also $EVALPIPE_BFCL_WHEEL).")
@handle_errors
def bfcl(categories, out, wheel):
    """BFCL's data from the pinned bfcl-eval wheel (docs/bfcl.md)."""
    from evalpipe.bfcl import VERSION, import_bfcl

    wanted = [c.strip() for c in categories.split(",") if c.strip()]
    summary = import_bfcl(wanted, out, wheel=wheel)
    for category, counts in summary.items():
        skipped = f" ({counts['skipped']} skipped: more than one user message)" \
            if counts["skipped"] else ""
        echo(f"{out}/{category}.jsonl: {counts['questions']} questions{skipped}")
    echo(f"from bfcl-eval {VERSION}")
