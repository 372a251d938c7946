"""Failure categories: one primary category per sample, the first that applies.

The ladder (docs/scoring.md, "Failure categories"):

 1. infra_error          the backend or the harness failed (stop_reason infra_error,
                         a sample error, or a generation that finished with "error")
 2. malformed_reply      the server's reply did not fit the wire shape (an integer
                         content, a name that is an object, a lone surrogate, nesting
                         deeper than the limit...): a failure of the endpoint under
                         test, counted in the rates (backends/openai_reply.py)
 3. tool_failure         a tool failed (raised, timed out, bad result) before any
                         mistake of the model was visible: the failed call and every
                         call before it are asked for by the gold plan, and no reply up
                         to it was malformed or invalid (plan.tool_failed); kept out of
                         every rate like infra_error. Otherwise the model's mistake
                         decides the rung, as if the tool had not failed. A failure the
                         model recovered by repeating the identical call in a later turn,
                         which then ran, is no tool failure: the model had the result
                         (plan.recovered_failures), and the rest of the ladder decides.
 4. correct              exact match; for abstain questions: the model abstained
 5. malformed_call       a tool-call attempt did not parse (after the lenient parse)
 6. unknown_tool         a call named a tool that was not offered
 7. invalid_arguments    a call's arguments failed the tool's schema
 8. turn_limit           max_turns reached without a final answer, every call so far
                         on the gold plan's path (subtype repeated_call: a call was
                         repeated verbatim after its result had come back). A run that
                         left the plan first is judged by its plan (rungs 10-11), and
                         one that left a known plan the cell could not follow (a
                         tool of it not offered) by its answer.
 9. no_tool_call         the gold plan needs tools that were offered, none was called
10. unneeded_tool_call   the gold plan is empty, tools were called, answer wrong
11. wrong_plan           every call well-formed, the calls do not match the gold plan;
                         subtype: wrong_tool, wrong_arguments, missing_step, extra_step,
                         order_violation
12. misreported_result   the (non-empty) gold plan matched, the final answer does not
13. retrieval_miss       RAG question, no gold passage among the chunks shown
14. misread_context      RAG question, a gold passage was shown, answer wrong
15. hallucinated_answer  gold is abstain, the model answered anyway (a reply that is
                         empty or only restates the question answered nothing:
                         wrong_answer)
16. wrong_answer         anything else

A "RAG question" has gold passages and ran in a cell with retrieval (prepend or
tool) or was shown chunks. The same question in a closed-book cell
(retrieval "none") that is answered wrong is a wrong_answer.

Agentic RAG: a corpus question (gold passages, or an abstain question with no
plan) asked in a cell whose retrieval mode is "tool" and that offers
search_site has an implied plan: search (any non-empty query) before
answering. No call at all is no_tool_call; after a search, a wrong answer
goes to rungs 13-15 (a gold passage shown or not; an abstain question
answered anyway).

For a RAG question whose plan matched (it searched as the gold plan says), a
wrong answer goes on to rungs 13/14 instead of misreported_result: a search
returns passages, not a value to report, so whether a gold passage came back
is the informative split.

The plan rungs (9, 11, 12) apply only when the gold plan is known and every
tool it uses was offered in the cell: a calculator question asked in a cell
with no tools is not "no_tool_call".
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

CATEGORIES = (
    "infra_error", "malformed_reply", "tool_failure", "correct", "malformed_call", "unknown_tool",
    "invalid_arguments", "turn_limit", "no_tool_call", "unneeded_tool_call", "wrong_plan",
    "misreported_result", "retrieval_miss", "misread_context", "hallucinated_answer",
    "wrong_answer",
)
SCORER_ERROR = "scorer_error"  # not a rung: the scorer failed on the sample (scoring/run.py)
# How reports list categories: correct first, then what is not the model's fault,
# then the model's failures in ladder order. Tables and plots read this one list.
DISPLAY_ORDER = ("correct", "infra_error", "tool_failure", SCORER_ERROR,
                 *(c for c in CATEGORIES if c not in ("correct", "infra_error", "tool_failure")))
FLAGS = (
    "wrong_language", "abstained", "correct_without_retrieval", "repaired_format",
    "parallel_calls", "truncated_tool_output", "number_words", "length_limit", "tool_error",
    "repeated_call", "judged", "undecided", "judge_injection",
)


@dataclass(slots=True)
class Facts:
    """What the ladder needs to know about one sample (recorded in the scored sample)."""

    infra: bool
    malformed_reply: bool  # stop reason malformed_reply: the endpoint's reply did not fit
    correct: bool
    malformed: bool
    unknown_tool: bool
    invalid_arguments: bool
    turn_limit: bool
    plan_applicable: bool  # gold plan known (or implied) and its tools offered
    gold_plan_empty: bool  # the plan scored is []
    called: bool  # any tool call was executed (or refused)
    plan_exact: bool | None
    plan_reason: str | None
    rag: bool
    gold_shown: bool
    abstain_gold: bool
    searched: bool | None = None  # implied-search plan: a search ran; None: no such plan
    tool_failure: bool = False  # a tool failed the model (plan.tool_failed)
    tool_recovered: bool = False  # a call the tool failed was retried identically and ran
    answered: bool = True  # the reply says something beyond the question (abstain golds)
    repeated_call: bool = False  # a call repeated one whose result had come back
    off_plan: bool = False  # a call no gold step asks for (wrong tool, arguments, order, extra)

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Verdict:
    category: str
    subtype: str | None  # wrong_plan: the primary plan failure; turn_limit: repeated_call
    rung: int  # 1-based position of the deciding rule in CATEGORIES
    reason: str  # the deciding facts, in words


def _verdict(category: str, reason: str, subtype: str | None = None) -> Verdict:
    return Verdict(category, subtype, CATEGORIES.index(category) + 1, reason)


def decide(f: Facts) -> Verdict:
    """The first rule of the ladder that applies, and why."""
    if f.infra:
        return _verdict("infra_error", "the backend or the harness failed")
    if f.malformed_reply:
        return _verdict("malformed_reply", "the server's reply did not fit the wire shape")
    if f.tool_failure:
        return _verdict("tool_failure", "a tool failed on a call the model rightly made, "
                        "before any mistake of the model")
    if f.correct:
        retried = ("; a call the tool failed was retried identically and ran"
                   if f.tool_recovered else "")
        return _verdict("correct", ("the model abstained" if f.abstain_gold
                                    else "the extracted answer matches the gold") + retried)
    if f.malformed:
        return _verdict("malformed_call", "a tool-call attempt did not parse")
    if f.unknown_tool:
        return _verdict("unknown_tool", "a call named a tool the cell did not offer")
    if f.invalid_arguments:
        return _verdict("invalid_arguments", "a call's arguments failed the tool's schema")
    if f.turn_limit and not f.off_plan:
        if f.repeated_call:
            return _verdict("turn_limit", "max_turns reached without a final answer: a call "
                            "was repeated after its result had come back", "repeated_call")
        return _verdict("turn_limit", "max_turns reached without a final answer")
    plan_needs_tools = f.plan_applicable and not f.gold_plan_empty
    implied = f.searched is not None
    if plan_needs_tools and not f.called:
        return _verdict("no_tool_call", "the plan needs a search before the answer; no tool "
                        "was called" if implied else
                        "the gold plan needs offered tools; no tool was called")
    # A run that left the plan and then ran out of turns is judged by the plan it left.
    then = "; then max_turns was reached without an answer" if f.turn_limit else ""
    if f.gold_plan_empty and f.called:
        return _verdict("unneeded_tool_call", "the gold plan is empty and a tool was called" +
                        (then or ", and the answer is wrong"))
    if plan_needs_tools:
        if not f.plan_exact:
            return _verdict("wrong_plan", f"the calls do not match the plan: {f.plan_reason}"
                            + then, f.plan_reason)
        if not f.rag and not implied:
            return _verdict("misreported_result",
                            "the gold plan matched; the final answer does not")
    if f.rag:
        if f.gold_shown:
            return _verdict("misread_context", "a gold passage was shown; the answer is wrong")
        return _verdict("retrieval_miss", "no chunk shown covers a gold passage; "
                        "the answer is wrong")
    if f.abstain_gold and f.answered:
        return _verdict("hallucinated_answer", "the gold is abstain; the model answered")
    if f.abstain_gold:
        return _verdict("wrong_answer", "the gold is abstain; the reply neither abstains nor "
                        "says anything beyond the question")
    return _verdict("wrong_answer", "the answer is wrong; no earlier rule applies")
