"""Retrieval-only evaluation rows and the Markdown table."""

from __future__ import annotations

import pytest

from evalpipe.corpus import Document, chunk_corpus
from evalpipe.errors import InputError
from evalpipe.questions import Question
from evalpipe.retrieval.evaluate import evaluate_retrievers, format_table, method_label

DOCS = [
    Document("cats.md", "Cats sleep most of the day on the sofa."),
    Document("tea.md", "Green tea grows in Thái Nguyên and dries in the sun."),
    Document("may-chu.md", "Máy chủ của công ty đặt ở Hòa Bình."),
]
CHUNKS = chunk_corpus(DOCS, size=200)


def q(qid: str, text: str, lang: str, doc: str | None) -> Question:
    gold = [{"doc": doc, "start": 0, "end": 10}] if doc else []
    return Question(qid, "site_rag", text, "x", lang=lang, gold_passages=gold)


QUESTIONS = [
    q("e1", "where do cats sleep", "en", "cats.md"),
    q("e2", "green tea sun", "en", "tea.md"),
    q("e3", "cats sofa", "en", "tea.md"),  # gold is elsewhere: BM25 ranks tea below or never
    q("v1", "máy chủ ở đâu", "vi", "may-chu.md"),
    q("n1", "no gold here", "en", None),
]


def test_rows_per_method_and_language() -> None:
    rows = evaluate_retrievers(QUESTIONS, CHUNKS, [{"method": "bm25"}], k=1)
    assert [(r["method"], r["lang"], r["count"]) for r in rows] == [
        ("bm25", "all", 4), ("bm25", "en", 3), ("bm25", "vi", 1)]
    all_, en, vi = rows
    assert en["recall"] == pytest.approx(2 / 3) and en["hit"] == pytest.approx(2 / 3)
    assert vi["recall"] == 1.0 and vi["mrr"] == 1.0
    assert all_["recall"] == pytest.approx(3 / 4)
    assert all_["k"] == 1
    assert 0 <= all_["recall_lo"] <= all_["recall"] <= all_["recall_hi"] <= 1
    assert 0 <= all_["hit_lo"] <= all_["hit"] <= all_["hit_hi"] <= 1


def test_several_methods_and_table() -> None:
    methods = [{"method": "bm25"}, {"method": "bm25", "bm25": {"variant": "robertson"},
                                     "bigrams": False}, {"name": "mine", "method": "bm25"}]
    rows = evaluate_retrievers(QUESTIONS, CHUNKS, methods, k=3)
    labels = [r["method"] for r in rows if r["lang"] == "all"]
    assert labels == ["bm25", "bm25 variant=robertson bigrams=False", "mine"]
    table = format_table(rows)
    lines = table.strip().splitlines()
    assert lines[0].startswith("| method | lang | n | recall@3 |")
    assert len(lines) == 2 + len(rows)
    assert "| bm25 | vi | 1 | 1.000 |" in table


def test_no_gold_questions_give_empty_rows() -> None:
    rows = evaluate_retrievers([q("n1", "x", "en", None)], CHUNKS, [{"method": "bm25"}])
    assert rows == [{"method": "bm25", "lang": "all", "k": 3, "count": 0, "recall": None,
                     "hit": None, "mrr": None, "ndcg": None, "recall_lo": None,
                     "recall_hi": None, "hit_lo": None, "hit_hi": None}]
    assert "| bm25 | all | 0 | – |" in format_table(rows)


def test_bad_method_is_an_input_error() -> None:
    with pytest.raises(InputError):
        evaluate_retrievers(QUESTIONS, CHUNKS, [{"method": "tfidf"}])


def test_method_labels() -> None:
    assert method_label({}) == "bm25"
    weighted = {"method": "hybrid_weighted", "weight": 0.3}
    assert method_label(weighted) == "hybrid_weighted weight=0.3"
    assert method_label({"method": "dense", "bigrams": False}) == "dense"


def test_custom_grouping() -> None:
    rows = evaluate_retrievers(QUESTIONS, CHUNKS, [{"method": "bm25"}], k=1,
                               group=lambda q: "vi-or-e1" if q.id in ("v1", "e1") else "rest")
    assert [(r["lang"], r["count"], r["recall"]) for r in rows] == [
        ("all", 4, 0.75), ("rest", 2, 0.5), ("vi-or-e1", 2, 1.0)]


def test_the_command_scores_the_default_retriever_where_the_config_names_none(tmp_path) -> None:
    """A config that retrieves nothing is scored with the retriever settings' defaults
    (the command spells no method of its own)."""
    import json

    from click.testing import CliRunner

    from evalpipe.cli import main
    from evalpipe.retrieval import RetrieverSettings

    (tmp_path / "site").mkdir()
    for doc in DOCS:
        (tmp_path / "site" / doc.id).write_text(doc.text, encoding="utf-8")
    (tmp_path / "q.jsonl").write_text(json.dumps(
        {"id": "e1", "suite": "site_rag", "question": "where do cats sleep", "answer": "sofa",
         "gold_passages": [{"doc": "cats.md", "start": 0, "end": 10}]}) + "\n")
    (tmp_path / "c.yaml").write_text(f"questions: [{tmp_path / 'q.jsonl'}]\n"
                                     f"corpus: {tmp_path / 'site'}\n")
    ran = CliRunner().invoke(main, ["retrieve", "--config", str(tmp_path / "c.yaml"), "--json"])
    assert ran.exit_code == 0, ran.output
    rows = json.loads(ran.output)
    assert {r["method"] for r in rows} == {RetrieverSettings().method}
    assert rows[0]["lang"] == "all" and rows[0]["hit"] == 1.0
