"""What every command shares: the default config path, error handling, output."""

from __future__ import annotations

import functools
import sys
import warnings
from pathlib import Path

import click

from evalpipe.errors import DataWarning, EvalpipeError

DEFAULT_CONFIG = "configs/default.yaml"
_format_warning = warnings.formatwarning


def _format(message, category, filename, lineno, line=None) -> str:
    if issubclass(category, DataWarning):  # the file and line are in the message
        return f"warning: {message}\n"
    return _format_warning(message, category, filename, lineno, line)


def show_data_warnings() -> None:
    """Print each DataWarning (a torn or repeated record read around) as one line."""
    warnings.formatwarning = _format


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


def write_output(text: str, out: str | None) -> None:
    """Write to OUT atomically (a reader never sees half a file), else to stdout."""
    if out:
        path = Path(out)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
        click.echo(f"wrote {path}", err=True)
    else:
        click.echo(text, nl=False)
