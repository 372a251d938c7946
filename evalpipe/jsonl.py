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
- Files a person wrote (question sets) are read by `records`: every line must be
  a JSON value, a UTF-8 byte-order mark at the start is allowed, and each bad
  line is an InputError naming it. Given limits, a line longer than a record may be
  is read to its end in bounded pieces and named, never held whole.
"""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from evalpipe.datafiles import QuestionLimits, bounded_lines
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


def scan(path: str | Path, start: int = 0) -> Iterator[tuple[int, int, Any]]:
    """(offset just after the line, line number, record) for each complete record, in
    order; from byte `start` (an offset scan gave before) to read only what was appended
    since (line numbers then count from there)."""
    path = Path(path)
    if not path.is_file():
        return
    with open(path, "rb") as f:
        f.seek(start)
        offset, bad = start, None
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


def records(path: str | Path, errors: list[InputError] | None = None,
            limits: QuestionLimits | None = None) -> Iterator[tuple[int, Any]]:
    """(line number, record) of each non-blank line of a JSONL file a person wrote. A
    line that is not UTF-8 JSON (NUL bytes and nesting too deep for Python included), or
    longer than `limits.max_record_bytes`, raises an InputError naming it, or, given
    `errors`, is added there and skipped (to report every bad line at once)."""
    file = str(path)
    with open(path, "rb") as f:
        lines = (bounded_lines(f, limits.max_record_bytes) if limits else
                 ((line, True) for line in f))
        for number, (raw, whole) in enumerate(lines, start=1):
            try:
                if not whole and limits:
                    raise limits.error("max_record_bytes", "a line of more than "
                                       f"{limits.max_record_bytes:,} bytes", file=file,
                                       line=number)
                text = raw.decode("utf-8")
                if number == 1:
                    text = text.removeprefix("\ufeff")  # a byte-order mark, as editors write
                if not text.strip():
                    continue
                record = json.loads(text)
            except UnicodeDecodeError as exc:
                problem = InputError(f"not UTF-8 ({exc.reason} at byte {exc.start + 1})",
                                     file=file, line=number, expected="a UTF-8 text file")
            except json.JSONDecodeError as exc:
                problem = InputError(f"not valid JSON ({exc.msg} at column {exc.colno})",
                                     file=file, line=number, expected=EXPECTED)
            except RecursionError:
                problem = InputError("nested too deeply", file=file, line=number,
                                     expected=EXPECTED)
            except InputError as exc:
                problem = exc
            else:
                yield number, record
                continue
            if errors is None:
                raise problem
            errors.append(problem)


def read(path: str | Path) -> list[Any]:
    """Every complete record; a torn last line is dropped."""
    return [record for _, _, record in scan(path)]


def repair(path: str | Path) -> int:
    """Cut a torn last line off the file; returns how many bytes were cut."""
    path = Path(path)
    if not path.is_file():
        return 0
    good_end = max((end for end, _, _ in scan(path)), default=0)  # after the last good line
    size = path.stat().st_size
    if good_end < size:
        with open(path, "r+b") as f:
            f.truncate(good_end)
    return size - good_end
