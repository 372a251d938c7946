"""The per-sample table of `evalpipe show --table` and the measure-formats table."""

from __future__ import annotations

from synth import call, make_sample

from evalpipe._report.show import calls_made, calls_table
from evalpipe.measure import Validity, render_table
from evalpipe.questions import Question
from evalpipe.scoring import score_sample

ONE = Question(id="seed-1", suite="seed", question="1234 nhân 5678 bằng bao nhiêu?",
               answer=7006652, answer_type="number", lang="vi",
               gold_calls=[{"id": "s1", "name": "multiply", "arguments": {"a": 1234, "b": 5678}}])
CAPITAL = Question(id="seed-2", suite="seed", question="Thủ đô của Việt Nam là gì?",
                   answer="Hà Nội", answer_type="text", lang="vi", gold_calls=[])


def test_a_loop_is_written_once_with_its_count():
    loop = make_sample(ONE, stop_reason="turn_limit",
                       steps=[[call("multiply", {"a": 1234, "b": 5678}, 7006652)]] * 4)
    assert calls_made(loop) == "multiply(1234, 5678) → 7006652 ×4"
    refused = make_sample(ONE, "x", steps=[[call("times", {"a": 1}, error="unknown_tool")]])
    assert calls_made(refused) == "times(1) → unknown_tool"
    assert calls_made(make_sample(CAPITAL, "Hồ Chí Minh")) == "-"


def test_the_table_has_one_row_per_sample_with_its_verdict():
    samples = [
        make_sample(ONE, stop_reason="turn_limit", cell_id="c",
                    steps=[[call("multiply", {"a": 1234, "b": 5678}, 7006652)]] * 4),
        make_sample(CAPITAL, "Thủ đô là Hồ Chí Minh | TP.HCM.", cell_id="c"),
    ]
    scored = [score_sample(s, q) for s, q in zip(samples, (ONE, CAPITAL))]
    table = calls_table(samples, scored, {"seed-1": ONE, "seed-2": CAPITAL})
    lines = table.splitlines()
    assert lines[0] == "| cell | question | calls made | answer | verdict |"
    assert lines[2] == ("| c | 1234 nhân 5678 bằng bao nhiêu? | multiply(1234, 5678) → 7006652 "
                        "×4 | - | turn_limit (repeated_call) |")
    assert lines[3] == ("| c | Thủ đô của Việt Nam là gì? | - | Thủ đô là Hồ Chí Minh \\| "
                        "TP.HCM. | wrong_answer |")
    assert calls_table(samples, scored, {}, cell="other").count("\n") == 2


def test_measure_table_says_when_no_call_was_attempted():
    tried = Validity(samples=8, samples_attempted=6, samples_valid=5, samples_valid_strict=0,
                     attempts=9, valid=8, valid_strict=0, error_kinds={"not_json": 1},
                     strict_error_kinds={"untagged_call": 8, "not_json": 1})
    never = Validity(samples=8)
    lines = render_table([("qwen", "hermes", tried), ("qwen", "xml", never)]).splitlines()
    assert lines[2] == ("| qwen | hermes | 6/8 (75%) | 9 | 8/9 (89%) | 0/9 (0%) | 5/6 (83%) | "
                        "0/6 (0%) | not_json 1 | untagged_call 8, not_json 1 |")
    assert lines[3].count("no call attempted") == 4 and "None" not in lines[3]
