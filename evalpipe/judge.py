"""The model-graded judge: any evalpipe backend grades free-form answers, and its
agreement with a labelled set is measured before it is trusted.

The judge is configured like a model (`judge.model` is a `models:` entry: an embedded
model, a llama.cpp or vLLM server, any OpenAI-compatible API). It is asked only where
the rules abstain (`use: undecided`, the default) or, by explicit choice, on every
free-form answer (`use: all`); never silently. Each reply is judged twice, the
reference before and after it, greedy, in the protocol of scoring/judging.py (the
reply as data in a JSON string, the verdict a JSON object alone, a reply that addresses
the judge never sent); the verdict counts when both readings give one and agree. Every
judgement records the judge's model, both prompts, both raw replies, what it came to
(`outcome`), the verdict and the reason in the run's judgements.jsonl, which `evalpipe
score` reads without loading the judge; the judge's replies also go through the
generation cache, so judging a run again costs nothing (a failed request is not
cached: judging again asks it again).

`judge_agreement` runs the judge over a labelled set
(evalpipe/scoring/labels/grading_labels.jsonl by default) and returns Cohen's kappa
and raw agreement (scikit-learn) for the judge and, beside it, for the rules on the
items the rules decide.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evalpipe.backends import ModelEntry, model_entry
from evalpipe.backends.base import Backend, GenerationSettings
from evalpipe.cache import GenerationCache
from evalpipe.errors import EvalpipeError, InfraError, InputError, NoVerdict
from evalpipe.identity import sample_key
from evalpipe.questions import Question
from evalpipe.records import Generation
from evalpipe.scoring.answers.match import make_gold, match_answer
from evalpipe.scoring.judging import (
    OUTCOMES,
    RUBRIC_VERSION,
    USES,
    addresses_judge,
    applies,
    combine,
    judge_messages,
    parse_verdict,
)
from evalpipe.scoring.score import gold_for
from evalpipe.store import RunStore

DEFAULT_MAX_NEW_TOKENS = 64
FREE_FORM = ("number", "text", "abstain")  # the answers a judge grades


def _reference(answer: Any, aliases: list[str] | tuple[str, ...]) -> str:
    extra = f" (also accepted: {', '.join(map(str, aliases))})" if aliases else ""
    return f"{answer}{extra}"


def _reading(gen: Generation) -> tuple[bool | None, str, str]:
    """(verdict, raw, why) of one judge reply. A failed request and a reply the backend
    rejected as malformed are never read for a verdict."""
    if gen.finish_reason == "error":
        return None, "", f"request failed: {gen.error or 'no reply'}"
    if gen.finish_reason == "malformed":
        return None, gen.text, f"malformed reply: {gen.error or 'rejected'}"
    verdict, why = parse_verdict(gen.text)
    return verdict, gen.text, why


class Judge:
    """A backend that grades replies; `model` is a `models:` config entry."""

    def __init__(self, model: ModelEntry | dict[str, Any],
                 max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
                 cache: GenerationCache | None = None, backend: Backend | None = None):
        self.model = model_entry(model)
        self.backend = backend or self.model.load()
        self.settings = GenerationSettings(max_new_tokens=max_new_tokens, temperature=0.0)
        self.cache = cache

    @property
    def name(self) -> str:
        return self.model.id

    def grade(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """items: {question, answer, aliases, answer_type, lang, reply} -> one judgement
        each: the prompts (reference first, then last), raw replies, verdicts, verdict and
        `outcome` (judging.OUTCOMES). A reply that addresses the judge is not sent."""
        prompts, messages, asked = [], [], []
        screened = [addresses_judge(str(item["reply"])) for item in items]
        for item, found in zip(items, screened):
            if found:
                continue
            asked.append(item)
            for first in (True, False):
                msgs = judge_messages(str(item["question"]),
                                      _reference(item["answer"], item.get("aliases") or ()),
                                      str(item["reply"]), str(item["answer_type"]),
                                      item.get("lang"), reference_first=first)
                messages.append(msgs)
                prompts.append(self.backend.render(msgs, None))
        gens = (self.cache.generate(self.backend, prompts, self.settings) if self.cache
                else self.backend.generate(prompts, self.settings)) if prompts else []
        base = {"model": self.name, "rubric_version": RUBRIC_VERSION}
        out: list[dict[str, Any]] = []
        pair = iter(range(0, len(gens), 2))
        for found in screened:
            if found:
                out.append({**base, "prompts": [], "raw": [], "failed": [], "verdicts": [],
                            "verdict": None,
                            "consistent": False, "outcome": "judge_injection",
                            "reason": f"not sent to the judge: the reply {found}"})
                continue
            i = next(pair)
            read = [_reading(g) for g in gens[i:i + 2]]
            verdicts = [v for v, _, _ in read]
            failed = [g.finish_reason == "error" for g in gens[i:i + 2]]
            verdict = combine(verdicts)
            outcome = ("infra" if any(failed) else "undecided" if None in verdicts
                       else "inconsistent" if verdict is None else "verdict")
            why = next((w for v, _, w in read if v is None), "") or \
                ("the two orders disagree" if verdict is None else read[0][2])
            out.append({**base, "prompts": [json.dumps(messages[i + j], ensure_ascii=False)
                                            for j in range(2)],
                        "raw": [raw for _, raw, _ in read], "failed": failed,
                        "verdicts": verdicts, "verdict": verdict,
                        "consistent": verdict is not None, "outcome": outcome,
                        "reason": why})
        return out


def outcome_counts(judgements: list[dict[str, Any]]) -> dict[str, int]:
    """How many judgements came to each outcome, and how many requests went out and
    how many of those failed."""
    counts = Counter(j["outcome"] for j in judgements)
    return {"judged": len(judgements), **{o: counts[o] for o in OUTCOMES},
            "requests": sum(len(j["prompts"]) for j in judgements),
            "failed_requests": sum(sum(j["failed"]) for j in judgements)}


def could_not_judge(counts: dict[str, int], what: str) -> EvalpipeError | None:
    """Why judging `what` failed as a whole, or None. Every request to the judge failed
    (it never answered): InfraError, exit 1. It answered, but not one reply it was asked
    about got a verdict: NoVerdict, exit 4. Nothing to ask (no answer the rules left
    undecided, or every such reply addressed the judge) is no failure."""
    if not counts["requests"]:
        return None
    if counts["failed_requests"] == counts["requests"]:
        return InfraError(f"judging {what}: every one of the {counts['requests']} requests "
                          "to the judge failed; nothing was judged (run it again when the "
                          "judge answers)")
    if not counts["verdict"]:
        return NoVerdict(f"judging {what}: the judge gave no verdict on any of the "
                         f"{counts['judged'] - counts['judge_injection']} replies it was "
                         f"asked about ({summary(counts)})")
    return None


def summary(counts: dict[str, int]) -> str:
    """One phrase: the judgements by outcome."""
    return ", ".join(f"{counts[o]} {o}" for o in OUTCOMES)


def judge_run(run_dir: str | Path, judge: Judge, use: str = "undecided",
              echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Judge a run's free-form answers where `use` says and record judgements.jsonl (the
    caller re-scores the run: runner.score_run reads it). Returns counts."""
    if use not in USES:
        raise InputError(f"unknown judge use {use!r}", field="judge.use",
                         expected=" | ".join(USES))
    store = RunStore(run_dir)
    questions = store.questions()
    items, keys = [], []
    for sample in store.iter_samples():
        q = questions.get(sample["question_id"])
        if q is None or q.answer_type not in FREE_FORM:
            continue
        final = sample.get("final_answer") or ""
        if sample.get("error") or not applies(match_answer(final, gold_for(q)).decided,
                                                 q.answer_type, use):
            continue
        items.append(_item(q, final))
        keys.append(sample_key(sample))
    echo(f"judge {judge.name}: {len(items)} answers to grade ({use})")
    graded = judge.grade(items) if items else []
    records = [{"cell_id": c, "question_id": qid, "repeat": r, "use": use, **g}
               for (c, qid, r), g in zip(keys, graded)]
    store.write_judgements(records)
    return outcome_counts(records)


def _item(q: Question, reply: str) -> dict[str, Any]:
    return {"question": q.question, "answer": q.answer, "aliases": list(q.aliases),
            "answer_type": q.answer_type, "lang": q.lang, "reply": reply}


def is_right(row: dict[str, Any]) -> bool:
    """A labelled reply's truth: `label` "right" (grading_labels.jsonl) or `answer_right`
    (qwen_labels.jsonl, whole labelled samples)."""
    return bool(row["answer_right"]) if "answer_right" in row else row["label"] == "right"


def judge_agreement(judge: Judge, labels: list[dict[str, Any]]) -> dict[str, Any]:
    """The judge's and the rules' agreement with a labelled set: Cohen's kappa and raw
    agreement on the items each decides (the judge: both orders agree; the rules: not
    undecided), with how many that is; the judge's judgements by outcome; and the judge
    as a tie-breaker: on the items the rules leave undecided, and the rules with the
    judge's verdict where they abstain."""
    from sklearn.metrics import accuracy_score, cohen_kappa_score

    labels = [r for r in labels if r["answer_type"] in FREE_FORM]  # the judge's kind
    truth = [is_right(r) for r in labels]
    verdicts = judge.grade([{**r, "aliases": r.get("aliases") or []} for r in labels])
    rules = []
    for r in labels:
        gold = make_gold(r["answer"], r["answer_type"], r.get("aliases") or [], r["lang"],
                         r.get("question") or "")
        m = match_answer(r["reply"], gold)
        rules.append(m.exact if m.decided else None)

    def measure(predicted: list[bool | None]) -> dict[str, Any]:
        pairs = [(t, p) for t, p in zip(truth, predicted) if p is not None]
        if not pairs:
            return {"n": 0, "of": len(truth), "raw_agreement": None, "kappa": None}
        t, p = zip(*pairs)
        kappa = cohen_kappa_score(t, p) if len(set(t) | set(p)) > 1 else None
        return {"n": len(pairs), "of": len(truth), "raw_agreement": accuracy_score(t, p),
                "kappa": None if kappa is None or math.isnan(kappa) else float(kappa)}

    judged = [v["verdict"] for v in verdicts]
    judge_row = {**measure(judged), **outcome_counts(verdicts)}
    undecided = [j if p is None else None for j, p in zip(judged, rules)]
    return {"judge_model": judge.name, "rubric_version": RUBRIC_VERSION,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "labels": len(labels),
            "judge": judge_row, "rules": measure(rules),
            "judge_where_rules_undecided": {
                **measure(undecided), "undecided": sum(p is None for p in rules)},
            "rules_then_judge": measure([j if p is None else p
                                         for j, p in zip(judged, rules)]),
            "items": [{"id": r.get("id"), "right": t, "judge": v["verdict"],
                       "outcome": v["outcome"], "rules": p, "raw": v["raw"]}
                      for r, t, v, p in zip(labels, truth, verdicts, rules)]}
