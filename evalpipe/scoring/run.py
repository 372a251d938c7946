"""Scores of a whole run, from its records alone (pure: no files, no model)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from evalpipe.errors import InputError
from evalpipe.identity import sample_key
from evalpipe.questions import Question
from evalpipe.records import (
    DEFAULT_K,
    SCHEMA_VERSION,
    GroupRecord,
    Manifest,
    SampleRecord,
    ScoredSample,
    Scores,
    UnscoredRecord,
    VerdictCounts,
)
from evalpipe.scoring.aggregate import aggregate
from evalpipe.scoring.categories import SCORER_ERROR
from evalpipe.scoring.plan import RULE_SETS
from evalpipe.scoring.score import SCORER_VERSION, score_sample

MAX_ERROR_CHARS = 300


def unscored(sample: SampleRecord, question: Question, exc: Exception) -> ScoredSample:
    """The scored record of a sample the scorer failed on: its ids and the error. It
    is counted (category scorer_error) and, like an infra error, kept out of every rate."""
    message = f"{type(exc).__name__}: {exc}"
    if len(message) > MAX_ERROR_CHARS:
        message = message[:MAX_ERROR_CHARS] + "..."
    return {"run_id": sample.get("run_id"), "cell_id": sample.get("cell_id"),
            "question_id": sample.get("question_id", question.id),
            "suite": sample.get("suite") or question.suite, "repeat": sample.get("repeat", 0),
            "lang": question.lang, "answer_type": question.answer_type,
            "scorer_version": SCORER_VERSION, "infra": False, "scorer_error": message,
            "category": SCORER_ERROR, "subtype": None, "flags": [], "cost": {},
            "schema_version": SCHEMA_VERSION}


def match_rules(manifest: Manifest) -> str:
    """The run's argument rule set (config key `match`), checked against RULE_SETS."""
    rules = manifest.config.match or "evalpipe"
    if rules not in RULE_SETS:
        raise InputError(f"unknown rule set {rules!r}", field="match",
                         expected=" | ".join(RULE_SETS))
    return rules


def score_samples(manifest: Manifest, questions: dict[str, Question],
                  samples: Iterable[SampleRecord], k: int | None = None,
                  source: str = "samples.jsonl",
                  judgements: list[dict[str, Any]] | None = None) -> list[ScoredSample]:
    """Every sample scored; one the scorer fails on is recorded as such (`unscored`: a
    scorer bug must not cost a run). `judgements` are the judge's recorded verdicts
    (judgements.jsonl), read, never made."""
    by_sample = {(j["cell_id"], j["question_id"], int(j.get("repeat") or 0)): j
                 for j in judgements or ()}
    k, rules = k or manifest.config.k or DEFAULT_K, match_rules(manifest)
    scored: list[ScoredSample] = []
    for s in samples:
        q = questions.get(s["question_id"])
        if q is None:
            raise InputError(f"sample for unknown question {s['question_id']!r}", file=source)
        try:
            scored.append(score_sample(s, q, k=k, rules=rules,
                                       judgement=by_sample.get(sample_key(s))))
        except Exception as exc:  # noqa: BLE001 -- recorded per sample, the rest is scored
            scored.append(unscored(s, q, exc))
    return scored


def scores_of(manifest: Manifest, scored: list[ScoredSample], k: int | None = None) -> Scores:
    """scores.json, made here alone (a finished run's, and the viewer's of a run still
    running): the scored samples, the aggregates per cell x suite, the samples the
    scorer failed on, and where the answer verdicts came from."""
    failed: list[UnscoredRecord] = [
        {"cell_id": s["cell_id"], "question_id": s["question_id"], "repeat": s["repeat"],
         "scorer_error": s["scorer_error"]} for s in scored if "scorer_error" in s]
    groups = cast(list[GroupRecord], aggregate(scored))  # by cell_id and suite
    return {"run_id": manifest.run_id, "scorer_version": SCORER_VERSION,
            "k": k or manifest.config.k or DEFAULT_K, "schema_version": SCHEMA_VERSION,
            "groups": groups, "samples": scored, "unscored": failed,
            "verdicts": verdict_counts(scored), "match": match_rules(manifest)}


def score_records(manifest: Manifest, questions: dict[str, Question],
                  samples: Iterable[SampleRecord], k: int | None = None,
                  source: str = "samples.jsonl",
                  judgements: list[dict[str, Any]] | None = None) -> Scores:
    """scores.json of a run's records (score_samples, then scores_of)."""
    return scores_of(manifest, score_samples(manifest, questions, samples, k, source,
                                             judgements), k)


def verdict_counts(scored: list[ScoredSample]) -> VerdictCounts:
    """How many answer verdicts came from the judge (and its models), and how many the
    rules left undecided without one."""
    judged = [r for r in scored if r.get("verdict_source") == "judge"]
    return {"judge": len(judged),
            "judge_models": sorted({str((r.get("judge") or {}).get("model")) for r in judged}),
            "undecided": sum(r.get("verdict_source") == "rules_undecided" for r in scored)}
