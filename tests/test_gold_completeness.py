"""Gold that says what a correct answer may be: the completeness lint, the bundled sets it
checks, and the default job's sample."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from evalpipe._validate import gold_warnings
from evalpipe.cli import main as cli
from evalpipe.questions import load_questions

REPO = Path(__file__).resolve().parents[1]
OLD = ("# 2024 hosts\n\n- lang: en\n\n| host | role | notes |\n|---|---|---|\n"
       "| cua-to | reverse proxy | nginx 1.24 |\n")
NEW = ("# 2025 hosts\n\n- lang: en\n\nAfter the migration, the host table changed.\n\n"
       "| host | role | notes |\n|---|---|---|\n"
       "| cua-to | reverse proxy (Caddy 2.8.4) | 4 vCPU |\n")
MIGRATION = ("# Moving to Caddy\n\n- lang: en\n\nAs of 15 January 2025, cua-to runs Caddy 2.8.4 "
             "as its reverse proxy.\n")


def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "site"
    root.mkdir()
    for name, text in (("old.md", OLD), ("new.md", NEW), ("migration.md", MIGRATION)):
        (root / name).write_text(text, encoding="utf-8")
    return root


def question_file(tmp_path: Path, spans: list[tuple[str, str]]) -> Path:
    texts = {"old.md": OLD, "new.md": NEW, "migration.md": MIGRATION}
    gold = [{"doc": d, "start": texts[d].index(q), "end": texts[d].index(q) + len(q)}
            for d, q in spans]
    record = {"id": "r1", "suite": "site_rag", "lang": "en", "answer": "Caddy",
              "question": "Which reverse proxy software runs on cua-to today?",
              "answer_type": "text", "gold_calls": [], "gold_passages": gold}
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    return path


def test_a_chunk_restating_the_answer_outside_the_gold_is_named_with_doc_start_end(tmp_path):
    site = corpus(tmp_path)
    path = question_file(tmp_path, [("migration.md", "cua-to runs Caddy 2.8.4")])
    warnings = gold_warnings(path, str(site))
    assert len(warnings) == 1
    assert f"{path}:1: gold_passages: r1:" in warnings[0]
    assert f"new.md:0-{len(NEW.rstrip())}" in warnings[0]  # the whole post is one chunk
    assert "old.md" not in warnings[0]  # nginx's table does not state Caddy


def test_completing_the_gold_silences_the_lint(tmp_path):
    site = corpus(tmp_path)
    path = question_file(tmp_path, [("migration.md", "cua-to runs Caddy 2.8.4"),
                                    ("new.md", "| cua-to | reverse proxy (Caddy 2.8.4) |")])
    assert gold_warnings(path, str(site)) == []


def test_validate_prints_warnings_and_still_passes(tmp_path):
    site = corpus(tmp_path)
    path = question_file(tmp_path, [("migration.md", "cua-to runs Caddy 2.8.4")])
    result = CliRunner().invoke(cli, ["validate", str(path), "--corpus", str(site)])
    assert result.exit_code == 0, result.output
    assert "warning:" in result.output and "new.md:" in result.output
    assert "1 gold-completeness warning(s)" in result.output


# The warnings left on the bundled set, each explained in datasets/README.md.
EXPLAINED = {"rag-013", "rag-014", "rag-021", "rag-028", "rag-050", "rag-056", "rag-063",
             "rag-090", "rag-095", "rag-104", "rag-127", "rag-128", "rag-131", "rag-137",
             "rag-148", "rag-167", "rag-170"}


SAME_POST = ("# Upgrading the database\n\n- lang: en\n\nDuring the ong-chua PostgreSQL upgrade, "
             "writes were off for 23 minutes.\n\n" + "Filler text. " * 70
             + "\n\nThe upgrade night, step by step. In total: 23 minutes.\n")
FLEET = ("# Fleet 2025\n\n- lang: en\n\nThe machines after the upgrades:\n\n"
         "| Host | Role | CPU |\n|---|---|---|\n| cua-to | proxy | 4 vCPU |\n"
         "| ong-chua | database | AMD EPYC 9124 |\n")
GOLD_CPU = "# Hardware\n\n- lang: en\n\nThe new ong-chua has an AMD EPYC 9124 CPU.\n"


def _one_question(tmp_path, docs, record):
    root = tmp_path / "site"
    root.mkdir()
    for name, text in docs.items():
        (root / name).write_text(text, encoding="utf-8")
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"suite": "site_rag", "lang": "en", "gold_calls": [],
                                **record}) + "\n", encoding="utf-8")
    return path, root


def test_another_chunk_of_the_gold_post_and_a_table_row_elsewhere_are_found(tmp_path):
    post = SAME_POST
    gold = "writes were off for 23 minutes"
    start = post.index(gold)
    path, root = _one_question(tmp_path, {"upgrade.md": post}, {
        "id": "r2", "question": "For how many minutes were writes off during the ong-chua "
        "PostgreSQL upgrade?", "answer": 23, "answer_type": "number",
        "gold_passages": [{"doc": "upgrade.md", "start": 0, "end": start + len(gold)}]})
    [warning] = gold_warnings(path, str(root))
    assert "another chunk of the gold's post" in warning and "In total: 23 minutes" in warning
    (tmp_path / "site").rename(tmp_path / "site-1")
    gold = "AMD EPYC 9124 CPU"
    path, root = _one_question(tmp_path, {"hardware.md": GOLD_CPU, "fleet.md": FLEET}, {
        "id": "r3", "question": "What CPU does the database server ong-chua use?",
        "answer": "AMD EPYC 9124", "answer_type": "text",
        "gold_passages": [{"doc": "hardware.md", "start": GOLD_CPU.index(gold),
                           "end": GOLD_CPU.index(gold) + len(gold)}]})
    [warning] = gold_warnings(path, str(root))
    assert "a table row, with its header" in warning and "fleet.md" in warning


def test_bundled_rag_set_warns_only_where_datasets_readme_explains_why():
    warnings = gold_warnings(REPO / "datasets/site_rag.jsonl", str(REPO / "datasets/site"))
    flagged = {w.split(": ")[2].rstrip(":") for w in warnings}
    assert flagged == EXPLAINED
    readme = (REPO / "datasets/README.md").read_text(encoding="utf-8")
    assert all(qid in readme for qid in EXPLAINED)


def test_head_counts_are_numbers_so_a_stray_ten_does_not_pass():
    by_id = {q.id: q for q in load_questions(str(REPO / "datasets/site_rag.jsonl"))}
    for qid in ("rag-104", "rag-177"):
        assert by_id[qid].answer_type == "number"
        assert "10" not in by_id[qid].aliases and "5" not in by_id[qid].aliases


def test_power_questions_use_english_ordinals():
    text = (REPO / "datasets/arithmetic.jsonl").read_text(encoding="utf-8")
    for wrong in ("1th", "2th", "3th"):
        assert f" {wrong} " not in text


def test_the_default_jobs_cut_of_each_sample_shows_its_suites_mix():
    """The default job reads the first `limit` questions of each sample file: they
    must not all be of one kind (both answerable RAG questions cross-lingual once made
    retrieval look broken)."""
    import yaml

    limit = yaml.safe_load((REPO / "configs/default.yaml").read_text())["limit"]

    def cut(suite):
        return load_questions(str(REPO / f"datasets/sample/{suite}.jsonl"))[:limit]

    for suite in ("arithmetic", "plan", "site_rag", "control"):
        assert sorted(q.lang for q in cut(suite)) == ["en", "en", "vi", "vi"], suite
    rag = cut("site_rag")
    kinds = sorted("abstain" if q.answer_type == "abstain" else
                   "cross" if "cross_lingual" in q.tags else "same" for q in rag)
    assert kinds == ["abstain", "cross", "same", "same"]
    assert {q.lang for q in rag if "cross_lingual" not in q.tags and q.gold_passages} == \
        {"vi", "en"}
    assert {q.gold_calls[0]["name"] for q in cut("arithmetic")} == \
        {"add", "subtract", "multiply", "divide"}
    assert sorted(len(q.gold_calls) for q in cut("plan")) == [2, 2, 3, 3]
    assert sorted(q.answer_type for q in cut("control")) == ["number", "text", "text", "text"]
