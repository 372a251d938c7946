"""Question records: schema, loading, validation.

A local JSONL file is read line by line (evalpipe.jsonl.records, as `evalpipe
validate` reads it), so that every error names the line it comes from (a line
that is not UTF-8 or not JSON, NUL bytes) and mixed-type fields (an answer that
is a number in one record and a string in the next) never meet a table's schema
inference; a file with no record is an error of its own. Parquet/CSV files and
Hub dataset names go through HF datasets' `load_dataset`; their "line" is the
row number, and a file it cannot read is one InputError.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from evalpipe import jsonl
from evalpipe.errors import InputError
from evalpipe.plans import check_value
from evalpipe.tools.schema_only import definition_problem

ANSWER_TYPES = ("number", "text", "abstain", "calls")  # calls: graded by its tool calls alone
_REQUIRED = {"id": str, "suite": str, "question": str}
_KNOWN = {
    "id", "suite", "question", "answer", "answer_type", "aliases", "lang",
    "gold_calls", "gold_passages", "tags", "tools",
}


@dataclass
class Question:
    id: str
    suite: str
    question: str
    answer: str | int | float
    answer_type: str = "text"
    aliases: list[str] = field(default_factory=list)
    lang: str = "en"
    gold_calls: list[dict[str, Any]] | None = None  # None: unknown; []: no tool needed
    gold_passages: list[dict[str, Any]] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)  # schema-only tools of its own
    source: str = ""  # file:line it came from, for error messages

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("source")
        if not data["tools"]:  # absent, as before questions could carry tools
            del data["tools"]
        return data

    @property
    def needs_tools(self) -> bool:
        return bool(self.gold_calls)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def parse_question(record: Any, *, file: str, line: int) -> Question:
    """Check one decoded record against the schema and build a Question."""

    def fail(fld: str | None, message: str, expected: str | None = None):
        raise InputError(message, file=file, line=line, field=fld, expected=expected)

    if not isinstance(record, dict):
        fail(None, f"record is {type(record).__name__}", "a JSON object")
    for name, typ in _REQUIRED.items():
        if name not in record:
            fail(name, "missing required field", f"a {typ.__name__}")
        if not isinstance(record[name], typ) or not record[name].strip():
            fail(name, f"got {record[name]!r}", "a non-empty string")
    if "answer" not in record and record.get("answer_type") != "calls":
        fail("answer", "missing required field", "a string or number")
    answer = record.get("answer", "")
    if not (isinstance(answer, str) or _is_number(answer)):
        fail("answer", f"got {answer!r}", "a string or a finite number")
    unknown = sorted(set(record) - _KNOWN)
    if unknown:
        fail(unknown[0], "unknown field", "one of " + ", ".join(sorted(_KNOWN)))

    answer_type = record.get("answer_type") or ("number" if _is_number(answer) else "text")
    if answer_type not in ANSWER_TYPES:
        fail("answer_type", f"got {answer_type!r}", " | ".join(ANSWER_TYPES))
    if answer_type == "number" and not _is_number(answer):
        try:
            answer = float(answer) if "." in str(answer) else int(answer)
        except ValueError:
            fail("answer", f"got {answer!r} with answer_type number", "a number")

    aliases = record.get("aliases") or []
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        fail("aliases", f"got {aliases!r}", "a list of strings")
    lang = record.get("lang") or "en"
    if not isinstance(lang, str):
        fail("lang", f"got {lang!r}", "a language code such as 'vi' or 'en'")
    tags = record.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        fail("tags", f"got {tags!r}", "a list of strings")

    tools = record.get("tools") or []
    if not isinstance(tools, list):
        fail("tools", f"got {tools!r}", "a list of tool definitions")
    for i, tool in enumerate(tools):
        problem = definition_problem(tool)
        if problem:
            fail(f"tools[{i}]", problem, '{"type": "function", "function": {"name", '
                 '"description", "parameters": JSON Schema}}')
    if answer_type == "calls" and not isinstance(record.get("gold_calls"), list):
        fail("gold_calls", "answer_type calls without gold_calls", "a list of steps ([] for none)")

    gold_calls = record.get("gold_calls")
    if gold_calls is not None:
        if not isinstance(gold_calls, list):
            fail("gold_calls", f"got {gold_calls!r}", "a list of steps")
        seen: set[str] = set()
        for i, step in enumerate(gold_calls):
            where = f"gold_calls[{i}]"
            if not isinstance(step, dict):
                fail(where, f"got {step!r}", '{"id", "name", "arguments"}')
            if not isinstance(step.get("id"), str) or not step["id"]:
                fail(f"{where}.id", "missing step id", "a string such as 's1'")
            if step["id"] in seen:
                fail(f"{where}.id", f"duplicate step id {step['id']!r}", "unique step ids")
            if not isinstance(step.get("name"), str) or not step["name"]:
                fail(f"{where}.name", "missing tool name", "a string")
            if not isinstance(step.get("arguments"), dict):
                fail(f"{where}.arguments", f"got {step.get('arguments')!r}", "an object")
            problem = check_value(step["arguments"], seen, f"{where}.arguments")
            if problem:
                fail(*problem)
            seen.add(step["id"])

    passages = record.get("gold_passages") or []
    if not isinstance(passages, list):
        fail("gold_passages", f"got {passages!r}", "a list of {doc, start, end}")
    for i, span in enumerate(passages):
        where = f"gold_passages[{i}]"
        if not (isinstance(span, dict) and isinstance(span.get("doc"), str)
                and isinstance(span.get("start"), int) and isinstance(span.get("end"), int)
                and 0 <= span["start"] < span["end"]):
            fail(where, f"got {span!r}", "{doc: str, start: int, end: int} with start < end")

    return Question(
        id=record["id"], suite=record["suite"], question=record["question"], answer=answer,
        answer_type=answer_type, aliases=aliases, lang=lang, gold_calls=gold_calls,
        gold_passages=passages, tags=tags, tools=tools, source=f"{file}:{line}",
    )


BFCL_SOURCE = "bfcl:"  # "bfcl:simple_python": a BFCL category read from the pinned wheel


def _rows(source: str) -> Iterable[tuple[int, Any]]:
    """Yield (line number, decoded record) from a file, a BFCL category or a Hub dataset name."""
    if source.startswith(BFCL_SOURCE):
        from evalpipe.bfcl import category_records

        yield from enumerate(category_records(source[len(BFCL_SOURCE):]), start=1)
        return
    path = Path(source)
    if path.suffix in (".jsonl", ".json") and path.is_file():
        yield from jsonl.records(path)  # as `evalpipe validate` reads it
        return
    import datasets

    datasets.disable_progress_bars()
    if path.exists() and not (path.suffix in (".parquet", ".csv") and path.is_file()):
        raise InputError("unsupported question file", file=source,
                         expected=".jsonl, .json, .parquet or .csv")
    try:
        table = (datasets.load_dataset(path.suffix[1:], data_files=str(path), split="train")
                 if path.exists() else datasets.load_dataset(source, split="train"))
    except Exception as exc:  # noqa: BLE001 -- an empty or broken file, an unknown name, no Hub
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise InputError(f"cannot load question set ({type(exc).__name__}: {first})",
                         file=source, expected="a readable file or a reachable dataset name"
                         ) from None
    for number, row in enumerate(table, start=1):
        yield number, {k: v for k, v in row.items() if v is not None}


def question_files(paths: Iterable[str | Path]) -> list[Path]:
    """Expand folders into their *.jsonl files, sorted for a stable order."""
    out: list[Path] = []
    for p in map(Path, paths):
        out.extend(sorted(p.rglob("*.jsonl")) if p.is_dir() else [p])
    return out


def load_questions(source: str | Path) -> list[Question]:
    """Load and validate one question set; the first bad record stops with an InputError."""
    source = str(source)
    questions: list[Question] = []
    seen: dict[str, int] = {}
    for line, record in _rows(source):
        q = parse_question(record, file=source, line=line)
        if q.id in seen:
            raise InputError(f"duplicate id {q.id!r} (first on line {seen[q.id]})",
                             file=source, line=line, field="id", expected="ids unique within a file")
        seen[q.id] = line
        questions.append(q)
    if not questions:
        raise InputError("no questions", file=source, expected="at least one record")
    return questions
