"""A damaged run, and the shape the viewer needs of each line of samples.jsonl.

A run folder is read as it is on disk, and what is on disk may be anything. Its
manifest.json and scores.json are read through their types (records.Manifest,
records.Scores; store.read_run_file), which name the file, the field and what was
there; each samples.jsonl line is checked here for what the browser indexes it by.
A run that fails is listed apart with its reason (DamagedRun), and its pages answer
that reason; every other run is shown.

A file that is not there is FileNotFoundError, not damage: the run (or that file)
was deleted, and the server answers 404.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evalpipe.errors import InputError
from evalpipe.store import shape_problem


class DamagedRun(InputError):
    """A run whose files the viewer cannot show; the message names the file and what is
    wrong with it."""

    def __init__(self, run: str, problem: str):
        self.run, self.problem = run, problem
        super().__init__(f"run {run!r} cannot be shown: {problem}")


class _Record(BaseModel):
    # strict: a number is not text and text is not a number; the other keys as they are
    model_config = ConfigDict(strict=True, extra="allow")

    cell_id: str
    question_id: str
    repeat: Annotated[int, Field(ge=0)] | None = None


def check_record(run: Path, line: int, record: Any) -> None:
    """A line of samples.jsonl: an object naming its cell, question and repeat."""
    try:
        _Record.model_validate(record)
    except ValidationError as exc:
        raise DamagedRun(run.name, f"samples.jsonl line {line}: {shape_problem(exc)}") from None
