"""`evalpipe retrieve`: retrieval-only evaluation, no model."""

from __future__ import annotations

import json

import click

from evalpipe.cli.common import DEFAULT_CONFIG, echo, handle_errors
from evalpipe.retrieval import RETRIEVERS


@click.command()
@click.option("--config", "config_path", default=DEFAULT_CONFIG, show_default=True,
              type=click.Path(dir_okay=False), help="Run config: its questions and corpus.")
@click.option("--method", "methods", multiple=True,
              help=f"Retriever to evaluate ({', '.join(RETRIEVERS)}); repeatable. "
                   "Default: the config's retrieval methods.")
@click.option("--k", type=click.IntRange(min=1), help="Rank cut-off (default: the config's k).")
@click.option("--questions", "question_paths", multiple=True, type=click.Path(exists=True),
              help="Question files instead of the config's (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print rows as JSON instead of a table.")
@handle_errors
def retrieve(config_path, methods, k, question_paths, as_json):
    """Score retrievers alone: recall@k, hit@k, MRR, nDCG per method and language."""
    from evalpipe.config import load_config
    from evalpipe.corpus import chunk_corpus, load_corpus
    from evalpipe.errors import InputError
    from evalpipe.questions import load_questions, question_sources
    from evalpipe.retrieval import resolve_settings
    from evalpipe.retrieval.evaluate import evaluate_retrievers, format_table

    config = load_config(config_path)
    if not config.corpus:
        raise InputError("the config names no corpus", file=config.source, field="corpus")
    paths = question_sources(question_paths or config.sources())
    questions = [q for p in paths for q in load_questions(p, config.question_limits.limits())]
    settings = [{"method": m} for m in methods] or [
        {key: v for key, v in r.record().items() if key not in ("mode", "k")}
        for r in config.retrieval if r.on] or [{}]  # the retriever settings' defaults
    for s in settings:
        resolve_settings(s)  # a misspelt --method stops here, before any index or model
    docs = load_corpus(config.corpus)
    chunks = chunk_corpus(docs, config.chunking.size, config.chunking.overlap)
    rows = evaluate_retrievers(questions, chunks, settings, k=k or config.k)
    echo(json.dumps(rows, indent=2) if as_json else format_table(rows))

