"""The bundled question sets and the site corpus: counts, languages, validity."""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys
import unicodedata
from collections import Counter
from pathlib import Path

import pytest

from evalpipe._validate import validate_paths
from evalpipe.corpus import chunk_corpus, load_corpus
from evalpipe.questions import load_questions
from evalpipe.tools.builtin import CALCULATOR

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "datasets"
SITE = DATA / "site"
SUITES = ("arithmetic", "plan", "site_rag", "control")


def records(name: str, folder: Path = DATA) -> list[dict]:
    with open(folder / f"{name}.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def test_import_datasets_is_still_hugging_face():
    """The bundled data folder is named `datasets`: it must not shadow Hugging Face's
    package of that name for a script run from the checkout (evalpipe itself no longer
    reads questions with it)."""
    # importorskip would be fooled: without Hugging Face's package, `import datasets`
    # finds this very folder as a namespace package. Ask the installed distributions.
    try:
        importlib.metadata.distribution("datasets")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("Hugging Face datasets is not installed: nothing to shadow")
    assert not (DATA / "__init__.py").exists()
    out = subprocess.run([sys.executable, "-c",
                          ("import datasets; print(datasets.load_dataset.__module__, "
                          "datasets.__file__)")],
                         cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.startswith("datasets.load"), out
    assert "site-packages" in out or "dist-packages" in out, out


def test_bundled_sets_validate_with_zero_errors():
    assert validate_paths([str(DATA)], corpus_root=str(SITE)) == []


def test_committed_files_match_the_generator():
    run = subprocess.run([sys.executable, str(DATA / "generate.py"), "--check"], cwd=REPO,
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr


@pytest.mark.parametrize("suite", SUITES)
def test_each_set_loads_through_the_question_loader(suite):
    questions = load_questions(DATA / f"{suite}.jsonl")
    assert {q.suite for q in questions} == {suite}


@pytest.mark.parametrize(("suite", "minimum"), [("arithmetic", 150), ("plan", 80),
                                                ("site_rag", 100), ("control", 40)])
def test_counts_and_language_split(suite, minimum):
    rs = records(suite)
    assert len(rs) >= minimum
    langs = Counter(r["lang"] for r in rs)
    assert set(langs) == {"vi", "en"}
    assert 0.4 <= langs["vi"] / len(rs) <= 0.6, langs


def test_arithmetic_is_one_call_mostly_on_the_calculator():
    rs = records("arithmetic")
    assert all(len(r["gold_calls"]) == 1 for r in rs)
    names = Counter(r["gold_calls"][0]["name"] for r in rs)
    assert sum(names[n] for n in CALCULATOR) >= 120
    assert names["power"] > 0 and names["sqrt"] > 0
    tags = Counter(t for r in rs for t in r["tags"])
    assert tags["negative"] >= 10 and tags["decimal"] >= 10
    assert all(any(t.startswith("difficulty:") for t in r["tags"]) for r in rs)
    assert len({t for t in tags if t.startswith("style:")}) >= 3
    for r in rs:  # decimal answers have at most 4 decimals
        assert round(r["answer"], 4) == r["answer"], r


def test_plans_have_two_to_four_dependent_steps():
    rs = records("plan")
    tags = Counter(t for r in rs for t in r["tags"])
    assert tags["parallel"] >= 10 and tags["reversed_order"] >= 10
    for r in rs:
        steps = r["gold_calls"]
        assert 2 <= len(steps) <= 4 and f"steps:{len(steps)}" in r["tags"]
        refs = {v for s in steps for v in s["arguments"].values() if isinstance(v, str)}
        assert refs, r["id"]  # at least one step depends on another
        if "parallel" in r["tags"]:  # two steps without references run side by side
            free = [s for s in steps if not any(isinstance(v, str)
                                                for v in s["arguments"].values())]
            assert len(free) >= 2, r["id"]


def test_site_rag_gold_passages_and_abstentions():
    rs = records("site_rag")
    abstain = [r for r in rs if r["answer_type"] == "abstain"]
    assert len(abstain) >= 20
    assert all(r["gold_passages"] == [] and r["gold_calls"] == [] for r in abstain)
    assert {r["answer"] for r in abstain} == {"I don't know", "Tôi không biết"}
    answerable = [r for r in rs if r["answer_type"] != "abstain"]
    assert all(r["gold_passages"] and r["gold_calls"] == [] for r in answerable)
    tags = Counter(t for r in answerable for t in r["tags"])
    assert tags["numeric"] >= 20 and tags["cross_lingual"] >= 20 and tags["changed_fact"] >= 3
    docs = {d.id for d in load_corpus(SITE)}
    latest = {r["id"]: max(p["doc"] for p in r["gold_passages"]) for r in answerable}
    for r in answerable:  # a changed fact points at a post that is not the oldest one
        if "changed_fact" in r["tags"]:
            assert latest[r["id"]] > min(docs), r["id"]


def test_control_needs_no_tool_and_no_retrieval():
    for r in records("control"):
        assert r["gold_calls"] == [] and r["gold_passages"] == []


def test_sample_has_six_varied_questions_per_suite():
    for suite in SUITES:
        full = {r["id"]: r for r in records(suite)}
        sample = records(suite, DATA / "sample")
        assert len(sample) == 6
        assert all(full[r["id"]] == r for r in sample)
        assert Counter(r["lang"] for r in sample) == {"vi": 3, "en": 3}
    rag = records("site_rag", DATA / "sample")
    assert sum(r["answer_type"] == "abstain" for r in rag) == 2
    calls = [c["name"] for r in records("arithmetic", DATA / "sample") for c in r["gold_calls"]]
    assert set(calls) <= set(CALCULATOR) and len(set(calls)) >= 3


def test_corpus_size_languages_and_headers():
    docs = load_corpus(SITE)
    assert len(docs) >= 30
    total = sum(len(d.text) for d in docs)
    assert 180_000 <= total <= 300_000
    assert 200 <= len(chunk_corpus(docs, size=800)) <= 400
    langs = Counter()
    for d in docs:
        raw = (SITE / d.id).read_text(encoding="utf-8")
        assert raw == unicodedata.normalize("NFC", raw), d.id
        assert re.match(r"\d{4}-\d{2}-\d{2}-[a-z0-9-]+\.md$", d.id), d.id
        head = d.text[:400]
        assert head.startswith("# "), d.id
        for field in ("date", "author", "lang"):
            assert re.search(rf"^- {field}: \S", head, re.MULTILINE), (d.id, field)
        assert f"- date: {d.id[:10]}" in head, d.id
        langs[re.search(r"^- lang: (\w+)", head, re.MULTILINE).group(1)] += 1
    assert set(langs) == {"vi", "en"} and abs(langs["vi"] - langs["en"]) <= 4, langs
