"""score_sample: one sample record (samples.jsonl) + its Question -> one scored dict.

Pure: no model, no tools run (the gold plan's expected values come from the
pure built-in arithmetic functions), no I/O. Scoring runs in named stages, each
a function of the sample: format validity, cost, plan, retrieval, the ladder's
facts (categories.Facts, decided by categories.decide) and flags.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from evalpipe.questions import Question
from evalpipe.records import (
    DEFAULT_K,
    SCHEMA_VERSION,
    SampleRecord,
    ScoredSample,
    ScoredWhy,
    TurnRecord,
)
from evalpipe.scoring.answers.extract import detect_language
from evalpipe.scoring.answers.match import AnswerMatch, Gold, make_gold, match_answer
from evalpipe.scoring.answers.normalize import contains_phrase, text_key
from evalpipe.scoring.categories import Facts, decide
from evalpipe.scoring.cost import sample_cost
from evalpipe.scoring.judging import recorded_verdict
from evalpipe.scoring.plan import (
    Executed,
    PlanResult,
    executed_calls,
    match_plan,
    recovered_failures,
    tool_failed,
)
from evalpipe.scoring.retrieval_metrics import covers, retrieval_scores

# 6: a premise rejected as impossible ("not able to", "không thể") abstains.
# 5: identifiers with "-" and "_" swapped, echoes of a tool's error, attempted calls against
# an empty plan, turn_limit only on the path of a plan the cell could not follow.
# 4: LaTeX boxes, corrections after the answer line, fractions, the question's unit, times of
# day, relations, abstention kinds (missing, not yet, premise), recovered tool failures
SCORER_VERSION = "6"
DETECTED_LANGUAGES = frozenset({"vi", "en"})
SEARCH_TOOL = "search_site"

_GOLD_CACHE: dict[int, tuple[Question, Gold]] = {}


def gold_for(question: Question) -> Gold:
    """The question's comparison data, computed once per Question object."""
    entry = _GOLD_CACHE.get(id(question))
    if entry is not None and entry[0] is question:
        return entry[1]
    gold = make_gold(question.answer, question.answer_type, list(question.aliases or ()),
                     question.lang or "en", question.question or "")
    if len(_GOLD_CACHE) > 200_000:
        _GOLD_CACHE.clear()
    _GOLD_CACHE[id(question)] = (question, gold)
    return gold


# --- stage: format validity -------------------------------------------------------------

@dataclass(slots=True)
class CallStats:
    """What the turns say about the tool calls (validity, flags) and how they ended."""

    attempted: int = 0
    valid: int = 0
    valid_strict: int = 0
    called: bool = False  # a tool event exists: a call ran or was refused
    malformed: bool = False
    unknown: bool = False
    invalid: bool = False
    parallel: bool = False
    repaired: bool = False
    truncated: bool = False
    tool_error: bool = False
    length: bool = False  # a turn stopped at max_new_tokens
    errored_turn: bool = False  # a turn finished with "error"

    @property
    def format_valid(self) -> bool | None:
        return (self.valid == self.attempted) if self.attempted else None

    @property
    def format_valid_strict(self) -> bool | None:
        return (self.valid_strict == self.attempted) if self.attempted else None


def call_stats(turns: list[TurnRecord], offered: set[str] | None) -> CallStats:
    s = CallStats()
    for turn in turns:
        calls = turn.get("calls") or []
        parse_errors = turn.get("parse_errors") or []
        strict_errors = turn.get("strict_errors") or []
        if calls or parse_errors or strict_errors or turn.get("repaired"):
            events = turn.get("tool_events") or []
            s.attempted += len(calls) + len(parse_errors)
            bad = 0
            for event in events:
                s.called = True
                error = event.get("error")
                if error == "unknown_tool":
                    s.unknown = True
                    bad += 1
                elif error == "invalid_arguments":
                    s.invalid = True
                    bad += 1
                elif error:
                    s.tool_error = True
                if event.get("truncated"):
                    s.truncated = True
            if offered is not None and len(events) < len(calls):  # calls that never ran
                ran = {e.get("call_id") for e in events}
                for c in calls:
                    if c.get("id") not in ran and c.get("name") not in offered:
                        s.unknown = True
                        bad += 1
            turn_valid = max(0, len(calls) - bad)
            s.valid += turn_valid
            fixed = max(len(strict_errors) - len(parse_errors),
                        1 if turn.get("repaired") else 0)
            s.valid_strict += max(0, turn_valid - fixed)
            s.malformed |= bool(parse_errors)
            s.parallel |= len(calls) > 1
            s.repaired |= bool(fixed)
        finish = turn.get("finish_reason")
        if finish == "length":
            s.length = True
        elif finish == "error":
            s.errored_turn = True
    return s


# --- stage: plan ------------------------------------------------------------------------

@dataclass(slots=True)
class PlanStage:
    applicable: bool  # the gold plan is known and its tools were offered
    steps: list[dict[str, Any]] | None  # the plan scored: the gold plan, or the implied search
    implied_search: bool  # a corpus question in a cell where search_site is a tool
    result: PlanResult | None
    repeated: bool = False  # a call repeated one whose result had come back (repeated_calls)
    recovered: bool = False  # a call the tool failed, then retried identically with success
    left_gold: bool = False  # a gold plan whose tools were not offered: a call no step asks for

    @property
    def off_plan(self) -> bool:
        """The calls made left the plan: anything wrong but steps not done yet (any
        call at all when the plan is empty). For a known plan the cell could not follow
        (a tool of it not offered), a call no gold step asks for left it too."""
        return self.left_gold or bool(self.applicable and self.result
                                      and set(self.result.reasons) - {"missing_step"})


def corpus_question(question: Question) -> bool:
    """Answered from the corpus: it has gold passages, or it is an abstain question
    with no plan (the corpus does not say)."""
    return question.gold_calls == [] and (
        bool(question.gold_passages) or question.answer_type == "abstain")


def search_plan(executed: list[Executed]) -> PlanResult:
    """The implied plan of a corpus question in a tool-retrieval cell: search (any
    non-empty query, as often as the model likes) before answering. A call of another
    tool is an extra step; no search that ran is a missing step."""
    searches = [e for e in executed if e.name == SEARCH_TOOL and e.ok
                and isinstance(e.arguments, dict)
                and isinstance(e.arguments.get("query"), str) and e.arguments["query"].strip()]
    reasons = []
    if any(e.name != SEARCH_TOOL for e in executed):
        reasons.append("extra_step")
    if not searches:
        reasons.insert(0, "missing_step")
    precision = len(searches) / len(executed) if executed else None
    matched = {"s1": searches[0].position} if searches else {}
    return PlanResult(not reasons, precision, 1.0 if searches else 0.0,
                      reasons[0] if reasons else None, reasons, matched)


def plan_stage(question: Question, turns: list[TurnRecord], offered: set[str] | None,
               mode: str, rules: str = "evalpipe") -> PlanStage:
    gold_calls = question.gold_calls
    implied = (mode == "tool" and corpus_question(question)
               and (offered is None or SEARCH_TOOL in offered))
    steps: list[dict[str, Any]] | None = (
        [{"id": "s1", "name": SEARCH_TOOL, "arguments": {"query": ""}}] if implied
        else gold_calls)
    applicable = steps is not None and (
        offered is None or (bool(offered) and all(s.get("name") in offered for s in steps)))
    executed = executed_calls(turns)
    repeats = repeated_calls(executed)
    recovered = recovered_failures(executed)
    result = None
    left_gold = False
    # A repeat is no step of a plan: the plan is judged on the calls that asked for
    # something new, and the repeat is named on its own (turn_limit, a flag). Nor is an
    # attempt the tool failed and an identical retry then recovered.
    skipped = repeats | recovered
    fresh = [e for e in executed if e.position not in skipped]
    renumbered = [replace(e, position=i) for i, e in enumerate(fresh)]
    if applicable and steps is not None:
        result = search_plan(renumbered) if implied else match_plan(renumbered, steps, rules)
        result.matched = {sid: fresh[pos].position for sid, pos in result.matched.items()}
    elif steps and fresh:
        # Not scored as a plan (the cell did not offer its tools), but whether the calls
        # stayed on it still tells a model that ran out of turns on the way (turn_limit)
        # from one that went elsewhere: multiply(11, 3) for 11 ** 3 without power.
        left_gold = bool(set(match_plan(renumbered, steps, rules).reasons) - {"missing_step"})
    return PlanStage(applicable, steps, implied, result, bool(repeats), bool(recovered),
                     left_gold)


def repeated_calls(executed: list[Executed]) -> set[int]:
    """Positions of calls that repeat, verbatim (same tool, equal arguments), a call of
    an earlier turn that ran: its result had come back, so nothing new was asked."""
    done: list[Executed] = []
    repeats: set[int] = set()
    for e in executed:
        if any(d.turn < e.turn and d.name == e.name and d.arguments == e.arguments
               for d in done):
            repeats.add(e.position)
        elif e.ok:
            done.append(e)
    return repeats


# --- stage: retrieval -------------------------------------------------------------------

def first_retrieval_list(sample: SampleRecord) -> list[dict[str, Any]]:
    """The ranking retrieval metrics are computed on: the chunks prepended to the
    prompt, else the hits of the first search_site call that ran, else []."""
    retrieved = sample.get("retrieved") or []
    prepend = [c for c in retrieved if c.get("source", "prepend") == "prepend"]
    if prepend:
        return prepend
    tool = [c for c in retrieved if c.get("source") == "tool"]
    for position, turn in enumerate(sample.get("turns") or ()):
        for event in turn.get("tool_events") or ():
            if event.get("name") == SEARCH_TOOL and not event.get("error"):
                result = event.get("result")
                if isinstance(result, list):
                    return [h for h in result if isinstance(h, dict)]
                # a result cut to the size limit is text: use what the engine recorded
                index = turn.get("index", position)
                return [c for c in tool if c.get("query_index", 0) == index]
    if tool:
        first = min(c.get("query_index", 0) for c in tool)
        return [c for c in tool if c.get("query_index", 0) == first]
    return []


def _rank_key(chunk: dict[str, Any]) -> tuple:
    """Best first: by rank; ties (or no rank) by score, then chunk id."""
    rank = chunk.get("rank")
    score = chunk.get("score")
    return (rank if rank is not None else float("inf"),
            -score if score is not None else 0.0, str(chunk.get("chunk_id", "")))


@dataclass(slots=True)
class RetrievalStage:
    rag: bool  # a question with gold passages, in a cell that retrieved
    gold_shown: bool  # some chunk shown (any search) covers a gold passage
    scores: dict[str, float] | None  # recall/hit/mrr/ndcg on the first list


def retrieval_stage(sample: SampleRecord, question: Question, mode: str,
                    k: int) -> RetrievalStage:
    passages = question.gold_passages or []
    retrieved = sample.get("retrieved") or []
    rag = bool(passages) and (mode in ("prepend", "tool") or bool(retrieved))
    gold_shown = bool(passages) and any(covers(c, g) for c in retrieved for g in passages)
    scores = None
    if rag:
        ranked = sorted(first_retrieval_list(sample), key=_rank_key)
        scores = retrieval_scores([(c["doc"], c["start"], c["end"]) for c in ranked],
                                  [(g["doc"], g["start"], g["end"]) for g in passages], k)
    return RetrievalStage(rag, gold_shown, scores)


# --- stage: the ladder's facts ----------------------------------------------------------

def facts(sample: SampleRecord, question: Question, gold: Gold, m: AnswerMatch,
          calls: CallStats, plan: PlanStage, retrieval: RetrievalStage) -> Facts:
    stop_reason = sample.get("stop_reason") or ""
    result = plan.result
    return Facts(
        infra=stop_reason == "infra_error" or bool(sample.get("error")) or calls.errored_turn,
        malformed_reply=stop_reason == "malformed_reply", correct=m.exact,
        malformed=calls.malformed, unknown_tool=calls.unknown,
        invalid_arguments=calls.invalid, turn_limit=stop_reason == "turn_limit",
        plan_applicable=plan.applicable, gold_plan_empty=plan.steps == [],
        called=calls.called, plan_exact=result.exact if result else None,
        plan_reason=result.reason if result else None, rag=retrieval.rag,
        gold_shown=retrieval.gold_shown, abstain_gold=gold.answer_type == "abstain",
        searched=bool(result and result.matched) if plan.implied_search else None,
        tool_failure=tool_failed(sample.get("turns") or [], plan.steps),
        tool_recovered=plan.recovered, answered=m.answered,
        repeated_call=plan.repeated, off_plan=plan.off_plan)


# --- stage: flags -----------------------------------------------------------------------

def flags(question: Question, gold: Gold, final: str, m: AnswerMatch, calls: CallStats,
          retrieval: RetrievalStage, stop_reason: str, verdict_source: str = "rules",
          repeated_call: bool = False, judge_injection: bool = False) -> list[str]:
    out = []
    if verdict_source == "judge":
        out.append("judged")
    elif verdict_source == "rules_undecided" and gold.answer_type != "calls":
        out.append("undecided")
    if judge_injection:
        out.append("judge_injection")
    if repeated_call:
        out.append("repeated_call")
    if gold.lang in DETECTED_LANGUAGES and final:
        detected = detect_language(final, m.reply_key)
        if detected is not None and detected != gold.lang:
            out.append("wrong_language")
    if m.abstained:
        out.append("abstained")
    if question.gold_passages and m.exact and not retrieval.gold_shown:
        out.append("correct_without_retrieval")
    if calls.repaired:
        out.append("repaired_format")
    if calls.parallel:
        out.append("parallel_calls")
    if calls.truncated:
        out.append("truncated_tool_output")
    if m.number_words:
        out.append("number_words")
    if stop_reason == "length" or calls.length:
        out.append("length_limit")
    if calls.tool_error:
        out.append("tool_error")
    return sorted(out)


# --- the whole sample -------------------------------------------------------------------

def echoes_tool_error(final: str, turns: list[TurnRecord]) -> bool:
    """The final answer only repeats an error message a tool call got back ("unknown tool
    'get_disk'; offered: add, ..."): it is neither an answer nor an abstention, however its
    words read ("unknown", a number of the message)."""
    key = text_key(final)
    if not key:
        return False
    for turn in turns:
        for event in turn.get("tool_events") or ():
            message = text_key(str(event.get("error_message") or "")) if event.get("error") \
                else ""
            # the whole message, or a part of it long enough not to be a chance match
            if message and (key == message or (len(key.split()) >= 4
                                               and contains_phrase(message, key))):
                return True
    return False


def calls_verdict(calls: CallStats, plan: PlanStage) -> bool:
    """answer_type "calls" (BFCL's verdict): every call attempt valid and the plan
    matched; with an empty plan, no call at all."""
    return calls.format_valid is not False and bool(plan.result and plan.result.exact)


def apply_judgement(m: AnswerMatch, judgement: dict[str, Any] | None
                    ) -> tuple[AnswerMatch, str]:
    """The answer verdict and where it came from: "judge" when a recorded judgement gives
    a verdict the scorer trusts (scoring/judging.py recorded_verdict), else "rules" (or
    "rules_undecided" where the rules abstain)."""
    verdict = recorded_verdict(judgement)
    if verdict is not None:
        return replace(m, exact=verdict, strict=m.strict and verdict,
                       lenient=m.lenient or verdict), "judge"
    return m, "rules" if m.decided else "rules_undecided"


def score_sample(sample: SampleRecord, question: Question, k: int = DEFAULT_K,
                 rules: str = "evalpipe", judgement: dict[str, Any] | None = None
                 ) -> ScoredSample:
    """Score one sample against its question; `rules`: the argument rule set of the
    plan matcher (scoring/plan.py RULE_SETS); `judgement`: the judge's recorded verdict on
    this sample (evalpipe/judge.py), if any. See docs/scoring.md for every field."""
    settings = sample.get("settings") or {}
    turns = sample.get("turns") or []
    final = sample.get("final_answer") or ""
    mode = (settings.get("retrieval") or {}).get("mode", "none")
    offered_list = settings.get("tools_offered")
    offered = set(offered_list) if offered_list is not None else None
    gold = gold_for(question)

    m = match_answer(final, gold)
    if echoes_tool_error(final, turns):  # the harness's words, not the model's answer
        m, verdict_source = replace(
            m, exact=False, strict=False, lenient=False, extracted=None, abstained=False,
            answered=False, rule="tool_error_echo", decided=True), "rules"
    else:
        m, verdict_source = apply_judgement(m, judgement)
    calls = call_stats(turns, offered)
    plan = plan_stage(question, turns, offered, mode, rules)
    if gold.answer_type == "calls":  # no answer to read: the calls are the answer
        ok = calls_verdict(calls, plan)
        m = replace(m, exact=ok, strict=ok, lenient=ok)
    if sample.get("stop_reason") == "malformed_reply":  # no reply at all: never right
        m = replace(m, exact=False, strict=False, lenient=False)
    retrieval = retrieval_stage(sample, question, mode, k)
    f = facts(sample, question, gold, m, calls, plan, retrieval)
    verdict = decide(f)
    result = plan.result
    # An empty plan is scored as "no unneeded call", not as a plan match.
    empty_plan = plan.applicable and plan.steps == []

    model = settings.get("model")
    if isinstance(model, dict):  # the config's model entry: {"id": ..., ...}
        model = model.get("id")
    return {
        "run_id": sample.get("run_id"),
        "cell_id": sample.get("cell_id"),
        "question_id": sample.get("question_id", question.id),
        "repeat": sample.get("repeat", 0),  # part of the sample's identity with the two above
        "seed": sample.get("seed"),
        "suite": sample.get("suite") or question.suite,
        "lang": gold.lang,
        "answer_type": gold.answer_type,
        "model": model,
        "format": settings.get("format"),
        "toolset": settings.get("toolset"),
        "retrieval_mode": mode,
        "scorer_version": SCORER_VERSION,
        "infra": f.infra,
        "tool_failure": verdict.category == "tool_failure",  # kept out of rates like infra
        "exact": m.exact,
        "exact_strict": m.strict,
        "exact_lenient": m.lenient,
        "extracted": m.extracted,
        "extraction": m.rule,
        "verdict_source": verdict_source,
        "judge": _judge_record(judgement),
        "format_valid": calls.format_valid,
        "format_valid_strict": calls.format_valid_strict,
        "calls_attempted": calls.attempted,
        "calls_valid": calls.valid,
        "calls_valid_strict": calls.valid_strict,
        "plan_exact": None if empty_plan or not result else result.exact,
        # an attempt that did not parse still reached for a tool the question does not need
        "no_unneeded_call": not (calls.called or calls.attempted) if empty_plan else None,
        "step_precision": result.precision if result else None,
        "step_recall": result.recall if result else None,
        "plan_failure": result.reason if result else None,
        "plan_failures": list(result.reasons) if result else [],
        "k": k,
        "retrieval": retrieval.scores,
        "category": verdict.category,
        "subtype": verdict.subtype,
        "why": ScoredWhy(rung=verdict.rung, reason=verdict.reason, facts=f.as_dict(),
                         plan=_plan_why(plan)),
        "flags": flags(question, gold, final, m, calls, retrieval,
                       sample.get("stop_reason") or "", verdict_source, plan.repeated,
                       bool(judgement and judgement.get("outcome") == "judge_injection")),
        "cost": sample_cost(sample),
        "schema_version": SCHEMA_VERSION,
    }


def _judge_record(judgement: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the scored sample keeps of a judgement (judgements.jsonl has the prompts)."""
    if not judgement:
        return None
    return {k: judgement.get(k) for k in ("model", "verdict", "verdicts", "consistent",
                                           "outcome", "reason", "raw", "use")}


def _plan_why(plan: PlanStage) -> dict[str, Any] | None:
    """Which gold steps a call matched and which not, for "why is this wrong_plan?"."""
    if not plan.applicable or plan.result is None:
        return None
    steps = plan.steps or []
    matched = plan.result.matched
    return {"implied_search": plan.implied_search,
            "steps": [s.get("id") for s in steps],
            "matched": dict(matched.items()),
            "unmatched": [s.get("id") for s in steps if s.get("id") not in matched],
            "failures": list(plan.result.reasons)}
