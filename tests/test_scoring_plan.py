"""Plan match: executed tool calls against gold plans with $step references."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from synth import call

from evalpipe.scoring.plan import executed_calls, match_plan

# (12 + 30) * 7 = 294
PLAN = [
    {"id": "s1", "name": "add", "arguments": {"a": 12, "b": 30}},
    {"id": "s2", "name": "multiply", "arguments": {"a": "$s1", "b": 7}},
]
# (2 + 3) and (4 + 5), both feeding one multiply: s1 and s2 are independent
DIAMOND = [
    {"id": "s1", "name": "add", "arguments": {"a": 2, "b": 3}},
    {"id": "s2", "name": "add", "arguments": {"a": 4, "b": 5}},
    {"id": "s3", "name": "multiply", "arguments": {"a": "$s1", "b": "$s2"}},
]


def turns(*specs):
    """Turns as the engine records them: each spec is the list of calls of one reply."""
    out = []
    for index, spec in enumerate(specs):
        events = [{"call_id": f"call_{index}_{i}", "name": c["name"], "arguments": c["arguments"],
                   "result": None if c["error"] else c["result"], "error": c["error"],
                   "error_message": c["error_message"], "truncated": False, "ms": 0.1}
                  for i, c in enumerate(spec)]
        out.append({"index": index, "tool_events": events})
    return out


def plan(gold, *specs):
    return match_plan(executed_calls(turns(*specs)), gold)


def test_the_gold_plan_matches():
    r = plan(PLAN, [call("add", {"a": 12, "b": 30}, 42)],
             [call("multiply", {"a": 42, "b": 7}, 294)])
    assert (r.exact, r.precision, r.recall, r.reason, r.reasons) == (True, 1.0, 1.0, None, [])


def test_commutative_tools_accept_either_order():
    r = plan(PLAN, [call("add", {"a": 30, "b": 12}, 42)],
             [call("multiply", {"b": 42, "a": 7}, 294)])
    assert r.exact


def test_non_commutative_tools_do_not():
    gold = [{"id": "s1", "name": "subtract", "arguments": {"a": 10, "b": 4}}]
    assert plan(gold, [call("subtract", {"a": 10, "b": 4}, 6)]).exact
    r = plan(gold, [call("subtract", {"a": 4, "b": 10}, -6)])
    assert (r.exact, r.reason) == (False, "wrong_arguments")


def test_numeric_tolerance_on_arguments():
    gold = [{"id": "s1", "name": "divide", "arguments": {"a": 1, "b": 3}},
            {"id": "s2", "name": "multiply", "arguments": {"a": "$s1", "b": 3}}]
    r = plan(gold, [call("divide", {"a": 1.0, "b": 3.0}, 0.333333333333)],
             [call("multiply", {"a": 0.3333333333, "b": 3}, 1)])
    assert r.exact


def test_any_order_consistent_with_the_dependency_graph():
    for first, second in [((2, 3, 5), (4, 5, 9)), ((4, 5, 9), (2, 3, 5))]:
        r = plan(DIAMOND,
                 [call("add", {"a": first[0], "b": first[1]}, first[2]),
                  call("add", {"a": second[0], "b": second[1]}, second[2])],
                 [call("multiply", {"a": 5, "b": 9}, 45)])
        assert r.exact, (first, second)


def test_references_resolve_to_the_actual_results():
    # the model's s1 went wrong (12 + 31); s2 used that result faithfully: one mistake, not two
    r = plan(PLAN, [call("add", {"a": 12, "b": 31}, 43)],
             [call("multiply", {"a": 43, "b": 7}, 301)])
    assert (r.exact, r.reason, r.reasons) == (False, "wrong_arguments", ["wrong_arguments"])
    assert (r.precision, r.recall) == (0.5, 0.5)


@pytest.mark.parametrize("specs, reason, reasons, precision, recall", [
    # s1 done in the head, s2 called with the right value
    ([[call("multiply", {"a": 42, "b": 7}, 294)]],
     "missing_step", ["missing_step"], 1.0, 0.5),
    # the right plan, then a pointless extra call
    ([[call("add", {"a": 12, "b": 30}, 42)], [call("multiply", {"a": 42, "b": 7}, 294)],
      [call("add", {"a": 294, "b": 0}, 294)]],
     "extra_step", ["extra_step"], 2 / 3, 1.0),
    # subtract where add was needed, same arguments
    ([[call("subtract", {"a": 12, "b": 30}, -18)], [call("multiply", {"a": -18, "b": 7}, -126)]],
     "wrong_tool", ["wrong_tool"], 0.5, 0.5),
    # both steps in one reply: s2 could not have seen s1's result
    ([[call("add", {"a": 12, "b": 30}, 42), call("multiply", {"a": 42, "b": 7}, 294)]],
     "order_violation", ["order_violation"], 1.0, 1.0),
    # s2 before s1
    ([[call("multiply", {"a": 42, "b": 7}, 294)], [call("add", {"a": 12, "b": 30}, 42)]],
     "order_violation", ["order_violation"], 1.0, 1.0),
    # the classic: multiply(12, 30) and stop
    ([[call("multiply", {"a": 12, "b": 30}, 360)]],
     "wrong_arguments", ["wrong_arguments", "missing_step"], 0.0, 0.0),
    # nothing called at all
    ([], "missing_step", ["missing_step"], None, 0.0),
])
def test_failure_reasons(specs, reason, reasons, precision, recall):
    r = plan(PLAN, *specs)
    assert not r.exact
    assert (r.reason, r.reasons) == (reason, reasons)
    assert r.precision == pytest.approx(precision) if precision is not None else r.precision is None
    assert r.recall == pytest.approx(recall)


def test_an_errored_call_counts_as_an_attempt():
    # a refused call, then the right plan: the executed plan was not the gold plan
    r = plan(PLAN, [call("add", {"a": "12", "b": 30}, error="invalid_arguments")],
             [call("add", {"a": 12, "b": 30}, 42)], [call("multiply", {"a": 42, "b": 7}, 294)])
    assert (r.exact, r.reason, r.recall) == (False, "extra_step", 1.0)
    assert r.precision == pytest.approx(2 / 3)


def test_an_errored_call_never_matches_its_step():
    gold = [{"id": "s1", "name": "divide", "arguments": {"a": 1, "b": 0}}]
    r = plan(gold, [call("divide", {"a": 1, "b": 0}, error="tool_exception")])
    assert (r.exact, r.reason, r.recall) == (False, "wrong_arguments", 0.0)


def test_unknown_tool_is_a_wrong_tool():
    r = plan(PLAN[:1], [call("plus", {"a": 12, "b": 30}, error="unknown_tool")])
    assert r.reason == "wrong_tool"


def test_empty_gold_plan():
    assert match_plan([], []).exact
    r = plan([], [call("add", {"a": 1, "b": 1}, 2)])
    assert (r.exact, r.reason, r.precision, r.recall) == (False, "extra_step", 0.0, None)


def test_search_query_is_free_text():
    gold = [{"id": "s1", "name": "search_site", "arguments": {"query": "giờ mở cửa thư viện"}}]
    assert plan(gold, [call("search_site", {"query": "library opening hours"}, [])]).exact
    assert not plan(gold, [call("search_site", {"query": "  "}, [])]).exact


CHAIN = [
    {"id": "s1", "name": "add", "arguments": {"a": 2, "b": 3}},        # 5
    {"id": "s2", "name": "multiply", "arguments": {"a": 4, "b": 5}},   # 20
    {"id": "s3", "name": "subtract", "arguments": {"a": "$s2", "b": "$s1"}},  # 15
    {"id": "s4", "name": "divide", "arguments": {"a": "$s3", "b": 3}},  # 5
]
CHAIN_CALLS = {
    "s1": call("add", {"a": 2, "b": 3}, 5), "s2": call("multiply", {"a": 4, "b": 5}, 20),
    "s3": call("subtract", {"a": 20, "b": 5}, 15), "s4": call("divide", {"a": 15, "b": 3}, 5),
}
DEPENDS = {"s1": set(), "s2": set(), "s3": {"s1", "s2"}, "s4": {"s3"}}


@given(st.permutations(["s1", "s2", "s3", "s4"]))
def test_any_topological_order_matches_and_no_other(order):
    r = plan(CHAIN, *[[CHAIN_CALLS[sid]] for sid in order])
    topological = all(DEPENDS[sid] <= set(order[:i]) for i, sid in enumerate(order))
    assert r.exact is topological
    if not topological:
        assert r.reason == "order_violation"
        assert r.recall == 1.0


@given(st.sampled_from(["s1", "s2", "s3", "s4"]), st.integers(min_value=1, max_value=50))
def test_a_changed_argument_breaks_the_plan(sid, delta):
    calls = dict(CHAIN_CALLS)
    c = calls[sid]
    key = "b" if sid != "s3" else "a"
    calls[sid] = call(c["name"], {**c["arguments"], key: c["arguments"][key] + delta}, c["result"])
    r = plan(CHAIN, *[[calls[s]] for s in ("s1", "s2", "s3", "s4")])
    assert not r.exact
    assert r.reason == "wrong_arguments"
