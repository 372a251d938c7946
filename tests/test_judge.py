"""The model-graded judge: prompts in both orders, verdicts read and combined, recorded
per sample, re-scored without the judge, and its agreement with a labelled set measured."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from helpers import ScriptedBackend
from synth import make_sample

from evalpipe.cli import main
from evalpipe.config import parse_config
from evalpipe.judge import Judge, judge_agreement, judge_run
from evalpipe.questions import Question
from evalpipe.runner import score_run
from evalpipe.scoring.agreement import load_labels
from evalpipe.scoring.judging import combine, judge_messages, parse_verdict
from evalpipe.store import RunStore

Q = Question(id="q1", suite="arithmetic", question="What is (12 + 30) * 7?", answer=294,
             answer_type="number", lang="en", gold_calls=None)
UNDECIDED = "Step one 294, step two 42, last 17"  # only the last-number fallback chose
DECIDED = "The answer is 294."


def by_order(first: str, second: str):
    """A judge that answers `first` when the reference comes before the reply."""
    def reply(prompt: str) -> str:
        reference_first = prompt.index("Reference answer") < prompt.index("Reply to grade")
        return first if reference_first else second
    return ScriptedBackend(reply, "judge-m")


@pytest.mark.parametrize("raw, verdict", [
    ("VERDICT: CORRECT\nREASON: same number", True),
    ("**VERDICT:** INCORRECT\nREASON: a range", False),
    ("VERDICT: ĐÚNG\nREASON: đúng số", True),
    ("Correct. The reply says 294.", True),
    ("no", False),
    ("The reply mentions 294 and 17.", None),
    ("", None),
])
def test_a_verdict_is_read_or_left_unread(raw, verdict):
    assert parse_verdict(raw)[0] is verdict


def test_both_orders_are_asked_and_must_agree():
    ref_first = judge_messages("Q?", "294", "It is 294", "number", "en", reference_first=True)
    ref_last = judge_messages("Q?", "294", "It is 294", "number", "en", reference_first=False)
    assert ref_first[0] == ref_last[0] and ref_first[1] != ref_last[1]
    assert "Đáp án chuẩn" in judge_messages("Q?", "294", "294", "number", "vi", True)[1][
        "content"]
    assert combine([True, True]) is True and combine([True, False]) is None
    item = {"question": Q.question, "answer": 294, "aliases": [], "answer_type": "number",
            "lang": "en", "reply": UNDECIDED}
    [agreed] = Judge({"id": "judge-m"}, backend=by_order("VERDICT: CORRECT",
                                                         "VERDICT: CORRECT")).grade([item])
    assert agreed["verdict"] is True and agreed["consistent"] and len(agreed["prompts"]) == 2
    [split] = Judge({"id": "judge-m"}, backend=by_order("VERDICT: CORRECT",
                                                        "VERDICT: INCORRECT")).grade([item])
    assert split["verdict"] is None and not split["consistent"]
    assert split["raw"] == ["VERDICT: CORRECT", "VERDICT: INCORRECT"]


def _run(tmp_path, finals):
    store = RunStore(tmp_path / "run")
    store.path.mkdir()
    store.write_json("manifest.json", {"run_id": "r", "status": "finished", "config": {}})
    store.write_questions([Q])
    store.append_samples([make_sample(Q, final, cell_id=f"c{i}") for i, final in
                          enumerate(finals)])
    return store


def test_a_run_is_judged_where_the_rules_abstain_and_rescored_without_the_judge(tmp_path):
    store = _run(tmp_path, [UNDECIDED, DECIDED])
    judge = Judge({"id": "judge-m"}, backend=by_order("VERDICT: CORRECT\nREASON: 294 first",
                                                      "VERDICT: CORRECT\nREASON: 294"))
    assert judge_run(store.path, judge) == {"judged": 1, "consistent": 1}
    [record] = store.read_judgements()
    assert record["cell_id"] == "c0" and record["model"] == "judge-m"
    assert record["raw"] and record["reason"] == "294 first" and len(record["prompts"]) == 2
    scores = score_run(store)
    by_cell = {s["cell_id"]: s for s in scores["samples"]}
    assert by_cell["c0"]["verdict_source"] == "judge" and by_cell["c0"]["exact"] is True
    assert "judged" in by_cell["c0"]["flags"] and by_cell["c0"]["judge"]["model"] == "judge-m"
    assert by_cell["c1"]["verdict_source"] == "rules" and by_cell["c1"]["judge"] is None
    assert scores["verdicts"] == {"judge": 1, "judge_models": ["judge-m"], "undecided": 0}
    assert "1 answer verdicts came from the judge (judge-m" in (store.path / "table.md").read_text()
    from evalpipe._report.build import build_report
    from evalpipe._report.load import load_run
    from evalpipe._report.render import render_markdown

    report = render_markdown(build_report(load_run(store.path)))
    assert "1 answer verdicts came from the judge (judge-m" in report
    # `evalpipe score` reads the recorded verdicts: no judge model is loaded
    result = CliRunner().invoke(main, ["score", str(store.path)])
    assert result.exit_code == 0, result.output
    again = json.loads((store.path / "scores.json").read_text())
    assert {s["cell_id"]: s["verdict_source"] for s in again["samples"]} == {
        "c0": "judge", "c1": "rules"}


def test_use_all_judges_every_free_form_answer_and_the_judge_may_overrule(tmp_path):
    store = _run(tmp_path, [UNDECIDED, DECIDED])
    judge = Judge({"id": "judge-m"}, backend=by_order("VERDICT: INCORRECT", "VERDICT: INCORRECT"))
    assert judge_run(store.path, judge, use="all")["judged"] == 2
    scores = score_run(store)
    assert [s["exact"] for s in scores["samples"]] == [False, False]


def test_agreement_gives_kappa_and_raw_agreement_for_the_judge_and_the_rules():
    labels = load_labels()[:40]
    truth = {r["reply"]: r["label"] == "right" for r in labels}

    def oracle(prompt: str) -> str:
        reply = prompt.split("<<<\n", 1)[1].split("\n>>>", 1)[0]
        return "VERDICT: CORRECT" if truth[reply] else "VERDICT: INCORRECT"

    measured = judge_agreement(Judge({"id": "oracle"}, backend=ScriptedBackend(oracle)),
                               labels)
    assert measured["judge"]["raw_agreement"] == 1.0 and measured["judge"]["kappa"] == 1.0
    assert measured["judge"]["n"] == 40 and measured["rules"]["n"] <= 40
    assert 0.9 <= measured["rules"]["raw_agreement"] <= 1.0
    contrary = judge_agreement(Judge({"id": "contrary"}, backend=ScriptedBackend(
        lambda p: "VERDICT: INCORRECT" if truth[p.split("<<<\n", 1)[1].split("\n>>>", 1)[0]]
        else "VERDICT: CORRECT")), labels)
    assert contrary["judge"]["raw_agreement"] == 0.0 and contrary["judge"]["kappa"] < 0


def test_the_judge_is_a_config_section_named_like_a_model(tmp_path):
    config = parse_config({"questions": ["q.jsonl"], "judge": {"model": "smollm2-135m",
                                                               "use": "all"}})
    assert config.judge["model"] == {"id": "smollm2-135m", "backend": "transformers"}
    assert "judge" not in parse_config({"questions": ["q.jsonl"]}).to_dict()
    result = CliRunner().invoke(main, ["judge"])
    assert result.exit_code == 2 and "nothing to do" in result.output


def _small_labels(tmp_path, n):
    path = tmp_path / "labels.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n"
                            for r in load_labels()[:n]), encoding="utf-8")
    return path


@pytest.mark.slow
def test_the_embedded_model_judges_a_run_end_to_end_and_is_measured(tmp_path):
    from helpers import REPO

    import evalpipe

    labels = _small_labels(tmp_path, 3)
    model = {"id": "smollm2-135m", "dtype": "float32"}
    config = {"name": "judged", "questions": [str(REPO / "datasets/sample/control.jsonl")],
              "limit": 2, "models": [model], "toolsets": ["none"],
              "retrieval": [{"mode": "none"}],
              "generation": {"max_new_tokens": 24, "batch_size": 8},
              "judge": {"model": model, "use": "all", "max_new_tokens": 24,
                        "agreement": True, "labels": str(labels)}}
    run = evalpipe.run(config, out=tmp_path / "out", use_cache=False).run_dir
    store = RunStore(run)
    judgements = store.read_judgements()
    assert len(judgements) == 2  # use: all, two free-form answers
    assert all(j["model"] == "smollm2-135m" and len(j["prompts"]) == 2 and len(j["raw"]) == 2
               for j in judgements)
    measured = json.loads((run / "judge.json").read_text())
    assert measured["judge"]["n"] + measured["judge"]["inconsistent"] == 3
    assert measured["rules"]["n"] == 3 and "kappa" in measured["judge"]
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["judge"]["judged"] == 2 and "agreement" in manifest["judge"]
    scores = json.loads((run / "scores.json").read_text())
    sources = {s["question_id"]: s["verdict_source"] for s in scores["samples"]}
    judged = sum(j["verdict"] is not None for j in judgements)
    assert sum(v == "judge" for v in sources.values()) == judged
    # re-scored without the judge: the recorded verdicts give the same sources
    again = evalpipe.score(run)
    assert {s["question_id"]: s["verdict_source"] for s in again["samples"]} == sources
