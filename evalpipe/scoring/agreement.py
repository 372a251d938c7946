"""How often the answer rules agree with a careful human grader.

Two labelled sets: evalpipe/scoring/labels/extraction_labels.jsonl (the extraction variants, one
row per variant) and evalpipe/scoring/labels/grading_labels.jsonl (replies of the embedded models
and written ones, each with its class, split and whether it abstains: one row per
class, counting agreement on the replies the rules decide; they may abstain). Each
reply is labelled right or wrong by "would a careful grader accept this as the
answer?", with the reason.

    python -m evalpipe.scoring.agreement [LABELS.jsonl]

A third set, evalpipe/scoring/labels/qwen_labels.jsonl, holds whole samples of the Qwen
models with tools and retrieval, labelled for the answer, each call, the plan and the
failure category (how: qwen_labels.md); it is re-scored whole and reported per split
(dev, frozen), model and suite.
"""

from __future__ import annotations

import hashlib
import math
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from evalpipe import jsonl
from evalpipe.errors import InputError
from evalpipe.questions import parse_question
from evalpipe.records import DEFAULT_K, ScoredSample
from evalpipe.scoring.answers.match import VARIANTS, make_gold, match_answer
from evalpipe.scoring.score import echoes_tool_error, score_sample

LABELS = Path(__file__).resolve().parent / "labels" / "extraction_labels.jsonl"
GRADING = LABELS.with_name("grading_labels.jsonl")


def load_labels(path: str | Path = LABELS) -> list[dict[str, Any]]:
    """The labelled replies of a JSONL file; a missing file or a bad line is an
    InputError naming it."""
    if not Path(path).is_file():
        raise InputError("labelled set not found", file=str(path),
                         expected="a JSONL file of labelled replies")
    return [record for _, record in jsonl.records(path)]


def disagreements(rows: list[dict[str, Any]], variant: str) -> list[dict[str, Any]]:
    """The labelled replies the variant scores differently from the grader."""
    out = []
    for row in rows:
        gold = make_gold(row["answer"], row["answer_type"], row.get("aliases") or [],
                         row["lang"], row.get("question") or "")
        if match_answer(row["reply"], gold, variant).exact != (row["label"] == "right"):
            out.append(row)
    return out


def agreement_table(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per variant: agreement overall, and by source and answer type."""
    table = []
    for name in VARIANTS:
        wrong = disagreements(rows, name)
        missed = Counter((r["source"], r["answer_type"]) for r in wrong)
        total = Counter((r["source"], r["answer_type"]) for r in rows)
        table.append({
            "variant": name, "agree": len(rows) - len(wrong), "n": len(rows),
            "rate": (len(rows) - len(wrong)) / len(rows),
            "by": {f"{s}/{t}": (n - missed[(s, t)], n) for (s, t), n in sorted(total.items())},
        })
    return table


def class_table(rows: list[dict[str, Any]], by: str = "class") -> list[dict[str, Any]]:
    """Per value of `by` (and "all"): replies, how many the rules decide, and how many of
    those they score as the grader did (the default variant)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(str(row.get(by)), []).append(row)
    groups["all"] = rows
    out = []
    for name, members in groups.items():
        decided = agree = 0
        for row in members:
            gold = make_gold(row["answer"], row["answer_type"], row.get("aliases") or [],
                             row["lang"], row.get("question") or "")
            m = match_answer(row["reply"], gold)
            if m.decided:
                decided += 1
                agree += m.exact == (row["label"] == "right")
        out.append({by: name, "n": len(members), "decided": decided, "agree": agree,
                    "rate": agree / decided if decided else None})
    return out


def abstention_methods(rows: list[dict[str, Any]], folds: int = 5,
                       cross_validate: bool = False) -> dict[str, Any]:
    """How three ways of telling an abstention agree with the grader's `abstained` label:
    the clause rules (abstention.py), the learned model alone (abstention_model.py) on
    every reply, and both (the rules, and the model where the rules are unsure, as
    scoring does). The model is the shipped one, for rows it never trained on; with
    `cross_validate`, a model of the same features and fit trained in stratified folds,
    so that no row is read by a model that saw it."""
    from evalpipe.scoring.answers import abstention_model
    from evalpipe.scoring.answers.abstention import abstention, premise_words
    from evalpipe.scoring.answers.extract import extract_numbers

    truth = [bool(r["abstained"]) for r in rows]
    read = []
    for r in rows:
        question, lang = r.get("question") or "", r.get("lang") or "en"
        echoes = frozenset(n.value for n in extract_numbers(question, lang))
        read.append(abstention(r["reply"], echoes, premise_words(question)))
    if cross_validate:
        from sklearn.model_selection import StratifiedKFold

        probability = [0.0] * len(rows)
        cv = StratifiedKFold(n_splits=folds, shuffle=True, random_state=0)
        for train, test in cv.split([r["reply"] for r in rows], truth):
            weights, intercept = abstention_model.fit([(rows[i]["reply"], truth[i])
                                                       for i in train])
            model = abstention_model.Model(weights, intercept, abstention_model.THRESHOLD, {})
            for i in test:
                probability[i] = model.probability(rows[i]["reply"])
        learned = [p >= abstention_model.THRESHOLD for p in probability]
    else:
        model = abstention_model.load()
        learned = [model.abstains(r["reply"]) for r in rows]
    rules = [a.abstained for a in read]
    both = [lrn if a.rule == "unsure" else a.abstained for a, lrn in zip(read, learned)]

    def agree(predicted: list[bool]) -> tuple[int, int]:
        return sum(p == t for p, t in zip(predicted, truth)), len(truth)

    return {"abstaining": sum(truth), "unsure": sum(a.rule == "unsure" for a in read),
            "rules": agree(rules), "learned": agree(learned), "both": agree(both),
            "misses": {name: [r["id"] for r, p, t in zip(rows, got, truth) if p != t]
                       for name, got in (("rules", rules), ("learned", learned),
                                         ("both", both))}}


def main(argv: list[str]) -> int:
    rows = load_labels(argv[0] if argv else LABELS)
    if rows and "sample" in rows[0]:  # hand-labelled transcripts, re-scored whole
        print_transcript_table(rows)
        return 0
    if rows and "class" in rows[0]:
        for by in ("class", "split", "source"):
            for row in class_table(rows, by):
                rate = "-" if row["rate"] is None else f"{100 * row['rate']:5.1f}%"
                print(f"{by:6s} {row[by]:34s} n {row['n']:4d}  decided {row['decided']:4d}  "
                      f"agree {row['agree']:4d}  {rate}")
        methods = abstention_methods(rows)
        for name in ("rules", "learned", "both"):
            agree, n = methods[name]
            print(f"abstention {name:8s} {agree}/{n} ({methods['abstaining']} abstain, "
                  f"{methods['unsure']} where the rules are unsure)")
        return 0
    for row in agreement_table(rows):
        parts = "  ".join(f"{k} {a}/{n}" for k, (a, n) in row["by"].items())
        print(f"{row['variant']:11s} {row['agree']:4d}/{row['n']}  {100 * row['rate']:5.1f}%  "
              f"{parts}")
    return 0



# -- hand-labelled tool transcripts: the scorer as a whole against a grader -----------------
# qwen_labels.jsonl holds whole samples of the Qwen2.5-Coder models (every turn, call and
# tool result) with a grader's verdicts; qwen_labels.md says how they were made. Each row
# is re-scored here with the current scorer, so the figures follow the rules as they change.

TRANSCRIPTS = LABELS.with_name("qwen_labels.jsonl")
SPLIT_SALT = "qwen-labels-split:"


def frozen_questions(rows: list[dict[str, Any]]) -> set[str]:
    """The questions of the frozen split: per suite, the first third (rounded up) of the
    labelled questions in the order of sha256(SPLIT_SALT + question id). A question's
    replies in every cell fall on one side, so rules tuned on the dev split never saw a
    reply to a frozen question."""
    by_suite: dict[str, set[str]] = {}
    for row in rows:
        by_suite.setdefault(row["suite"], set()).add(row["question_id"])
    frozen: set[str] = set()
    for ids in by_suite.values():
        ordered = sorted(ids, key=lambda i: hashlib.sha256((SPLIT_SALT + i).encode()).hexdigest())
        frozen.update(ordered[:math.ceil(len(ordered) / 3)])
    return frozen


def rescore(row: dict[str, Any]) -> ScoredSample:
    """The current scorer's verdict on a labelled sample (no model: the record holds it)."""
    question = parse_question(row["question_record"], file=str(TRANSCRIPTS), line=0)
    sample = row["sample"]
    k = (sample.get("settings") or {}).get("k") or DEFAULT_K
    return score_sample(sample, question, k=int(k))


def _plan_verdict(scored: ScoredSample) -> bool | None:
    """The scorer's plan verdict in the grader's terms: the plan matched, or for an empty
    plan no tool was called; None where no plan applies."""
    if scored["plan_exact"] is not None:
        return scored["plan_exact"]
    return scored["no_unneeded_call"]


def transcript_disagreements(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per labelled sample and measure on which the scorer and the grader differ:
    measure (exact, category, calls, plan), the labelled and the scored value, and the
    class of the disagreement ("labelled right, scored wrong", "misread_context ->
    wrong_answer", ...)."""
    out = []
    for row in rows:
        scored = rescore(row)
        calls = row["calls_well_formed"]
        pairs: dict[str, tuple[Any, Any]] = {
            "exact": (row["answer_right"], scored["exact"]),
            "category": (row["category"], scored["category"]),
            "calls": ((len(calls), sum(calls)),
                      (scored["calls_attempted"], scored["calls_valid"])),
            "plan": (row["plan_valid"], _plan_verdict(scored)),
        }
        for measure, (labelled, got) in pairs.items():
            if labelled == got:
                continue
            if measure == "exact":
                kind = f"labelled {'right' if labelled else 'wrong'}, scored " \
                       f"{'right' if got else 'wrong'}"
            elif measure == "calls":
                kind = "attempts (labelled, scored) " \
                       f"{labelled[0]}, {got[0]}; well-formed {labelled[1]}, {got[1]}"
            else:
                kind = f"{labelled} -> {got}"
            out.append({"id": row["id"], "split": row["split"], "model": row["model"],
                        "suite": row["suite"], "measure": measure, "labelled": labelled,
                        "scored": got, "class": kind, "debatable": bool(row["debatable"]),
                        "undecided": scored["verdict_source"] == "rules_undecided"})
    return out


def transcript_table(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per split, and within it per model and per suite: for each measure, (agree, n) over
    the labelled samples and over those whose verdict is not debatable, and the count of
    each class of disagreement. A sample that repeats another one whole (same model,
    question, tools, passages and turns: `duplicate_of`) is left out and counted."""
    duplicates = Counter(r["split"] for r in rows if r.get("duplicate_of"))
    rows = [r for r in rows if not r.get("duplicate_of")]
    missed = transcript_disagreements(rows)
    measures = ("exact", "category", "calls", "plan")
    table: dict[str, Any] = {}
    for split in sorted({r["split"] for r in rows}):
        members = [r for r in rows if r["split"] == split]
        misses = [d for d in missed if d["split"] == split]
        part: dict[str, Any] = {"n": len(members), "duplicates": duplicates[split],
                                "classes": {}}
        for measure in measures:
            wrong = [d for d in misses if d["measure"] == measure]
            clear = sum(not r["debatable"] for r in members)
            part[measure] = (len(members) - len(wrong), len(members))
            part[measure + "_clear"] = (clear - sum(not d["debatable"] for d in wrong), clear)
            part["classes"][measure] = dict(Counter(d["class"] for d in wrong).most_common())
        for by in ("model", "suite"):
            groups = Counter(r[by] for r in members)
            part["by_" + by] = {
                name: {m: (n - sum(d[by] == name and d["measure"] == m for d in misses), n)
                       for m in measures}
                for name, n in sorted(groups.items())}
        # the abstention readers on the final replies, the rules (which score) against the
        # learned one (counts only: the misses' ids stay here); a reply that echoes a tool's
        # error is no reply of the model's and is never read for abstention
        readers = abstention_methods([r for r in members if not echoes_tool_error(
            r["reply"], (r.get("sample") or {}).get("turns") or [])])
        part["abstention"] = {k: readers[k] for k in ("abstaining", "rules", "learned", "both")}
        table[split] = part
    return table


def print_transcript_table(rows: list[dict[str, Any]], list_split: str | None = "dev") -> None:
    """The table of transcript_table, then the disagreements of `list_split` one by one
    (never those of the frozen split: it is read as counts and classes only)."""
    def pct(pair: tuple[int, int]) -> str:
        agree, n = pair
        return f"{agree}/{n} ({100 * agree / n:5.1f}%)" if n else "0/0"

    for split, part in transcript_table(rows).items():
        print(f"split {split}: {part['n']} labelled samples "
              f"({part['duplicates']} repeats of another left out)")
        for measure in ("exact", "category", "calls", "plan"):
            print(f"  {measure:9s} {pct(part[measure]):20s} not debatable "
                  f"{pct(part[measure + '_clear'])}")
        for by in ("model", "suite"):
            for name, figures in part["by_" + by].items():
                cells = "  ".join(f"{m} {pct(v)}" for m, v in figures.items())
                print(f"  {by} {name:20s} {cells}")
        readers = part["abstention"]
        print(f"  abstention read in {readers['rules'][1]} final replies (no tool error "
              f"echoed; {readers['abstaining']} abstaining): rules "
              f"{pct(readers['rules'])}  learned {pct(readers['learned'])}  both "
              f"{pct(readers['both'])}")
        for measure, classes in part["classes"].items():
            for kind, count in classes.items():
                print(f"  miss {measure:9s} {count:3d}  {kind}")
    if list_split and list_split != "frozen":
        listed = [r for r in rows if r["split"] == list_split and not r.get("duplicate_of")]
        for d in transcript_disagreements(listed):
            print(f"{d['split']} {d['measure']:9s} {d['id']}  {d['class']}"
                  f"{'  (debatable)' if d['debatable'] else ''}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
