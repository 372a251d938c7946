"""The shape the viewer needs of a run's files, checked in one place.

A run folder is read as it is on disk, and what is on disk may be anything: a
manifest that is valid JSON but a list, a string or an object missing its keys or
holding a number where text belongs, a scores.json cut short, a samples.jsonl with a
broken line. The viewer reads a run's manifest.json and scores.json through
`read_manifest` and `read_scores`, which check every field the run list and the run
pages read (strict types: no number taken for text, no text for a number) and raise
DamagedRun naming the file, the field and what was there. A run that fails them is
listed apart with its reason, and its pages answer that reason; every other run is
shown. Fields no page reads are not checked, so a run written by an older or newer
evalpipe is shown as long as what is shown has the expected type.

A file that is not there is FileNotFoundError, not damage: the run (or that file)
was deleted, and the server answers 404.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evalpipe.errors import InputError


class DamagedRun(InputError):
    """A run whose files the viewer cannot show; the message names the file and what is
    wrong with it."""

    def __init__(self, run: str, problem: str):
        self.run, self.problem = run, problem
        super().__init__(f"run {run!r} cannot be shown: {problem}")


class _Shape(BaseModel):
    # strict: a number is not text and text is not a number; keys the viewer does not
    # read are kept as they are
    model_config = ConfigDict(strict=True, extra="allow")


Text = str | None
Count = Annotated[int, Field(ge=0)]
Flag = bool | None


class _Model(_Shape):
    id: str


class _Config(_Shape):
    name: Text = None
    models: list[str | _Model] | None = None
    match: Text = None
    k: Annotated[int, Field(ge=1)] | None = None


class _Settings(_Shape):
    model: str | _Model | None = None


class _Cell(_Shape):
    fingerprint: Text = None
    facets: dict[str, Text] | None = None
    settings: _Settings | None = None
    served: dict[str, Any] | None = None


class _Repeats(_Shape):
    seeds: list[int] | None = None


class Manifest(_Shape):
    """What the run list and the run pages read of manifest.json."""

    run_id: str
    config: _Config
    config_source: Text = None
    started: Text = None
    finished: Text = None
    ended: Text = None
    git_commit: Text = None
    status: Text = None
    error: Text = None
    warnings: list[str] | None = None
    questions: Count | None = None
    cells: dict[str, _Cell] | None = None
    repeats: _Repeats | None = None


class _Rate(_Shape):
    rate: float | None = None
    n: Count | None = None


class _Group(_Shape):
    cell_id: str
    suite: str
    rates: dict[str, _Rate] | None = None


class _Scored(_Shape):
    cell_id: str
    question_id: str
    repeat: Count | None = None
    suite: Text = None
    category: Text = None
    subtype: Text = None
    exact: Flag = None
    infra: Flag = None
    tool_failure: Flag = None
    format_valid: Flag = None
    plan_exact: Flag = None
    flags: list[str] | None = None
    cost: dict[str, float | None] | None = None
    retrieval: dict[str, Any] | None = None
    why: dict[str, Any] | None = None


class Scores(_Shape):
    """What the run list and the run pages read of scores.json."""

    groups: list[_Group]
    samples: list[_Scored]
    k: Annotated[int, Field(ge=1)] | None = None
    run_id: Text = None
    scorer_version: Text = None


class _Record(_Shape):
    cell_id: str
    question_id: str
    repeat: Count | None = None


def read_manifest(run: Path) -> dict[str, Any]:
    """The run's manifest.json as written, once it has the shape the viewer reads."""
    return _read(run, "manifest.json", Manifest)


def read_scores(run: Path) -> dict[str, Any]:
    """The run's scores.json as written, once it has the shape the viewer reads."""
    return _read(run, "scores.json", Scores)


def check_record(run: Path, line: int, record: Any) -> None:
    """A line of samples.jsonl: an object naming its cell, question and repeat."""
    try:
        _Record.model_validate(record)
    except ValidationError as exc:
        raise DamagedRun(run.name, f"samples.jsonl line {line}: {_problem(exc)}") from None


def _read(run: Path, name: str, shape: type[_Shape]) -> dict[str, Any]:
    path = run / name
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise
    except UnicodeDecodeError as exc:
        raise DamagedRun(run.name, f"{name}: not UTF-8 (byte {exc.start + 1})") from None
    except (ValueError, RecursionError) as exc:
        raise DamagedRun(run.name, f"{name}: not JSON ({str(exc)[:120]})") from None
    except OSError as exc:
        raise DamagedRun(run.name, f"{name}: cannot be read ({exc.strerror or exc})") from None
    if not isinstance(data, dict):
        raise DamagedRun(run.name, f"{name}: expected an object, got {_kind(data)}")
    try:
        shape.model_validate(data)
    except ValidationError as exc:
        raise DamagedRun(run.name, f"{name}: {_problem(exc)}") from None
    return data


def _problem(exc: ValidationError) -> str:
    """The deepest field that does not fit, what it should be and what was there (the
    branches of a union tried at one place are named together: 'text or an object')."""
    found: dict[str, tuple[int, list[str], Any]] = {}
    for error in exc.errors():
        loc = [p for p in error["loc"] if not (isinstance(p, str) and p in _BRANCHES)]
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
        expected = _EXPECTED.get(error["type"], error["msg"].lower())
        if error["type"] == "greater_than_equal":
            expected = f"a number of at least {(error.get('ctx') or {}).get('ge')}"
        wanted = found.setdefault(where, (len(loc), [], error.get("input")))[1]
        if expected not in wanted:
            wanted.append(expected)
    where, (_, wanted, got) = max(found.items(), key=lambda item: item[1][0])
    if wanted == ["present"]:
        return f"field '{where}' is missing"
    field = f"field '{where}': " if where else ""
    return f"{field}expected {' or '.join(wanted)}, got {_kind(got)}"


# the names pydantic gives the branches of a union in an error's location
_BRANCHES = {"str", "int", "float", "bool", "_Model"}
_EXPECTED = {"missing": "present", "string_type": "text", "dict_type": "an object",
             "model_type": "an object", "list_type": "a list", "int_type": "a whole number",
             "float_type": "a number", "bool_type": "true or false"}


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "text", bool: "true/false",
             int: "a number", float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)
