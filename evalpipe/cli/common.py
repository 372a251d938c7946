"""What every command shares: the default config path, error handling, output."""

from __future__ import annotations

import functools
import re
import sys
import warnings
from pathlib import Path

import click

from evalpipe.errors import DataWarning, EngineWarning, EvalpipeError

DEFAULT_CONFIG = "configs/default.yaml"
# What may not reach a terminal raw: control characters but tab and newline (ESC starts
# the sequences that move the cursor, recolour, retitle or rewrite the screen), C1
# controls, bidirectional overrides, and lone surrogates (no encoding can print them).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069"
                     "\ud800-\udfff]")


def terminal_safe(text: str) -> str:
    """`text` with every unsafe character written as a \\uXXXX escape (valid inside a JSON
    string too, so JSON output stays JSON)."""
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def echo(text: str = "", *, err: bool = False, nl: bool = True) -> None:
    """Print for the command line. Everything the CLI prints goes through here: model
    and server text are shown, never obeyed by the terminal."""
    click.echo(terminal_safe(text), err=err, nl=nl)
_format_warning = warnings.formatwarning


def _format(message, category, filename, lineno, line=None) -> str:
    if issubclass(category, (DataWarning, EngineWarning)):  # the message says what and where
        return f"warning: {terminal_safe(str(message))}\n"
    return _format_warning(message, category, filename, lineno, line)


def show_data_warnings() -> None:
    """Print each DataWarning (a torn or repeated record read around) and EngineWarning
    (a kernel that did not build) as one line."""
    warnings.formatwarning = _format


def handle_errors(fn):
    """Print an EvalpipeError as one line and exit with its code (2 for bad input)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except EvalpipeError as exc:
            echo(f"error: {exc}", err=True)
            sys.exit(exc.exit_code)

    return wrapper


def write_output(text: str, out: str | None) -> None:
    """Write to OUT atomically (a reader never sees half a file), else to stdout."""
    if out:
        path = Path(out)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text, encoding="utf-8", errors="backslashreplace")  # a lone surrogate
        tmp.replace(path)
        echo(f"wrote {path}", err=True)
    else:
        echo(text, nl=False)
