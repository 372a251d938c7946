"""score_sample: one sample record (samples.jsonl) + its Question -> one scored dict.

Pure: no model, no tools run (the gold plan's expected values come from the
pure built-in arithmetic functions), no I/O.
"""

from __future__ import annotations

from typing import Any

from evalpipe.questions import Question
from evalpipe.scoring.answer import Gold, make_gold, match_answer
from evalpipe.scoring.categories import Facts, primary_category
from evalpipe.scoring.extract import detect_language
from evalpipe.scoring.plan import executed_calls, match_plan
from evalpipe.scoring.retrieval_metrics import covers, retrieval_scores

SCORER_VERSION = "1"
DETECTED_LANGUAGES = frozenset({"vi", "en"})

_GOLD_CACHE: dict[int, tuple[Question, Gold]] = {}


def gold_for(question: Question) -> Gold:
    """The question's comparison data, computed once per Question object."""
    entry = _GOLD_CACHE.get(id(question))
    if entry is not None and entry[0] is question:
        return entry[1]
    gold = make_gold(question.answer, question.answer_type, list(question.aliases or ()),
                     question.lang or "en")
    if len(_GOLD_CACHE) > 200_000:
        _GOLD_CACHE.clear()
    _GOLD_CACHE[id(question)] = (question, gold)
    return gold


def first_retrieval_list(sample: dict[str, Any]) -> list[dict[str, Any]]:
    """The ranking retrieval metrics are computed on: the chunks prepended to the
    prompt, else the hits of the first search_site call that ran, else []."""
    retrieved = sample.get("retrieved") or []
    prepend = [c for c in retrieved if c.get("source", "prepend") == "prepend"]
    if prepend:
        return prepend
    tool = [c for c in retrieved if c.get("source") == "tool"]
    for position, turn in enumerate(sample.get("turns") or ()):
        for event in turn.get("tool_events") or ():
            if event.get("name") == "search_site" and not event.get("error"):
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


def score_sample(sample: dict[str, Any], question: Question, k: int = 3) -> dict[str, Any]:
    """Score one sample against its question. See docs/scoring.md for every field."""
    settings = sample.get("settings") or {}
    turns = sample.get("turns") or []
    stop_reason = sample.get("stop_reason") or ""
    final = sample.get("final_answer") or ""
    gold = gold_for(question)
    m = match_answer(final, gold)

    # --- per turn: format validity, flags, cost --------------------------------------
    offered = settings.get("tools_offered")
    offered_set = set(offered) if offered is not None else None
    attempted = valid = valid_strict = 0
    malformed = unknown = invalid = parallel = repaired = truncated = tool_error = False
    infra = stop_reason == "infra_error" or bool(sample.get("error"))
    length = stop_reason == "length"
    called = False
    prompt_tokens = completion_tokens = 0
    prefill_ms = decode_ms = 0.0
    for turn in turns:
        calls = turn.get("calls")
        parse_errors = turn.get("parse_errors")
        strict_errors = turn.get("strict_errors")
        if calls or parse_errors or strict_errors or turn.get("repaired"):
            calls = calls or ()
            parse_errors = parse_errors or ()
            events = turn.get("tool_events") or ()
            attempted += len(calls) + len(parse_errors)
            bad = 0
            for event in events:
                called = True
                error = event.get("error")
                if error:
                    if error == "unknown_tool":
                        unknown = True
                        bad += 1
                    elif error == "invalid_arguments":
                        invalid = True
                        bad += 1
                    else:
                        tool_error = True
                if event.get("truncated"):
                    truncated = True
            if offered_set is not None and len(events) < len(calls):  # calls that never ran
                ran = {e.get("call_id") for e in events}
                for c in calls:
                    if c.get("id") not in ran and c.get("name") not in offered_set:
                        unknown = True
                        bad += 1
            turn_valid = max(0, len(calls) - bad)
            valid += turn_valid
            fixed = max(len(strict_errors or ()) - len(parse_errors),
                        1 if turn.get("repaired") else 0)
            valid_strict += max(0, turn_valid - fixed)
            if parse_errors:
                malformed = True
            if len(calls) > 1:
                parallel = True
            if fixed:
                repaired = True
        finish = turn.get("finish_reason")
        if finish != "stop":
            if finish == "length":
                length = True
            elif finish == "error":
                infra = True
        prompt_tokens += turn.get("prompt_tokens") or 0
        completion_tokens += turn.get("completion_tokens") or 0
        prefill_ms += turn.get("prefill_ms") or 0.0
        decode_ms += turn.get("decode_ms") or 0.0
    format_valid = (valid == attempted) if attempted else None
    format_valid_strict = (valid_strict == attempted) if attempted else None

    # --- plan ------------------------------------------------------------------------
    gold_calls = question.gold_calls
    plan_applicable = gold_calls is not None and (
        offered_set is None or (bool(offered_set)
                                and all(s.get("name") in offered_set for s in gold_calls)))
    plan = match_plan(executed_calls(turns), gold_calls) if plan_applicable else None

    # --- retrieval -------------------------------------------------------------------
    passages = question.gold_passages or []
    retrieved = sample.get("retrieved") or []
    mode = (settings.get("retrieval") or {}).get("mode", "none")
    rag = bool(passages) and (mode in ("prepend", "tool") or bool(retrieved))
    gold_shown = bool(passages) and any(covers(c, g) for c in retrieved for g in passages)
    retrieval = None
    if rag:
        ranked = sorted(first_retrieval_list(sample), key=_rank_key)
        retrieval = retrieval_scores([(c["doc"], c["start"], c["end"]) for c in ranked],
                                     [(g["doc"], g["start"], g["end"]) for g in passages], k)

    # --- category and flags ------------------------------------------------------------
    category, subtype = primary_category(Facts(
        infra=infra, correct=m.exact, malformed=malformed, unknown_tool=unknown,
        invalid_arguments=invalid, turn_limit=stop_reason == "turn_limit",
        plan_applicable=plan_applicable, gold_plan_empty=gold_calls == [], called=called,
        plan_exact=plan.exact if plan else None, plan_reason=plan.reason if plan else None,
        rag=rag, gold_shown=gold_shown, abstain_gold=gold.answer_type == "abstain"))
    flags = []
    if gold.lang in DETECTED_LANGUAGES and final:
        detected = detect_language(final, m.reply_key)
        if detected is not None and detected != gold.lang:
            flags.append("wrong_language")
    if m.abstained:
        flags.append("abstained")
    if passages and m.exact and not gold_shown:
        flags.append("correct_without_retrieval")
    if repaired:
        flags.append("repaired_format")
    if parallel:
        flags.append("parallel_calls")
    if truncated:
        flags.append("truncated_tool_output")
    if m.number_words:
        flags.append("number_words")
    if length:
        flags.append("length_limit")
    if tool_error:
        flags.append("tool_error")
    flags.sort()

    model = settings.get("model")
    if isinstance(model, dict):  # the config's model entry: {"id": ..., ...}
        model = model.get("id")
    return {
        "run_id": sample.get("run_id"),
        "cell_id": sample.get("cell_id"),
        "question_id": sample.get("question_id", question.id),
        "suite": sample.get("suite") or question.suite,
        "lang": gold.lang,
        "answer_type": gold.answer_type,
        "model": model,
        "format": settings.get("format"),
        "toolset": settings.get("toolset"),
        "retrieval_mode": mode,
        "scorer_version": SCORER_VERSION,
        "infra": infra,
        "exact": m.exact,
        "exact_strict": m.strict,
        "exact_lenient": m.lenient,
        "extracted": m.extracted,
        "format_valid": format_valid,
        "format_valid_strict": format_valid_strict,
        "calls_attempted": attempted,
        "calls_valid": valid,
        "calls_valid_strict": valid_strict,
        "plan_exact": plan.exact if plan else None,
        "step_precision": plan.precision if plan else None,
        "step_recall": plan.recall if plan else None,
        "plan_failure": plan.reason if plan else None,
        "plan_failures": list(plan.reasons) if plan else [],
        "k": k,
        "retrieval": retrieval,
        "category": category,
        "subtype": subtype,
        "flags": flags,
        "cost": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "turns": len(turns),
            "prefill_ms": prefill_ms,
            "ttft_ms": (turns[0].get("prefill_ms") or 0.0) if turns else None,
            "decode_ms": decode_ms,
            "wall_ms": sample.get("wall_ms") or 0.0,
        },
    }
