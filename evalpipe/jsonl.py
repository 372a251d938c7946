"""JSON-lines files: the append-only run files that survive a kill, and line-numbered
input files. One home for the rules.

- `append` writes whole records and fsyncs; if the write fails (full disk) the
  file is cut back to where it was with a bare ftruncate (no buffer to flush,
  so it needs no space), and half a record is never left behind.
- Every line written is valid UTF-8: a record holding a lone surrogate is written
  with that character escaped (`\\ud800`), never as bytes no reader can decode.
- Only the last line may be torn (a kill mid-write): no newline, or not JSON
  with nothing but blank lines after it. Readers drop it with a DataWarning;
  `repair` cuts it off so appends continue on a clean line. A bad line before
  good ones (not JSON, not UTF-8, NUL bytes) is corruption, not a kill: an
  InputError naming the file and line.
- `records` reads an input file (question sets) where every line must be good.
"""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from evalpipe.errors import DataWarning, InputError

EXPECTED = "one JSON object per line, in UTF-8"


def dumps(record: Any) -> str:
    """One record as one line (non-ASCII kept, unknown types as strings)."""
    text = json.dumps(record, ensure_ascii=False, default=str)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: escaped, so the line stays UTF-8
        text = json.dumps(record, ensure_ascii=True, default=str)
    return text + "\n"


def append(path: str | Path, records: Iterable[Any]) -> int:
    """Append whole records and fsync; returns how many were written."""
    lines = [dumps(r) for r in records]
    data = memoryview("".join(lines).encode("utf-8"))
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        start = os.lseek(fd, 0, os.SEEK_END)
        try:
            while data:
                data = data[os.write(fd, data):]
            os.fsync(fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
            raise
    finally:
        os.close(fd)
    return len(lines)


def _decode(line: bytes) -> Any:
    """A line's record; ValueError when it is not UTF-8 JSON (NUL bytes included)."""
    try:
        return json.loads(line.decode("utf-8"))
    except RecursionError:
        raise ValueError("nested too deeply") from None


def scan(path: str | Path) -> Iterator[tuple[int, int, Any]]:
    """(offset just after the line, line number, record) for each complete record."""
    path = Path(path)
    if not path.is_file():
        return
    with open(path, "rb") as f:
        offset, bad = 0, None
        for number, line in enumerate(f, start=1):
            if not line.endswith(b"\n"):
                _torn(path, number)  # the last write was cut short
                return
            offset += len(line)
            if not line.strip():
                continue
            if bad is not None:
                raise InputError("corrupt record", file=str(path), line=bad, expected=EXPECTED)
            try:
                record = _decode(line)
            except ValueError:
                bad = number  # torn if nothing but blank lines follow
                continue
            yield offset, number, record
        if bad is not None:
            _torn(path, bad)


def _torn(path: Path, line: int) -> None:
    warnings.warn(DataWarning(f"{path}:{line}: the last record is cut short (a write that "
                              "did not finish) and is left out"), stacklevel=3)


def read(path: str | Path) -> list[Any]:
    """Every complete record; a torn last line is dropped."""
    return [record for _, _, record in scan(path)]


def repair(path: str | Path) -> int:
    """Cut a torn last line off the file; returns how many bytes were cut."""
    path = Path(path)
    if not path.is_file():
        return 0
    good_end = 0
    for good_end, _, _ in scan(path):
        pass
    size = path.stat().st_size
    if good_end < size:
        with open(path, "r+b") as f:
            f.truncate(good_end)
    return size - good_end


def records(path: str | Path) -> Iterator[tuple[int, Any]]:
    """(line number, record) of an input file in which every non-blank line must be a
    JSON value in UTF-8; the first that is not is an InputError naming its line."""
    with open(path, "rb") as f:
        for number, line in enumerate(f, start=1):
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(f"not UTF-8 (byte {exc.start + 1} of the line)", file=str(path),
                                 line=number, expected=EXPECTED) from None
            if not text.strip():
                continue
            try:
                yield number, json.loads(text)
            except json.JSONDecodeError as exc:
                raise InputError(f"not valid JSON ({exc.msg} at column {exc.colno})",
                                 file=str(path), line=number, expected=EXPECTED) from None
            except RecursionError:
                raise InputError("nested too deeply", file=str(path), line=number,
                                 expected=EXPECTED) from None
