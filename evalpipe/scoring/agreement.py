"""How often the answer rules agree with a careful human grader.

Two labelled sets: evalpipe/scoring/labels/extraction_labels.jsonl (the extraction variants, one
row per variant) and evalpipe/scoring/labels/grading_labels.jsonl (replies of the embedded models
and written ones, each with its class, split and whether it abstains: one row per
class, counting agreement on the replies the rules decide; they may abstain). Each
reply is labelled right or wrong by "would a careful grader accept this as the
answer?", with the reason.

    python -m evalpipe.scoring.agreement [LABELS.jsonl]
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

from evalpipe import jsonl
from evalpipe.errors import InputError
from evalpipe.scoring.answers.match import VARIANTS, make_gold, match_answer

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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
