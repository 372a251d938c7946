"""Failure categories: one primary category per sample, the first that applies.

The ladder (DESIGN.md, "Failure categories"):

 1. infra_error          the backend or the harness failed (stop_reason infra_error,
                         a sample error, or a generation that finished with "error")
 2. correct              exact match; for abstain questions: the model abstained
 3. malformed_call       a tool-call attempt did not parse (after the lenient parse)
 4. unknown_tool         a call named a tool that was not offered
 5. invalid_arguments    a call's arguments failed the tool's schema
 6. turn_limit           max_turns reached without a final answer
 7. no_tool_call         the gold plan needs tools that were offered, none was called
 8. unneeded_tool_call   the gold plan is empty, tools were called, answer wrong
 9. wrong_plan           every call well-formed, the calls do not match the gold plan;
                         subtype: wrong_tool, wrong_arguments, missing_step, extra_step,
                         order_violation
10. misreported_result   the (non-empty) gold plan matched, the final answer does not
11. retrieval_miss       RAG question, no gold passage among the chunks shown
12. misread_context      RAG question, a gold passage was shown, answer wrong
13. hallucinated_answer  gold is abstain, the model answered anyway
14. wrong_answer         anything else

A "RAG question" has gold passages and ran in a cell with retrieval (prepend or
tool) or was shown chunks. The same question in a closed-book cell
(retrieval "none") that is answered wrong is a wrong_answer.

For a RAG question whose plan matched (it searched as the gold plan says), a
wrong answer goes on to rungs 11/12 instead of misreported_result: a search
returns passages, not a value to report, so whether a gold passage came back
is the informative split.

The plan rungs (7, 9, 10) apply only when the gold plan is known and every
tool it uses was offered in the cell: a calculator question asked in a cell
with no tools is not "no_tool_call".
"""

from __future__ import annotations

from dataclasses import dataclass

CATEGORIES = (
    "infra_error", "correct", "malformed_call", "unknown_tool", "invalid_arguments",
    "turn_limit", "no_tool_call", "unneeded_tool_call", "wrong_plan", "misreported_result",
    "retrieval_miss", "misread_context", "hallucinated_answer", "wrong_answer",
)
FLAGS = (
    "wrong_language", "abstained", "correct_without_retrieval", "repaired_format",
    "parallel_calls", "truncated_tool_output", "number_words", "length_limit", "tool_error",
)


@dataclass(slots=True)
class Facts:
    """What the ladder needs to know about one sample."""

    infra: bool
    correct: bool
    malformed: bool
    unknown_tool: bool
    invalid_arguments: bool
    turn_limit: bool
    plan_applicable: bool  # gold plan known and its tools offered
    gold_plan_empty: bool  # gold_calls == []
    called: bool  # any tool call was executed (or refused)
    plan_exact: bool | None
    plan_reason: str | None
    rag: bool
    gold_shown: bool
    abstain_gold: bool


def primary_category(f: Facts) -> tuple[str, str | None]:
    """(category, subtype); subtype only for wrong_plan."""
    if f.infra:
        return "infra_error", None
    if f.correct:
        return "correct", None
    if f.malformed:
        return "malformed_call", None
    if f.unknown_tool:
        return "unknown_tool", None
    if f.invalid_arguments:
        return "invalid_arguments", None
    if f.turn_limit:
        return "turn_limit", None
    if f.plan_applicable and not f.gold_plan_empty and not f.called:
        return "no_tool_call", None
    if f.gold_plan_empty and f.called:
        return "unneeded_tool_call", None
    if f.plan_applicable and not f.gold_plan_empty:
        if not f.plan_exact:
            return "wrong_plan", f.plan_reason
        if not f.rag:
            return "misreported_result", None
    if f.rag:
        return ("misread_context", None) if f.gold_shown else ("retrieval_miss", None)
    if f.abstain_gold:
        return "hallucinated_answer", None
    return "wrong_answer", None
