"""`evalpipe measure-formats`: format validity of one model per tool-call format."""

from __future__ import annotations

import json

import click

from evalpipe.cli.common import echo, handle_errors
from evalpipe.formats import FORMATS


@click.command("measure-formats")
@click.option("--model", default="smollm2-135m", show_default=True,
              help="Model id or alias; several, comma-separated, are measured one after another.")
@click.option("--formats", default="hermes,json,xml", show_default=True,
              help=f"Comma-separated tool-call formats ({', '.join(FORMATS)}).")
@click.option("--questions", "question_paths", multiple=True, type=click.Path(exists=True),
              help="Question files (repeatable). Default: the sample arithmetic and plan sets.")
@click.option("--max-new-tokens", type=click.IntRange(min=1), default=96, show_default=True)
@click.option("--turns", type=click.IntRange(min=1), default=2, show_default=True,
              help="Generations per question.")
@click.option("--dump", type=click.Path(dir_okay=False),
              help="Write the raw replies per format to this JSON file (for fixtures).")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object per model and format instead of the table.")
@handle_errors
def measure_formats(model, formats, question_paths, max_new_tokens, turns, dump, as_json):
    """Run questions through each format (calculator + math tools) and print, per model
    and format, the share of tool-call attempts that parsed and validated, lenient and
    strict."""
    from evalpipe.backends import load_backend
    from evalpipe.formats import get_format
    from evalpipe.measure import DEFAULT_QUESTIONS, render_table, run_format, validity
    from evalpipe.questions import load_questions

    names = formats.split(",")
    for name in names:
        get_format(name)  # a misspelt format stops here, before the model loads
    questions = [q for path in (question_paths or DEFAULT_QUESTIONS)
                 for q in load_questions(path)]
    rows, replies = [], {}
    for model_id in model.split(","):
        backend = load_backend({"id": model_id})
        for name in names:
            samples = run_format(backend, name, questions, max_new_tokens=max_new_tokens,
                                 max_turns=turns)
            result = validity(samples)
            rows.append((model_id, name, result))
            if as_json:
                echo(json.dumps({"model": model_id, "format": name, **result.rates()}))
            replies.setdefault(model_id, {})[name] = [t["raw"] for s in samples
                                                      for t in s.turns]
        del backend  # one model in memory at a time
    if not as_json:
        echo(render_table(rows), nl=False)
    if dump:
        single = next(iter(replies.values())) if len(replies) == 1 else replies
        with open(dump, "w", encoding="utf-8") as f:
            json.dump(single, f, ensure_ascii=False, indent=1)
