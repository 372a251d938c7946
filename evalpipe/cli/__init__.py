"""The evalpipe command line: one module per group of commands, registered here.

Commands are thin: they parse options and call the library. No library module
imports this package.
"""

from __future__ import annotations

import os
import sys

import click

from evalpipe.cli import (
    audit,
    check,
    import_cmd,
    judge,
    measure,
    report,
    retrieve,
    run,
    show,
    view,
)
from evalpipe.cli.common import show_data_warnings


@click.group()
@click.version_option(package_name="evalpipe")
def main():
    """Batch evaluation of LLM tool calling, agent loops and RAG."""
    show_data_warnings()
    # As `python -m evalpipe` does: a custom tool module in the current folder imports
    # (custom_tools: [my_tools:lookup]) without PYTHONPATH=.
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())


for command in (run.run, run.plan, run.score, check.validate, check.models, report.report,
                report.compare, retrieve.retrieve, measure.measure_formats, show.show,
                audit.audit, judge.judge, import_cmd.import_group, view.view):
    main.add_command(command)

if __name__ == "__main__":
    main()
