"""Question records: schema, reading, validation.

Every question source is read through one path, `read_records`, by `run` and
`validate` alike, record by record in bounded memory and under QuestionLimits: a
JSONL file (or a .json file of JSON lines) line by line with evalpipe.jsonl.records,
so that every error names its line and mixed-type fields (an answer that is a number
in one record and a string in the next) never meet a table's schema inference; a
.json array, a CSV file and a Parquet file with evalpipe.datafiles (a CSV row is
numbered by its line, a Parquet row or an array's record from 1), every value as the
file holds it. A config may map a file's own columns onto evalpipe's fields
(QuestionSource, docs/questions.md). A file with no record is an error of its own,
and so is text that is not valid Unicode (a lone surrogate).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from evalpipe import jsonl
from evalpipe.datafiles import QuestionLimits, csv_rows, json_array_rows, parquet_rows
from evalpipe.errors import InputError
from evalpipe.plans import check_value
from evalpipe.tools.schema_only import definition_problem

ANSWER_TYPES = ("number", "text", "abstain", "calls")  # calls: graded by its tool calls alone
_REQUIRED = {"id": str, "suite": str, "question": str}
FIELDS = (  # every field of a question record (docs/questions.md)
    "id", "suite", "question", "answer", "answer_type", "aliases", "lang",
    "gold_calls", "gold_passages", "tags", "tools",
)
_KNOWN = set(FIELDS)
DEFAULT_LIMITS = QuestionLimits()


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


def _as_number(text: Any) -> int | float | None:
    """A text answer read as the number it writes ("42", "007", "-1.5", "2e3"), the way
    `answer_type: number` asks; None when it writes none (or an infinite one)."""
    if not isinstance(text, str):
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def lone_surrogate(value: Any, where: str = "") -> tuple[str, str] | None:
    """(field path, what is wrong) of the first text in a decoded record that holds a
    lone surrogate (a JSON "\\ud800" escape without its pair): no UTF-8 file, prompt or
    report can hold it. None when every text is valid Unicode."""
    if isinstance(value, str):
        for i, ch in enumerate(value):
            if "\ud800" <= ch <= "\udfff":
                return where or "record", (f"a lone surrogate U+{ord(ch):04X} at character "
                                           f"{i + 1}")
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            path = f"{where}.{key}" if where else str(key)
            found = lone_surrogate(key, where or "record") if isinstance(key, str) else None
            if found:
                return found[0], found[1] + f" in the name of field {key!r}"
            found = lone_surrogate(item, path)
            if found:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = lone_surrogate(item, f"{where}[{i}]")
            if found:
                return found
    return None


def parse_question(record: Any, *, file: str, line: int) -> Question:
    """Check one decoded record against the schema and build a Question."""

    def fail(fld: str | None, message: str, expected: str | None = None):
        raise InputError(message, file=file, line=line, field=fld, expected=expected)

    if not isinstance(record, dict):
        fail(None, f"record is {type(record).__name__}", "a JSON object")
    broken = lone_surrogate(record)
    if broken:
        fail(broken[0], broken[1], "valid Unicode text (a \\ud800-\\udbff escape is "
             "the first half of a pair and must be followed by a \\udc00-\\udfff one)")
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
        number = _as_number(answer)
        if number is None:
            fail("answer", f"got {answer!r} with answer_type number", "a finite number")
        answer = number

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
            wrong = check_value(step["arguments"], seen, f"{where}.arguments")
            if wrong:
                fail(*wrong)
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


# Fields whose value is a list or an object: a CSV cell (text) holding one is JSON.
STRUCTURED = {"aliases": list, "tags": list, "gold_calls": list, "gold_passages": list,
              "tools": list}
ROW = "$row"  # `fields: {id: $row}`: the id is the file's stem and the record's number
SOURCE_KEYS = {"path", "fields", "values"}


@dataclass(frozen=True)
class QuestionSource:
    """A question file and how its records map onto evalpipe's fields: `fields` names,
    per evalpipe field, the column that holds it (or `$row` for an id made of the
    file's stem and the record's number); `values` gives a field one value for every
    record (a suite, an answer type, a language). Without either, the records are in
    evalpipe's schema already (docs/questions.md)."""

    path: str
    fields: dict[str, str] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)

    @property
    def mapped(self) -> bool:
        return bool(self.fields or self.values)


def as_source(entry: str | Path | dict[str, Any] | QuestionSource) -> QuestionSource:
    """A config's `questions` entry (a path, or {path, fields, values}) as a source."""
    if isinstance(entry, QuestionSource):
        return entry
    if isinstance(entry, dict):
        return QuestionSource(str(entry["path"]), dict(entry.get("fields") or {}),
                              dict(entry.get("values") or {}))
    return QuestionSource(str(entry))


def question_sources(entries: Iterable[str | Path | dict[str, Any] | QuestionSource]
                     ) -> list[QuestionSource]:
    """The sources of a config's `questions`; a folder expands into its *.jsonl files,
    sorted for a stable order."""
    out: list[QuestionSource] = []
    for entry in map(as_source, entries):
        folder = Path(entry.path)
        if folder.is_dir():
            out.extend(QuestionSource(str(p), entry.fields, entry.values)
                       for p in sorted(folder.rglob("*.jsonl")))
        else:
            out.append(entry)
    return out


def question_files(paths: Iterable[str | Path]) -> list[Path]:
    """Expand folders into their *.jsonl files, sorted for a stable order."""
    return [Path(s.path) for s in question_sources(paths)]


def _table_rows(source: str, errors: list[InputError] | None = None,
                limits: QuestionLimits = DEFAULT_LIMITS) -> Iterable[tuple[int, Any]]:
    """(row, record) of a file or a BFCL category, each value as the file holds it. A
    JSONL line and a CSV row are numbered by their line in the file (a CSV's header is
    line 1); a JSON array's records and a Parquet file's rows from 1. Given `errors`, a
    JSON line that cannot be read is added there and skipped (jsonl.records)."""
    if source.startswith(BFCL_SOURCE):
        from evalpipe.bfcl import category_records

        yield from enumerate(category_records(source[len(BFCL_SOURCE):]), start=1)
        return
    path = Path(source)
    if not path.is_file():
        raise InputError("file not found" if not path.exists() else "not a file",
                         file=source, expected="a question file (.jsonl, .json, .csv or "
                                               ".parquet) or a folder of .jsonl files")
    if path.suffix == ".json" and _holds_array(path):
        yield from json_array_rows(path, limits)
    elif _is_json(source):
        yield from jsonl.records(path, errors, limits)  # JSON lines, as `validate` reads them
    elif path.suffix == ".csv":
        yield from csv_rows(path, limits, errors)
    elif path.suffix == ".parquet":
        yield from parquet_rows(path, limits)
    else:
        raise InputError("unsupported question file", file=source,
                         expected=".jsonl, .json, .parquet or .csv")


def _holds_array(path: Path) -> bool:
    """Whether a .json file is one array of records (else it is JSON lines)."""
    with open(path, "rb") as f:
        head = f.read(4096).removeprefix(b"\xef\xbb\xbf").lstrip()
    return head.startswith(b"[")


def _is_json(path: str) -> bool:
    return Path(path).suffix in (".jsonl", ".json")


def map_record(record: Any, source: QuestionSource, line: int) -> Any:
    """A record of `source` in evalpipe's field names: each mapped column under its
    field, the fixed values, and the columns already named like a field; other columns
    are left out. A list or object field given as text (a CSV cell) is decoded as JSON.
    An empty cell (a CSV's empty cell, a Parquet null) is a field not given; when the
    field is a required one, the error says that its cell is empty."""
    if not isinstance(record, dict):
        return record
    table = not (_is_json(source.path) or source.path.startswith(BFCL_SOURCE))
    if not source.mapped:
        if not table:
            return record
        given = {k: v for k, v in record.items() if v is not None}
        _empty_required(given, {k: k for k in record if k in _KNOWN}, record, source, line)
        return given
    out: dict[str, Any] = {}
    for name, column in source.fields.items():
        if column == ROW:
            out[name] = f"{Path(source.path).stem}-{line}"
        elif column in record:
            if record[column] is not None:
                out[name] = record[column]
        elif name not in source.values:
            raise InputError(f"no column {column!r} (mapped by fields.{name})",
                             file=source.path, line=line, field=name,
                             expected="one of the columns " + ", ".join(map(repr, record)))
    mapped_columns = set(source.fields.values())
    for name, value in record.items():
        if name in _KNOWN and name not in out and name not in mapped_columns \
                and value is not None:
            out[name] = value
    for name, value in source.values.items():
        out.setdefault(name, value)
    if table:
        columns = {name: column for name, column in source.fields.items() if column != ROW}
        columns.update({k: k for k in record if k in _KNOWN and k not in mapped_columns
                        and k not in columns})
        _empty_required(out, columns, record, source, line)
    for name, kind in STRUCTURED.items():
        value = out.get(name)
        if isinstance(value, str):
            try:
                out[name] = json.loads(value) if value.strip() else kind()
            except json.JSONDecodeError as exc:
                raise InputError(f"text that is not JSON ({exc.msg} at column {exc.colno})",
                                 file=source.path, line=line, field=name,
                                 expected=f"a JSON {kind.__name__} in the cell") from None
        elif (tolist := getattr(value, "tolist", None)) is not None:  # a Parquet array
            out[name] = tolist()
    return out


_MISSING = {"id": "a non-empty string", "suite": "a non-empty string",
            "question": "a non-empty string", "answer": "a string or number"}


def _empty_required(out: dict[str, Any], columns: dict[str, str], record: dict[str, Any],
                    source: QuestionSource, line: int) -> None:
    """A required field whose cell is empty is named as such, not as a missing field:
    the column is there and its cell was read as written (nothing), not dropped."""
    for name, expected in _MISSING.items():
        column = columns.get(name)
        if name in out or column not in record or record[column] is not None:
            continue
        if name == "answer" and out.get("answer_type") == "calls":
            continue
        empty = "an empty cell" if source.path.endswith(".csv") else "a null value"
        via = f" (column {column!r})" if column != name else ""
        raise InputError(f"{empty}{via}", file=source.path, line=line, field=name,
                         expected=expected + " in every record")


def read_records(entry: str | Path | dict[str, Any] | QuestionSource,
                 errors: list[InputError] | None = None,
                 limits: QuestionLimits = DEFAULT_LIMITS) -> Iterable[tuple[int, Any]]:
    """(line or row, record in evalpipe's field names) of one question source: what
    `run` and `validate` both read, under `limits`. A record that cannot be read or
    mapped raises its InputError; given `errors`, it is added there and skipped, so that
    every bad record is named at once (a file past max_rows stops at the first record
    too many)."""
    source = as_source(entry)
    unknown = sorted(set(source.fields) - _KNOWN) + sorted(set(source.values) - _KNOWN)
    if unknown:
        raise InputError(f"unknown field {unknown[0]!r} in the mapping", file=source.path,
                         field="fields" if unknown[0] in source.fields else "values",
                         expected="one of " + ", ".join(FIELDS))
    for count, (line, record) in enumerate(_table_rows(source.path, errors, limits), start=1):
        if count > limits.max_rows:
            raise limits.error("max_rows", f"more than {limits.max_rows:,} records",
                               file=source.path, line=line)
        try:
            limits.check_fields(record, file=source.path, line=line)
            yield line, map_record(record, source, line)
        except InputError as exc:
            if errors is None:
                raise
            errors.append(exc)


def load_questions(source: str | Path | dict[str, Any] | QuestionSource,
                   limits: QuestionLimits = DEFAULT_LIMITS) -> list[Question]:
    """Load and validate one question set; the first bad record stops with an InputError."""
    src = as_source(source)
    questions: list[Question] = []
    seen: dict[str, int] = {}
    for line, record in read_records(src, limits=limits):
        q = parse_question(record, file=src.path, line=line)
        if q.id in seen:
            raise InputError(f"duplicate id {q.id!r} (first on line {seen[q.id]})",
                             file=src.path, line=line, field="id",
                             expected="ids unique within a file")
        seen[q.id] = line
        questions.append(q)
    if not questions:
        raise InputError("no questions", file=src.path, expected="at least one record")
    return questions
