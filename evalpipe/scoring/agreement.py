"""How often each answer-extraction variant agrees with a human grader.

The labelled set (tests/data/extraction_labels.jsonl) holds replies, real ones of
the embedded model and written ones, each labelled right or wrong by the rule
"would a careful grader accept this as the answer?", with the reason. The
default variant (answer.DEFAULT_VARIANT) is the one that agrees most.

    python -m evalpipe.scoring.agreement [LABELS.jsonl]
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from evalpipe.scoring.answer import VARIANTS, make_gold, match_answer

LABELS = Path(__file__).resolve().parents[2] / "tests" / "data" / "extraction_labels.jsonl"


def load_labels(path: str | Path = LABELS) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


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


def main(argv: list[str]) -> int:
    rows = load_labels(argv[0] if argv else LABELS)
    for row in agreement_table(rows):
        parts = "  ".join(f"{k} {a}/{n}" for k, (a, n) in row["by"].items())
        print(f"{row['variant']:11s} {row['agree']:4d}/{row['n']}  {100 * row['rate']:5.1f}%  "
              f"{parts}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
