"""Append-only JSON-lines files that survive a kill: one home for the rules.

- `append` writes whole records and fsyncs; if the write fails (full disk) the
  file is cut back to where it was, so half a record is never left behind.
- Only the last line may be torn (a kill mid-write): no newline, or not JSON
  with nothing but blank lines after it. Readers drop it; `repair` cuts it off
  so appends continue on a clean line. A bad line before good ones is
  corruption, not a kill: an InputError naming the file and line.
- Files a person wrote (question sets) are read by `records`: every line must be
  a JSON value, a UTF-8 byte-order mark at the start is allowed, and each bad
  line is an InputError naming it.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from evalpipe.errors import InputError


def dumps(record: Any) -> str:
    """One record as one line (non-ASCII kept, unknown types as strings)."""
    return json.dumps(record, ensure_ascii=False, default=str) + "\n"


def append(path: str | Path, records: Iterable[Any]) -> int:
    """Append whole records and fsync; returns how many were written."""
    lines = [dumps(r) for r in records]
    with open(path, "a", encoding="utf-8") as f:
        start = f.tell()
        try:
            f.write("".join(lines))
            f.flush()
            os.fsync(f.fileno())
        except OSError:
            with contextlib.suppress(OSError):
                f.truncate(start)
            raise
    return len(lines)


def scan(path: str | Path, start: int = 0) -> Iterator[tuple[int, Any]]:
    """(offset just after the line, record) for each complete record, in order; from
    byte `start` (an offset scan gave before) to read only what was appended since."""
    path = Path(path)
    if not path.is_file():
        return
    with open(path, "rb") as f:
        f.seek(start)
        offset, bad = start, None
        for number, line in enumerate(f, start=1):
            if not line.endswith(b"\n"):
                return  # the last write was cut short
            offset += len(line)
            if not line.strip():
                continue
            if bad is not None:
                raise InputError("corrupt record", file=str(path), line=bad,
                                 expected="one JSON object per line")
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                bad = number  # torn if nothing but blank lines follow
                continue
            yield offset, record


def records(path: str | Path, errors: list[InputError] | None = None
            ) -> Iterator[tuple[int, Any]]:
    """(line number, record) of each non-blank line of a JSONL file a person wrote. A
    line that is not UTF-8 JSON raises an InputError naming it, or, given `errors`, is
    added there and skipped (to report every bad line at once)."""
    file = str(path)
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                text = raw.decode("utf-8")
                if number == 1:
                    text = text.removeprefix("\ufeff")  # a byte-order mark, as editors write
                if not text.strip():
                    continue
                yield number, json.loads(text)
            except UnicodeDecodeError as exc:
                problem = InputError(f"not UTF-8 ({exc.reason})", file=file, line=number,
                                     expected="a UTF-8 text file")
            except json.JSONDecodeError as exc:
                problem = InputError(f"not valid JSON ({exc.msg} at column {exc.colno})",
                                     file=file, line=number, expected="one JSON object per line")
            else:
                continue
            if errors is None:
                raise problem
            errors.append(problem)


def read(path: str | Path) -> list[Any]:
    """Every complete record; a torn last line is dropped."""
    return [record for _, record in scan(path)]


def repair(path: str | Path) -> int:
    """Cut a torn last line off the file; returns how many bytes were cut."""
    path = Path(path)
    if not path.is_file():
        return 0
    good_end = 0
    for good_end, _ in scan(path):
        pass
    size = path.stat().st_size
    if good_end < size:
        with open(path, "r+b") as f:
            f.truncate(good_end)
    return size - good_end
