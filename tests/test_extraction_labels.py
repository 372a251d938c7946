"""Answer extraction against a human grader: the labelled set, the default variant's
agreement, and the cases the grader and version 1 disagreed on."""

from __future__ import annotations

from collections import Counter

import pytest

from evalpipe.answer_line import final_answer_line, instruction
from evalpipe.scoring.agreement import agreement_table, disagreements, load_labels
from evalpipe.scoring.answers.match import DEFAULT_VARIANT, VARIANTS, make_gold, match_answer

ROWS = load_labels()


def test_the_labelled_set_covers_both_languages_every_type_and_real_replies():
    assert len(ROWS) >= 200
    assert all(r["label"] in ("right", "wrong") and r["reason"] for r in ROWS)
    cover = Counter((r["lang"], r["answer_type"]) for r in ROWS)
    assert all(cover[(lang, t)] >= 10 for lang in ("vi", "en")
               for t in ("number", "text", "abstain"))
    assert sum(r["source"].startswith("smollm2") for r in ROWS) >= 50
    assert len({r["id"] for r in ROWS}) == len(ROWS)


def test_the_default_variant_agrees_with_the_grader_on_97_percent_and_is_the_best():
    table = {row["variant"]: row["rate"] for row in agreement_table(ROWS)}
    assert set(table) == set(VARIANTS)
    assert table[DEFAULT_VARIANT] >= 0.97, disagreements(ROWS, DEFAULT_VARIANT)
    assert table[DEFAULT_VARIANT] == max(table.values())
    assert table["last"] < table[DEFAULT_VARIANT]  # version 1's rule is measurably worse


# (reply, answer, answer_type, aliases, lang, question, grader's verdict)
CASES = [
    ("a team of 12 people, including 10 people", 10, "number", [], "en",
     "How many people work at Tổ Ong Lab now?", False),
    ("It is not Caddy: it still runs nginx", "Caddy", "text", [], "en",
     "Which reverse proxy runs on cua-to?", False),
    ("Có 27 request bị lỗi 502", 27, "number", [], "vi",
     "Có bao nhiêu request bị lỗi 502?", True),
    ("42. Note: see step 3", 42, "number", [], "en", "What is 6 times 7?", True),
    ("60 minutes in 1 hour", 60, "number", [], "en", "How many minutes are in an hour?", True),
    ("13358 bao, tức khoảng 13 nghìn bao", 13358, "number", [], "vi",
     "Đã bán được bao nhiêu bao?", True),
    ("không chắc, nhưng có lẽ là ngày 12", "Tôi không biết", "abstain", [], "vi",
     "Offsite ở Huế diễn ra ngày nào?", False),
    ("Answer: 294\n\n12 + 30 is 42 and 42 times 7 gives 294; step 2 of 2.", 294, "number", [],
     "en", "What is (12 + 30) * 7?", True),
]


@pytest.mark.parametrize(("reply", "answer", "kind", "aliases", "lang", "question", "right"),
                         CASES)
def test_the_default_agrees_with_the_grader_where_version_1_did_not(reply, answer, kind,
                                                                    aliases, lang, question,
                                                                    right):
    gold = make_gold(answer, kind, aliases, lang, question)
    assert match_answer(reply, gold).exact is right
    assert match_answer(reply, gold, "last").exact is not right


@pytest.mark.parametrize("reply", ["The passages say nothing about it.",
                                   "The documents don't say how much RAM it has.",
                                   "Tài liệu không nhắc đến máy ong-tho-3."])
def test_saying_the_passages_do_not_tell_is_abstaining(reply):
    gold = make_gold("I don't know", "abstain", [], "en", "How much RAM does ong-tho-3 have?")
    assert match_answer(reply, gold).exact


def test_a_final_answer_line_is_read_first_in_either_language():
    assert final_answer_line("Bước 1: 12 + 30 = 42.\n**Đáp án:** 294") == "294"
    assert final_answer_line("Answer: Caddy\nFinal answer: nginx") == "nginx"  # the last one
    assert final_answer_line("The answer is 294.") is None
    gold = make_gold(294, "number", [], "vi", "Tính (12 + 30) nhân 7.")
    m = match_answer("Đáp án: 294. Ghi chú: xem bước 2", gold)
    assert (m.exact, m.rule) == (True, "final_line+leading")


def test_the_instruction_is_in_the_questions_language():
    assert "Answer:" in instruction("en") and "Đáp án:" in instruction("vi")
    assert instruction("fr") == instruction("en")


def test_a_hedged_guess_is_not_an_abstention_flag_either():
    gold = make_gold(12, "number", [], "vi", "Offsite ngày nào?")
    m = match_answer("Không chắc, nhưng có lẽ là ngày 12", gold)
    assert m.exact and not m.abstained


def test_final_answer_line_setting_asks_in_the_questions_language_through_the_engine():
    from helpers import ScriptedBackend

    from evalpipe.backends.base import GenerationSettings
    from evalpipe.engine import CellRuntime, Engine
    from evalpipe.formats import get_format
    from evalpipe.questions import Question
    from evalpipe.tools import build_toolset

    questions = [Question(id="v", suite="control", question="Một tuần có mấy ngày?", answer=7,
                          answer_type="number", lang="vi", gold_calls=[]),
                 Question(id="e", suite="control", question="How many days in a week?",
                          answer=7, answer_type="number", lang="en", gold_calls=[])]
    prompts = []

    def reply(prompt):
        prompts.append(prompt)
        return "Một tuần có 7 ngày.\nĐáp án: 7" if "Một tuần" in prompt else "Answer: 7"

    def run(flag):
        prompts.clear()
        cell = CellRuntime("m/hermes/none/no-rag", "fp", {"toolset": "none"},
                           ScriptedBackend(reply), get_format("hermes"), build_toolset("none"),
                           GenerationSettings(), final_answer_line=flag)
        samples = [s for ended in Engine().run(cell, questions, "run") for s in ended]
        return {s.question_id: s.messages[0]["content"] for s in samples}

    asked = run(True)
    assert asked["v"].endswith(instruction("vi")) and asked["e"].endswith(instruction("en"))
    plain = run(False)
    assert instruction("vi") not in plain["v"] and instruction("en") not in plain["e"]


def test_final_answer_line_is_a_config_key(tmp_path):
    from evalpipe.config import load_config

    base = (tmp_path / "c.yaml")
    base.write_text("questions: [q.jsonl]\nmodels: [{id: smollm2-135m}]\n"
                    "retrieval: [{mode: none}]\nfinal_answer_line: true\n", encoding="utf-8")
    assert load_config(base).final_answer_line is True


# --- the grading classes (evalpipe/scoring/labels/grading_labels.jsonl and .md) ---------

ISSUE_CLASSES = ("self_correction", "magnitude", "number_words", "range", "cue_trap",
                 "name_inside", "rejected_gold", "date_time", "abstain_worded", "hedge_answer")


def test_the_grading_set_is_mostly_real_replies_in_both_languages_and_every_class():
    from evalpipe.scoring.agreement import GRADING

    rows = load_labels(GRADING)
    assert len(rows) >= 150 and len({r["id"] for r in rows}) == len(rows)
    real = [r for r in rows if r["source"] != "written"]
    assert len(real) > len(rows) / 2
    for cls in ISSUE_CLASSES:
        langs = {r["lang"] for r in rows if r["class"] == cls}
        assert langs == {"en", "vi"}, cls
    assert all(r["label"] in ("right", "wrong") and r["reason"] and
               isinstance(r["abstained"], bool) for r in rows)
    assert {r["split"] for r in rows} == {"tune", "held_out", "real_dev", "real_held_out"}


def test_the_rules_agree_with_the_grader_on_97_percent_of_what_they_decide():
    from evalpipe.scoring.agreement import GRADING, class_table

    rows = load_labels(GRADING)
    table = {row["class"]: row for row in class_table(rows)}
    overall = table["all"]
    assert overall["decided"] >= 0.95 * overall["n"]  # they abstain rarely
    assert overall["rate"] >= 0.97
    for cls in ISSUE_CLASSES:
        assert table[cls]["rate"] >= 0.9, table[cls]
    real = class_table([r for r in rows if r["source"] != "written"], "split")
    assert all(row["rate"] >= 0.97 for row in real), real
