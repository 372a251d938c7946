"""Three hand-built samples (shaped as the engine writes them) for every category of the
ladder and every wrong_plan subtype, and the reason each scored sample records."""

from __future__ import annotations

import json

import pytest
from synth import call, chunk, make_sample

from evalpipe.questions import Question
from evalpipe.scoring import CATEGORIES, score_sample

SEQ = [{"id": "s1", "name": "add", "arguments": {"a": 12, "b": 30}},
       {"id": "s2", "name": "multiply", "arguments": {"a": "$s1", "b": 7}}]
CALC = Question(id="calc", suite="plan", question="Tính (12 + 30) nhân 7.", answer=294,
                answer_type="number", lang="vi", gold_calls=SEQ)
ONE = Question(id="one", suite="arithmetic", question="What is 868 times 60?", answer=52080,
               answer_type="number", lang="en",
               gold_calls=[{"id": "s1", "name": "multiply", "arguments": {"a": 868, "b": 60}}])
DIV = Question(id="div", suite="arithmetic", question="144 chia 12 bằng mấy?", answer=12,
               answer_type="number", lang="vi",
               gold_calls=[{"id": "s1", "name": "divide", "arguments": {"a": 144, "b": 12}}])
CTRL = Question(id="ctrl", suite="control", question="What is the capital of France?",
                answer="Paris", answer_type="text", lang="en", gold_calls=[])
CTRL_VI = Question(id="ctrl-vi", suite="control", question="Thủ đô của Việt Nam là gì?",
                   answer="Hà Nội", answer_type="text", aliases=["Hanoi"], lang="vi",
                   gold_calls=[])
GOLD = {"doc": "host.md", "start": 100, "end": 180}
RAG = Question(id="rag", suite="site_rag", question="Which web server runs on ong-tho?",
               answer="Caddy", answer_type="text", lang="en", gold_calls=[],
               gold_passages=[GOLD])
RAG_NUM = Question(id="rag-n", suite="site_rag", question="Có bao nhiêu request bị lỗi 502?",
                   answer=27, answer_type="number", lang="vi", gold_calls=[],
                   gold_passages=[GOLD])
ABSTAIN = Question(id="abs", suite="site_rag", question="How much RAM does ong-tho-3 have?",
                   answer="I don't know", answer_type="abstain", lang="en", gold_calls=[])
ABSTAIN_VI = Question(id="abs-vi", suite="site_rag", question="Mật khẩu Wi-Fi là gì?",
                      answer="Tôi không biết", answer_type="abstain", lang="vi", gold_calls=[])
OPEN = Question(id="open", suite="arithmetic", question="What is 6 times 7?", answer=42,
                answer_type="number", lang="en", gold_calls=None)

RIGHT = [[call("add", {"a": 12, "b": 30}, 42)], [call("multiply", {"a": 42, "b": 7}, 294)]]
SHOWN = [chunk("host.md", 90, 200, 1), chunk("other.md", 0, 120, 2)]
MISSED = [chunk("other.md", 0, 120, 1), chunk("host.md", 400, 520, 2)]


def searched(chunks, query="web server ong-tho", turn=0):
    """A search_site turn and the chunks the engine records for it."""
    hits = [dict(c, source="tool", query_index=turn) for c in chunks]
    return [call("search_site", {"query": query}, hits)], hits


def tool_rag(question, answer, chunks=None, **kw):
    """A sample from a cell where search_site is a tool (retrieval mode "tool")."""
    steps, retrieved = [], []
    if chunks is not None:
        step, retrieved = searched(chunks)
        steps = [step]
    kw.setdefault("toolset", "search")
    return make_sample(question, answer, steps=steps + kw.pop("steps", []),
                       retrieved=retrieved, retrieval_mode="tool", **kw)


def bad_parse():
    error = {"kind": "not_json", "message": "Expecting value", "snippet": "<tool_call>{add"}
    return {"raw": "<tool_call>{add 12 30</tool_call>", "parse_errors": [error],
            "strict_errors": [error]}


def malformed():
    return {"raw": '{"choices": []}', "finish_reason": "malformed",
            "malformed": "choices: empty, expected one choice"}


CASES = {
    "infra_error": [
        (CALC, make_sample(CALC, stop_reason="infra_error")),
        (CTRL, make_sample(CTRL, "Paris", error="CUDA out of memory")),
        (RAG, make_sample(RAG, "Caddy", final_turn={"finish_reason": "error"})),
    ],
    "malformed_reply": [  # the endpoint's reply did not fit the wire shape
        (CALC, make_sample(CALC, stop_reason="malformed_reply", steps=[malformed()])),
        (ABSTAIN, make_sample(ABSTAIN, stop_reason="malformed_reply", toolset="none",
                              steps=[malformed()])),  # no answer is not an abstention
        (CALC, make_sample(CALC, stop_reason="malformed_reply",
                           steps=[[call("add", {"a": 12, "b": 30}, 42)], malformed()])),
    ],
    "tool_failure": [  # the right call, and the tool failed it
        (ONE, make_sample(ONE, "I could not compute it.",
                          steps=[[call("multiply", {"a": 868, "b": 60}, error="timeout")]])),
        (DIV, make_sample(DIV, "12", steps=[[call("divide", {"a": 144, "b": 12},
                                                  error="tool_exception")]])),
        (CALC, make_sample(CALC, "42", steps=[[call("add", {"a": 30, "b": 12}, 42)],
                                              [call("multiply", {"a": 42, "b": 7},
                                                    error="tool_exception")]])),
        (OPEN, make_sample(OPEN, "", steps=[[call("multiply", {"a": 6, "b": 7},
                                                  error="timeout")]])),  # no plan to judge by
        (RAG, tool_rag(RAG, "", steps=[[call("search_site", {"query": "ong-tho web server"},
                                             error="timeout")]])),
        # the right call timed out first; what the model did after it is the failure's effect
        (ONE, make_sample(ONE, "5", steps=[[call("multiply", {"a": 868, "b": 60},
                                                 error="timeout")],
                                           [call("add", {"a": 868, "b": 60}, 928)]])),
    ],
    "correct": [
        (CALC, make_sample(CALC, "Kết quả là 294.", steps=RIGHT)),
        (RAG, tool_rag(RAG, "It runs Caddy.", SHOWN)),
        (ABSTAIN, tool_rag(ABSTAIN, "The passages say nothing about its RAM.", MISSED)),
    ],
    "malformed_call": [
        (CALC, make_sample(CALC, "300", steps=[bad_parse()])),
        (ONE, make_sample(ONE, "52080", steps=[bad_parse()])
         | {"final_answer": "52000"}),
        (RAG, tool_rag(RAG, "nginx", steps=[bad_parse()])),
        (ONE, make_sample(ONE, "", steps=[bad_parse(), [call("multiply", {"a": 868, "b": 60},
                                                             error="timeout")]])),
    ],
    "unknown_tool": [
        (CALC, make_sample(CALC, "300", steps=[[call("plus", {"a": 12, "b": 30},
                                                     error="unknown_tool")]])),
        (ONE, make_sample(ONE, "5", steps=[[call("times", {"a": 868, "b": 60},
                                                  error="unknown_tool")]])),
        (RAG, tool_rag(RAG, "nginx", steps=[[call("web_search", {"q": "ong-tho"},
                                                   error="unknown_tool")]])),
    ],
    "invalid_arguments": [
        (CALC, make_sample(CALC, "300", steps=[[call("add", {"x": 12},
                                                     error="invalid_arguments")]])),
        (DIV, make_sample(DIV, "10", steps=[[call("divide", {"a": "một trăm", "b": 12},
                                                   error="invalid_arguments")]])),
        (RAG, tool_rag(RAG, "nginx", steps=[[call("search_site", {"query": 3},
                                                   error="invalid_arguments")]])),
    ],
    "turn_limit": [
        (CALC, make_sample(CALC, stop_reason="turn_limit",
                           steps=[[call("add", {"a": 12, "b": 30}, 42)]] * 5)),
        (ONE, make_sample(ONE, stop_reason="turn_limit",
                          steps=[[call("multiply", {"a": 868, "b": 60}, 52080)]] * 5)),
        (RAG, tool_rag(RAG, "", SHOWN, stop_reason="turn_limit")),
    ],
    "no_tool_call": [
        (CALC, make_sample(CALC, "Kết quả là 300.")),
        (ONE, make_sample(ONE, "52000")),
        (RAG, tool_rag(RAG, "nginx")),  # a RAG question that never searched
    ],
    "unneeded_tool_call": [
        (CTRL, make_sample(CTRL, "Lyon", steps=[[call("add", {"a": 1, "b": 2}, 3)]])),
        (CTRL_VI, make_sample(CTRL_VI, "Huế", steps=[[call("multiply", {"a": 2, "b": 3}, 6)]])),
        # no tool was needed: the call that timed out was the mistake
        (CTRL, make_sample(CTRL, "", steps=[[call("add", {"a": 1, "b": 2}, error="timeout")]])),
        (CTRL, make_sample(CTRL, "Marseille", toolset="search", retrieval_mode="tool",
                           steps=[searched(MISSED, "capital of France")[0]])),
    ],
    "wrong_plan": [
        (CALC, make_sample(CALC, "Kết quả là 300.",
                           steps=[[call("add", {"a": 12, "b": 30}, 42)],
                                  [call("add", {"a": 42, "b": 7}, 49)]])),
        (ONE, make_sample(ONE, "1", steps=[[call("divide", {"a": 868, "b": 60}, 14.47)]])),
        # the operand was already wrong when the tool timed out: the model's mistake
        (ONE, make_sample(ONE, "", steps=[[call("multiply", {"a": 868, "b": 6},
                                                error="timeout")]])),
        (CALC, make_sample(CALC, "", steps=[[call("add", {"a": 12, "b": 31}, 43)],
                                            [call("multiply", {"a": 43, "b": 7},
                                                  error="timeout")]])),
        (RAG, tool_rag(RAG, "nginx", SHOWN, toolset="full",
                       steps=[[call("add", {"a": 1, "b": 2}, 3)]])),
    ],
    "misreported_result": [
        (CALC, make_sample(CALC, "Kết quả là 295.", steps=RIGHT)),
        (ONE, make_sample(ONE, "The answer is 5208.",
                          steps=[[call("multiply", {"a": 868, "b": 60}, 52080)]])),
        (DIV, make_sample(DIV, "144 / 12 = 14",
                          steps=[[call("divide", {"a": 144, "b": 12}, 12)]])),
    ],
    "retrieval_miss": [
        (RAG, make_sample(RAG, "nginx", retrieved=MISSED, retrieval_mode="prepend",
                          toolset="none")),
        (RAG, tool_rag(RAG, "It runs nginx.", MISSED)),
        (RAG_NUM, tool_rag(RAG_NUM, "Có 12 request.", MISSED)),
    ],
    "misread_context": [
        (RAG, make_sample(RAG, "Apache", retrieved=SHOWN, retrieval_mode="prepend",
                          toolset="none")),
        (RAG, tool_rag(RAG, "It is not Caddy: it still runs nginx.", SHOWN)),
        (RAG_NUM, tool_rag(RAG_NUM, "Có 30 request bị lỗi.", SHOWN)),
    ],
    "hallucinated_answer": [
        (ABSTAIN, make_sample(ABSTAIN, "It has 64 GB of RAM.", toolset="none")),
        (ABSTAIN, tool_rag(ABSTAIN, "ong-tho-3 has 32 GB.", MISSED)),
        (ABSTAIN_VI, tool_rag(ABSTAIN_VI, "Không chắc, nhưng có lẽ là tolab2024.", MISSED)),
    ],
    "wrong_answer": [
        (CTRL, make_sample(CTRL, "Lyon", toolset="none")),
        (OPEN, make_sample(OPEN, "41", toolset="calculator")),
        (RAG, make_sample(RAG, "nginx", toolset="none")),  # closed book: nothing was missed
    ],
}

SUBTYPES = {
    "wrong_tool": [
        (ONE, make_sample(ONE, "1", steps=[[call("divide", {"a": 868, "b": 60}, 14.47)]])),
        (DIV, make_sample(DIV, "1728", steps=[[call("multiply", {"a": 144, "b": 12}, 1728)]])),
        (CALC, make_sample(CALC, "35", steps=[[call("add", {"a": 12, "b": 30}, 42)],
                                              [call("subtract", {"a": 42, "b": 7}, 35)]])),
    ],
    "wrong_arguments": [
        (ONE, make_sample(ONE, "51480", steps=[[call("multiply", {"a": 858, "b": 60}, 51480)]])),
        (DIV, make_sample(DIV, "14.4", steps=[[call("divide", {"a": 144, "b": 10}, 14.4)]])),
        (CALC, make_sample(CALC, "Kết quả là 300.",
                           steps=[[call("add", {"a": 12, "b": 30}, 42)],
                                  [call("multiply", {"a": 42, "b": 8}, 336)]])),
    ],
    "missing_step": [
        (CALC, make_sample(CALC, "42", steps=[[call("add", {"a": 12, "b": 30}, 42)]])),
        (CALC, make_sample(CALC, "Kết quả là 290.",
                           steps=[[call("multiply", {"a": 42, "b": 7}, 294)]])),
        (RAG, tool_rag(RAG, "nginx", toolset="full",
                       steps=[[call("add", {"a": 1, "b": 2}, 3)]])),  # never searched
    ],
    "extra_step": [
        (ONE, make_sample(ONE, "52081", steps=[[call("multiply", {"a": 868, "b": 60}, 52080)],
                                               [call("add", {"a": 52080, "b": 1}, 52081)]])),
        (DIV, make_sample(DIV, "13", steps=[[call("divide", {"a": 144, "b": 12}, 12)],
                                            [call("add", {"a": 12, "b": 1}, 13)]])),
        (RAG, tool_rag(RAG, "nginx", SHOWN, toolset="full",
                       steps=[[call("add", {"a": 1, "b": 2}, 3)]])),
    ],
    "order_violation": [
        (CALC, make_sample(CALC, "300", steps=[[call("add", {"a": 12, "b": 30}, 42),
                                                call("multiply", {"a": 42, "b": 7}, 294)]])),
        (CALC, make_sample(CALC, "Kết quả là 295.",
                           steps=[[call("add", {"a": 12, "b": 30}, 42),
                                   call("multiply", {"a": "42", "b": 7}, 294)]])),
        (CALC, make_sample(CALC, "290", steps=[[call("multiply", {"a": 42, "b": 7}, 294),
                                                call("add", {"a": 12, "b": 30}, 42)]])),
    ],
}


def score(sample, question):
    out = score_sample(sample, question)
    json.dumps(out)  # a scored sample is plain JSON
    return out


def test_every_category_and_subtype_has_three_samples():
    assert set(CASES) == set(CATEGORIES)
    assert all(len(v) >= 3 for v in CASES.values())
    assert all(len(v) >= 3 for v in SUBTYPES.values())


@pytest.mark.parametrize(("category", "i"),
                         [(c, i) for c, v in CASES.items() for i in range(len(v))])
def test_hand_built_sample_lands_in_its_category(category, i):
    question, sample = CASES[category][i]
    out = score(sample, question)
    assert out["category"] == category, out["why"]
    assert out["why"]["rung"] == CATEGORIES.index(category) + 1
    assert out["why"]["reason"]


@pytest.mark.parametrize(("subtype", "i"),
                         [(s, i) for s, v in SUBTYPES.items() for i in range(len(v))])
def test_hand_built_wrong_plan_has_its_subtype(subtype, i):
    question, sample = SUBTYPES[subtype][i]
    out = score(sample, question)
    assert (out["category"], out["subtype"]) == ("wrong_plan", subtype), out["why"]
    assert subtype in out["why"]["reason"] and subtype in out["why"]["plan"]["failures"]


def test_a_search_before_the_answer_is_the_plan_of_a_tool_retrieval_rag_question():
    good = score(tool_rag(RAG, "Caddy", SHOWN), RAG)
    assert (good["plan_exact"], good["step_recall"], good["no_unneeded_call"]) == (True, 1.0, None)
    twice = tool_rag(RAG, "Caddy", SHOWN, steps=[searched(SHOWN, "caddy ong-tho", 1)[0]])
    assert score(twice, RAG)["plan_exact"] is True  # refining the query is fine
    never = score(tool_rag(RAG, "Caddy"), RAG)
    assert (never["category"], never["plan_exact"]) == ("correct", False)
    assert never["why"]["plan"]["unmatched"] == ["s1"]


def test_the_same_rag_question_with_prepended_chunks_has_no_plan():
    out = score(make_sample(RAG, "Caddy", retrieved=SHOWN, retrieval_mode="prepend",
                            toolset="none"), RAG)
    assert (out["plan_exact"], out["no_unneeded_call"], out["why"]["plan"]) == (None, None, None)


def test_why_records_the_facts_the_ladder_used():
    out = score(tool_rag(RAG, "It runs nginx.", MISSED), RAG)
    facts = out["why"]["facts"]
    assert (facts["rag"], facts["gold_shown"], facts["searched"], facts["correct"]) == (
        True, False, True, False)
    assert out["why"]["reason"].startswith("no chunk shown covers a gold passage")


def test_a_call_repeated_after_its_result_until_the_turn_limit_is_turn_limit_repeated_call():
    # the 0.5B on "1234 nhân 5678": the right call, then the same call every turn
    loop = [[call("multiply", {"a": 868, "b": 60}, 52080)]] * 5
    out = score_sample(make_sample(ONE, stop_reason="turn_limit", steps=loop), ONE)
    assert (out["category"], out["subtype"]) == ("turn_limit", "repeated_call")
    assert "repeated" in out["why"]["reason"] and "repeated_call" in out["flags"]
    assert out["plan_exact"] is True  # the repeats are no steps of the plan
    assert out["why"]["plan"]["matched"] == {"s1": 0}


def test_a_repeat_that_is_then_misreported_is_misreported_not_an_extra_step():
    twice = RIGHT[:1] + RIGHT
    out = score_sample(make_sample(CALC, "Kết quả là 249.", steps=twice), CALC)
    assert out["category"] == "misreported_result" and "repeated_call" in out["flags"]
    assert out["why"]["plan"]["matched"] == {"s1": 0, "s2": 2}


def test_a_repeat_in_the_same_reply_or_of_a_refused_call_is_no_repeat():
    same_reply = [[call("add", {"a": 12, "b": 30}, 42), call("add", {"a": 12, "b": 30}, 42)],
                  [call("multiply", {"a": 42, "b": 7}, 294)]]
    out = score_sample(make_sample(CALC, "Kết quả là 249.", steps=same_reply), CALC)
    assert (out["category"], out["subtype"]) == ("wrong_plan", "extra_step")
    refused = [[call("divide", {"a": 144, "b": 0}, error="tool_exception")]] * 2
    out = score_sample(make_sample(DIV, "12", steps=refused), DIV)
    assert "repeated_call" not in out["flags"]


def test_a_run_that_left_the_plan_before_the_turn_limit_is_judged_by_its_plan():
    # "Tính (12 + 30) nhân 7." -> multiply(12, 30) every turn: format right, plan wrong
    wrong = [[call("multiply", {"a": 12, "b": 30}, 360)]] * 5
    out = score_sample(make_sample(CALC, stop_reason="turn_limit", steps=wrong), CALC)
    assert (out["category"], out["subtype"]) == ("wrong_plan", "wrong_arguments")
    assert "max_turns" in out["why"]["reason"] and "repeated_call" in out["flags"]
    # the capital question -> an invented add(121, 23), repeated until the limit
    added = [[call("add", {"a": 121, "b": 23}, 144)]] * 5
    out = score_sample(make_sample(CTRL_VI, stop_reason="turn_limit", steps=added), CTRL_VI)
    assert out["category"] == "unneeded_tool_call" and "max_turns" in out["why"]["reason"]
    # still on the plan (step 1 done, step 2 not yet) when the turns ran out
    partial = [[call("add", {"a": 12, "b": 30}, 42)]]
    out = score_sample(make_sample(CALC, stop_reason="turn_limit", steps=partial), CALC)
    assert (out["category"], out["subtype"]) == ("turn_limit", None)


POW = Question(id="pow", suite="arithmetic", question="Tính 6 mũ 4.", answer=1296,
               answer_type="number", lang="vi",
               gold_calls=[{"id": "s1", "name": "power", "arguments": {"base": 6, "exponent": 4}}])
SQUARED = Question(id="sq", suite="plan", question="What is (9 + 5) squared?", answer=196,
                   answer_type="number", lang="en", gold_calls=[
                       {"id": "s1", "name": "add", "arguments": {"a": 9, "b": 5}},
                       {"id": "s2", "name": "power", "arguments": {"base": "$s1", "exponent": 2}}])


def test_calls_off_a_plan_the_cell_could_not_follow_are_no_turn_limit():
    # power not offered: multiply(6, 4), then by 4 again, is on no path to 6 ** 4
    off = [[call("multiply", {"a": 6, "b": 4}, 24)], [call("multiply", {"a": 24, "b": 4}, 96)],
           [call("multiply", {"a": 96, "b": 4}, 384)]]
    out = score_sample(make_sample(POW, stop_reason="turn_limit", steps=off), POW)
    assert (out["category"], out["plan_exact"]) == ("wrong_answer", None), out["why"]
    # the step of the plan the cell offers, done right, then the turns ran out
    on = [[call("add", {"a": 9, "b": 5}, 14)]]
    out = score_sample(make_sample(SQUARED, stop_reason="turn_limit", steps=on), SQUARED)
    assert out["category"] == "turn_limit", out["why"]
    # no gold plan at all: nothing to have left
    unknown = Question(id="u", suite="arithmetic", question="6 mũ 4 bằng mấy?", answer=1296,
                       answer_type="number", lang="vi")
    out = score_sample(make_sample(unknown, stop_reason="turn_limit", steps=off), unknown)
    assert out["category"] == "turn_limit", out["why"]


# --- the retry rule: a tool's failure the model recovered from is no tool failure -------

TIMED_OUT = [call("multiply", {"a": 868, "b": 60}, error="timeout")]
RAN = [call("multiply", {"a": 868, "b": 60}, 52080)]


@pytest.mark.parametrize("steps, answer, category", [
    ([TIMED_OUT, RAN], "52080", "correct"),            # timed out, same call again: it ran
    ([TIMED_OUT, TIMED_OUT, RAN], "52080", "correct"),  # twice, then it ran
    ([[call("multiply", {"a": 868, "b": 60}, error="tool_exception")], RAN], "It is 52080.",
     "correct"),
    ([TIMED_OUT, RAN], "52800", "misreported_result"),  # the model had the result
    ([TIMED_OUT, RAN, [call("add", {"a": 52080, "b": 1}, 52081)]], "52081", "wrong_plan"),
    ([TIMED_OUT], "52080", "tool_failure"),                  # never retried
    ([TIMED_OUT, TIMED_OUT], "", "tool_failure"),            # retried, failed again
    ([TIMED_OUT, [call("multiply", {"a": 868, "b": 6}, 5208)]], "5208",
     "tool_failure"),  # another call after the failure: the failure's effect, as before
    ([TIMED_OUT + RAN], "52080", "tool_failure"),  # the same call twice in one reply: no retry
])
def test_a_failure_retried_identically_and_run_is_not_a_tool_failure(steps, answer, category):
    out = score_sample(make_sample(ONE, answer, steps=steps), ONE)
    assert out["category"] == category, out["why"]
    assert "tool_error" in out["flags"]  # the tool did fail once: still shown


def test_a_recovered_attempt_is_no_step_of_the_plan_and_the_why_says_so():
    out = score_sample(make_sample(ONE, "52080", steps=[TIMED_OUT, RAN]), ONE)
    assert (out["plan_exact"], out["step_precision"], out["tool_failure"]) == (True, 1.0, False)
    assert out["why"]["plan"]["matched"] == {"s1": 1}
    assert out["why"]["facts"]["tool_recovered"] and "retried" in out["why"]["reason"]
    # a two-step plan whose second step timed out once
    steps = [[call("add", {"a": 12, "b": 30}, 42)],
             [call("multiply", {"a": 42, "b": 7}, error="timeout")],
             [call("multiply", {"a": 42, "b": 7}, 294)]]
    out = score_sample(make_sample(CALC, "Kết quả là 294.", steps=steps), CALC)
    assert (out["category"], out["plan_exact"]) == ("correct", True)


def test_a_search_that_timed_out_and_ran_on_the_retry_is_the_search_step():
    first = [call("search_site", {"query": "web server ong-tho"}, error="timeout")]
    sample = tool_rag(RAG, "It runs Caddy.", SHOWN)
    sample["turns"].insert(0, {**sample["turns"][0], "tool_events": first, "calls": first})
    for i, turn in enumerate(sample["turns"]):
        turn["index"] = i
    out = score_sample(sample, RAG)
    assert (out["category"], out["plan_exact"]) == ("correct", True), out["why"]


@pytest.mark.parametrize("reply, category", [
    ("It has 32 GB of RAM.", "hallucinated_answer"),
    ("ong-tho-3 is a Dell box.", "hallucinated_answer"),
    ("How much RAM does ong-tho-3 have?", "wrong_answer"),     # the question again
    ("", "wrong_answer"),                                     # nothing at all
    ("The RAM ong-tho-3 has", "wrong_answer"),                 # its own words, restated
])
def test_an_abstain_question_answered_with_nothing_is_no_hallucinated_answer(reply, category):
    out = score_sample(make_sample(ABSTAIN, reply, toolset="none"), ABSTAIN)
    assert out["category"] == category, out["why"]


# --- a final answer that only repeats a tool's error message --------------------------------

UNKNOWN_DISK = call("get_disk_size", {"host": "ong-tho-3"}, error="unknown_tool",
                    message="unknown tool 'get_disk_size'; offered: add, subtract, multiply, "
                            "divide")


@pytest.mark.parametrize("question, final, category", [
    # "unknown" in the harness's message is no abstention of the model
    (ABSTAIN, "unknown tool 'get_disk_size'; offered: add, subtract, multiply, divide",
     "unknown_tool"),
    (ABSTAIN, "Unknown tool get_disk_size. Offered: add, subtract", "unknown_tool"),  # a part
    (ABSTAIN, "I don't know how much RAM ong-tho-3 has.", "correct"),  # its own words
    (CTRL, "unknown tool 'get_disk_size'; offered: add, subtract, multiply, divide",
     "unknown_tool"),
])
def test_a_reply_that_echoes_a_tool_error_is_neither_an_answer_nor_an_abstention(
        question, final, category):
    out = score_sample(make_sample(question, final, steps=[[UNKNOWN_DISK]]), question)
    assert out["category"] == category, out["why"]
    if category != "correct":
        assert (out["exact"], out["extraction"], "abstained" in out["flags"]) == (
            False, "tool_error_echo", False)


def test_a_number_that_a_tool_error_also_holds_is_still_the_answer():
    failed = [call("divide", {"a": 144, "b": 0}, error="tool_exception",
                   message="division by zero: b is 0; 12 is not reachable")]
    out = score_sample(make_sample(DIV, "12", steps=[failed,
                                                     [call("divide", {"a": 144, "b": 12}, 12)]]),
                       DIV)
    assert out["exact"] is True and out["extraction"] != "tool_error_echo"
