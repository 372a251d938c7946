"""BFCL (the Berkeley Function Calling Leaderboard) through evalpipe's grid.

`import_bfcl` turns the data of the pinned `bfcl-eval` wheel into question
files whose items carry their own schema-only tools; `configs/bfcl.yaml`
runs them. See docs/bfcl.md.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from evalpipe.bfcl.convert import CATEGORIES, DEFAULT_CATEGORIES, NO_CALL, convert_item
from evalpipe.bfcl.wheel import VERSION, BfclData
from evalpipe.errors import InputError


def convert_category(data: BfclData, category: str) -> tuple[list[dict], int]:
    """(question records, items skipped) for one category."""
    if category not in CATEGORIES:
        raise InputError(f"unknown BFCL category {category!r}", field="categories",
                         expected=" | ".join(CATEGORIES))
    items = data.questions(category)
    answers = {} if category in NO_CALL else data.answers(category)
    member = f"{data.path}!bfcl_eval/data/BFCL_v4_{category}.json"
    records, skipped = [], 0
    for line, item in enumerate(items, start=1):
        record = convert_item(category, item, answers.get(item["id"]), f"{member}:{line}")
        if record is None:
            skipped += 1
        else:
            records.append(record)
    return records, skipped


def category_records(category: str, wheel: str | Path | None = None) -> list[dict]:
    """The question records of one category, straight from the wheel."""
    with BfclData(wheel) as data:
        return convert_category(data, category)[0]


def import_bfcl(categories: list[str] | tuple[str, ...] = DEFAULT_CATEGORIES,
                out: str | Path = "datasets/bfcl", wheel: str | Path | None = None
                ) -> dict[str, dict[str, int]]:
    """Write one question file per category into `out`; every category is converted
    before anything is written, and each file is replaced atomically."""
    out = Path(out)
    with BfclData(wheel) as data:
        converted = {category: convert_category(data, category) for category in categories}
    out.mkdir(parents=True, exist_ok=True)
    summary = {}
    for category, (records, skipped) in converted.items():
        target = out / f"{category}.jsonl"
        tmp = target.with_suffix(".jsonl.tmp")
        with tmp.open("w", encoding="utf-8") as fh:
            for record in records:
                fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        os.replace(tmp, target)
        summary[category] = {"questions": len(records), "skipped": skipped}
    return summary


__all__ = ["CATEGORIES", "DEFAULT_CATEGORIES", "VERSION", "BfclData", "category_records",
           "convert_category", "import_bfcl"]
