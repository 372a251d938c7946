"""Question files that are tables (CSV, Parquet) or one JSON array, read row by row in
bounded memory with every value as the file holds it, and the limits every question
file is read under.

- CSV: Python's csv module (RFC 4180 quoting, strict), UTF-8 with or without a
  byte-order mark, lines ending in LF, CRLF or CR. Every cell is text exactly as
  written: "007", "NA", "null", "N/A" and "NaN" stay those strings. An empty cell is
  None, a field not given (docs/questions.md). A record is named by the line it starts
  on (the header is line 1).
- Parquet: pyarrow, one record batch at a time; values keep the file's types, a null is
  None. Rows are numbered from 1.
- A .json file holding one array: its elements decoded one at a time from a buffer that
  grows only as far as the element being read, numbered from 1.

No record larger than `QuestionLimits.max_record_bytes` is ever held whole, and nothing
is copied anywhere (no cache). Every problem is an InputError in evalpipe's words: the
file, the line or row, the column when one is to blame, and what was expected.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from evalpipe.errors import InputError

_UNITS = {"max_field_bytes": "bytes per field", "max_record_bytes": "bytes per record",
          "max_rows": "records per file"}


@dataclass(frozen=True)
class QuestionLimits:
    """How large a question file may be (config `question_limits`). The defaults hold
    any real question set (a 10 MB field is a book-length context); they stop a file
    that would take the machine's memory before a run spends anything on it."""

    max_field_bytes: int = 10_000_000  # one value: a question, an answer, a JSON cell
    max_record_bytes: int = 50_000_000  # one record: a JSONL line, a CSV row, a Parquet row
    max_rows: int = 1_000_000  # records per file

    def error(self, key: str, got: str, *, file: str, line: int | None = None,
              field: str | None = None) -> InputError:
        """The error for a value past the limit `key`, saying how to raise it."""
        limit, unit = getattr(self, key), _UNITS[key]
        return InputError(f"{got}, over the limit of {limit:,} {unit}", file=file, line=line,
                          field=field,
                          expected=f"at most {limit:,} {unit} (raise it with "
                                   f"question_limits.{key} in the config, or --set "
                                   f"question_limits.{key}=N)")

    def check_fields(self, record: Any, *, file: str, line: int) -> None:
        """Every top-level value of a record within max_field_bytes (text in UTF-8, any
        other value as JSON)."""
        if not isinstance(record, dict):
            return
        for name, value in record.items():
            size = value_bytes(value, self.max_field_bytes)
            if size > self.max_field_bytes:
                raise self.error("max_field_bytes", f"{size:,} bytes", file=file, line=line,
                                 field=str(name))


def value_bytes(value: Any, limit: int | None = None) -> int:
    """A value's size: text in UTF-8, anything else as its JSON text. With `limit`, a text
    too short to pass it is not encoded to be measured."""
    if value is None:
        return 0
    if isinstance(value, str):
        if limit is not None and 4 * len(value) <= limit:
            return len(value)  # at most 4 bytes a character: under the limit either way
        return len(value.encode("utf-8", "surrogatepass"))
    if isinstance(value, bytes):
        return len(value)
    return len(json.dumps(value, ensure_ascii=False, default=str).encode("utf-8",
                                                                        "surrogatepass"))


# -- lines in bounded memory ---------------------------------------------------------------

def bounded_lines(f: IO[bytes], max_bytes: int) -> Iterator[tuple[bytes, bool]]:
    """(line with its ending, whole) of a binary file: a line longer than `max_bytes` is
    read to its end in pieces of at most that size and given once, as its first piece
    with whole=False; its memory is never more than one piece."""
    while True:
        piece = f.readline(max_bytes + 1)
        if not piece:
            return
        if len(piece) <= max_bytes or piece.endswith(b"\n"):
            yield piece, True
            continue
        while piece and not piece.endswith(b"\n"):
            piece = f.readline(max_bytes + 1)  # the rest of the line, dropped
        yield b"", False


# -- CSV -----------------------------------------------------------------------------------

_CR_BREAK = re.compile(rb"(?<=\r)(?!\n|$)")  # a line ending in a lone CR (old Mac files)


class _CsvLines:
    """The decoded lines of a CSV file, for csv.reader: counts lines, the bytes of the
    record being read (reset by the reader after each row), and stops with the file's
    line at the first byte that is not UTF-8 or the first record over the limit."""

    def __init__(self, f: IO[bytes], file: str, limits: QuestionLimits):
        self.file, self.limits = file, limits
        self.line = 0  # lines handed out so far
        self.record_bytes = 0
        self.header: list[str] = []  # once read: names the column of a bad byte
        self._lines = bounded_lines(f, limits.max_record_bytes)

    def __iter__(self) -> Iterator[str]:
        for raw, whole in self._lines:
            for piece in _CR_BREAK.split(raw) if whole else [raw]:
                self.line += 1
                self.record_bytes += len(piece)
                if not whole or self.record_bytes > self.limits.max_record_bytes:
                    raise self.limits.error(
                        "max_record_bytes", f"a record of more than "
                        f"{self.limits.max_record_bytes:,} bytes (from this line on)",
                        file=self.file, line=self.line)
                try:
                    text = piece.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise InputError(f"not UTF-8 ({exc.reason} at byte {exc.start + 1} of "
                                     "the line)", file=self.file, line=self.line,
                                     field=self._column_of(piece),
                                     expected="a UTF-8 text file (save the CSV as UTF-8)"
                                     ) from None
                if self.line == 1:
                    text = text.removeprefix("\ufeff")  # a byte-order mark, as Excel writes
                yield text

    def _column_of(self, piece: bytes) -> str | None:
        """The column whose cell holds the first byte that is not UTF-8, when the record
        is this one line."""
        if not self.header or self.record_bytes != len(piece):
            return None
        try:
            cells = next(csv.reader([piece.decode("utf-8", "surrogateescape")]))
        except (csv.Error, StopIteration):
            return None
        for name, cell in zip(self.header, cells):
            if any("\udc80" <= ch <= "\udcff" for ch in cell):
                return name
        return None


def csv_rows(path: str | Path, limits: QuestionLimits,
             errors: list[InputError] | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line the record starts on, {column: cell text, or None for an empty cell}) of a
    CSV file with a header row. A bad file stops with an InputError naming the line (and
    the column where one is to blame); so does a row with too few or too many cells, or,
    given `errors`, it is added there and skipped."""
    file = str(path)
    old_limit = csv.field_size_limit()
    csv.field_size_limit(max(old_limit, limits.max_record_bytes))  # the record bounds a cell
    try:
        with open(path, "rb") as f:
            lines = _CsvLines(f, file, limits)
            reader = csv.reader(lines, strict=True)
            header = _next_row(reader, lines, file)
            while header is not None and not any(header):
                lines.record_bytes = 0
                header = _next_row(reader, lines, file)  # blank lines before the header
            if header is None:
                raise InputError("the file is empty", file=file,
                                 expected="a header row naming the columns, then one row "
                                          "per question")
            _check_header(header, file, lines.line)
            lines.header = header
            rows = 0
            while True:
                lines.record_bytes = 0
                start = lines.line + 1
                row = _next_row(reader, lines, file)
                if row is None:
                    break
                if not row:  # a blank line
                    continue
                rows += 1
                if len(row) != len(header):
                    problem = _ragged(row, header, file, start)
                    if errors is None:
                        raise problem
                    errors.append(problem)
                    continue
                yield start, {name: (cell if cell != "" else None)
                              for name, cell in zip(header, row)}
            if not rows:
                raise InputError("a header row and no rows under it", file=file, line=1,
                                 expected="one row per question under the header")
    finally:
        csv.field_size_limit(old_limit)


def _next_row(reader: Any, lines: _CsvLines, file: str) -> list[str] | None:
    try:
        return next(reader)
    except StopIteration:
        return None
    except csv.Error as exc:
        why = str(exc)
        if "unexpected end of data" in why:
            why = "a quoted cell is never closed (a \" without its pair)"
        raise InputError(f"not valid CSV: {why}", file=file, line=lines.line,
                         expected="RFC 4180 CSV: a cell with a comma, quote or line break "
                                  "inside double quotes, a quote inside one written twice"
                         ) from None


def _check_header(header: list[str], file: str, line: int) -> None:
    seen: set[str] = set()
    for name in header:
        if name and name in seen:
            raise InputError(f"column {name!r} is named twice in the header", file=file,
                             line=line, field=name, expected="each column named once")
        seen.add(name)


def _ragged(row: list[str], header: list[str], file: str, line: int) -> InputError:
    if len(row) < len(header):
        missing = header[len(row)]
        return InputError(f"the row has {len(row)} cells and the header {len(header)} "
                         f"columns: no cell for column {missing!r}", file=file, line=line,
                         field=missing, expected="one cell per column (an empty cell is "
                                                 "written as nothing between two commas)")
    return InputError(f"the row has {len(row)} cells and the header {len(header)} columns: "
                     f"{len(row) - len(header)} past the last column {header[-1]!r}",
                     file=file, line=line, field=header[-1],
                     expected="one cell per column (a cell holding a comma goes in double "
                              "quotes)")


# -- JSON array ----------------------------------------------------------------------------

_DECODER = json.JSONDecoder()
_CHUNK = 1 << 16


def json_array_rows(path: str | Path, limits: QuestionLimits) -> Iterator[tuple[int, Any]]:
    """(number from 1, element) of a .json file holding one array, each element decoded
    as soon as its text is read: the buffer holds about one element."""
    file = str(path)
    with open(path, "rb") as f:
        src = _JsonText(f, file)
        pos = src.skip(0)
        if src.char(pos) != "[":
            raise InputError("not a JSON array", file=file,
                             expected="one JSON array of records, or one JSON object per line")
        pos = src.skip(pos + 1)
        if src.char(pos) == "]":
            return
        number = 0
        while True:
            number += 1
            pos, element = src.value(pos, number, limits)
            yield number, element
            pos = src.skip(pos)
            after = src.char(pos)
            if after == "]":
                return
            if after != ",":
                raise InputError(f"no ',' or ']' after record {number} of the array",
                                 file=file, line=number, expected="one JSON array of records")
            pos = src.skip(pos + 1)


class _JsonText:
    """A UTF-8 file decoded as far as the JSON array reader needs."""

    def __init__(self, f: IO[bytes], file: str):
        import codecs

        self.f, self.file = f, file
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        self.text, self.done, self.read_bytes = "", False, 0

    def _read(self, size: int) -> None:
        data = self.f.read(max(size, _CHUNK))
        self.done = not data
        try:
            text = self.decoder.decode(data, final=self.done)
        except UnicodeDecodeError as exc:
            raise InputError(f"not UTF-8 ({exc.reason} at byte "
                             f"{self.read_bytes + exc.start + 1})", file=self.file,
                             expected="a UTF-8 text file") from None
        if not self.read_bytes:
            text = text.removeprefix("\ufeff")  # a byte-order mark, as editors write
        self.read_bytes += len(data)
        self.text += text

    def char(self, pos: int) -> str:
        """The character at `pos`, "" at the end of the file."""
        while pos >= len(self.text) and not self.done:
            self._read(_CHUNK)
        return self.text[pos:pos + 1]

    def skip(self, pos: int) -> int:
        while self.char(pos) in (" ", "\t", "\r", "\n") and pos < len(self.text):
            pos += 1
        return pos

    def value(self, pos: int, number: int, limits: QuestionLimits) -> tuple[int, Any]:
        """(position after it, value) of the JSON value starting at `pos`."""
        if pos > _CHUNK:  # what was read before is done with
            self.text, pos = self.text[pos:], 0
        while True:
            try:
                value, end = _DECODER.raw_decode(self.text, pos)
                if end < len(self.text) or self.done:  # a number may go on in what follows
                    size = value_bytes(self.text[pos:end], limits.max_record_bytes)
                    if size > limits.max_record_bytes:
                        raise limits.error("max_record_bytes", f"{size:,} bytes",
                                           file=self.file, line=number)
                    return end, value
            except json.JSONDecodeError as exc:
                if self.done:
                    raise InputError(f"record {number} of the array is not valid JSON "
                                     f"({exc.msg})", file=self.file, line=number,
                                     expected="one JSON array of records") from None
            except RecursionError:
                raise InputError(f"record {number} of the array is nested too deeply",
                                 file=self.file, line=number,
                                 expected="one JSON array of records") from None
            if len(self.text) - pos > limits.max_record_bytes:
                raise limits.error("max_record_bytes", "a record of more than "
                                   f"{limits.max_record_bytes:,} bytes", file=self.file,
                                   line=number)
            self._read(len(self.text) - pos)  # as much again: failed tries cost O(value)


# -- Parquet -------------------------------------------------------------------------------

BATCH_ROWS = 1024


def parquet_rows(path: str | Path, limits: QuestionLimits) -> Iterator[tuple[int, dict[str, Any]]]:
    """(row from 1, {column: value}) of a Parquet file, one record batch at a time. The
    row count comes from the file's footer; a row group whose uncompressed size already
    says a record must be over the limit is refused before it is read, and a text or
    binary value over max_field_bytes before it becomes a Python object."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    file = str(path)
    try:
        parquet = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as exc:
        raise InputError(f"not a readable Parquet file ({_first_line(exc)})", file=file,
                         expected="a Parquet file (as pandas, polars, pyarrow or Spark "
                                  "write it)") from None
    meta = parquet.metadata
    if meta.num_rows > limits.max_rows:
        raise limits.error("max_rows", f"{meta.num_rows:,} rows", file=file)
    first = 1
    for group in range(meta.num_row_groups):
        rg = meta.row_group(group)
        size = sum(rg.column(c).total_uncompressed_size for c in range(rg.num_columns))
        # every row within the limit cannot add up to more than this (with each value's
        # length prefix and a page header a row)
        if rg.num_rows and size > rg.num_rows * (limits.max_record_bytes + 64 * rg.num_columns):
            raise limits.error("max_record_bytes", f"rows {first:,}-{first + rg.num_rows - 1:,}"
                               f" hold {size:,} bytes, more than {rg.num_rows:,} records of "
                               "the limit", file=file, line=first)
        try:
            batches = parquet.iter_batches(batch_size=BATCH_ROWS, row_groups=[group])
            for batch in batches:
                _check_batch(batch, first, file, limits, pa, pc)
                for offset, row in enumerate(batch.to_pylist()):
                    yield first + offset, row
                first += batch.num_rows
        except (pa.ArrowException, OSError) as exc:
            raise InputError(f"rows from {first:,} on cannot be read ({_first_line(exc)})",
                             file=file, line=first,
                             expected="a Parquet file that is not damaged") from None


def _check_batch(batch: Any, first: int, file: str, limits: QuestionLimits, pa: Any,
                 pc: Any) -> None:
    """Refuse a text or binary value over max_field_bytes, and a row whose text and
    binary values add up to more than max_record_bytes, before they leave Arrow."""
    totals = None
    for name, column in zip(batch.schema.names, batch.columns):
        kind = column.type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)
                or pa.types.is_binary(kind) or pa.types.is_large_binary(kind)):
            continue
        lengths = pc.fill_null(pc.binary_length(column), 0)
        biggest = pc.max(lengths).as_py() or 0
        if biggest > limits.max_field_bytes:
            row = pc.index(lengths, biggest).as_py()
            raise limits.error("max_field_bytes", f"{biggest:,} bytes", file=file,
                               line=first + row, field=name)
        totals = lengths if totals is None else pc.add(totals, lengths)
    if totals is not None:
        biggest = pc.max(totals).as_py() or 0
        if biggest > limits.max_record_bytes:
            row = pc.index(totals, biggest).as_py()
            raise limits.error("max_record_bytes", f"{biggest:,} bytes", file=file,
                               line=first + row)


def _first_line(exc: BaseException) -> str:
    """The first line of a library's error, cut to a length a one-line error can carry."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


__all__ = ["QuestionLimits", "bounded_lines", "csv_rows", "json_array_rows", "parquet_rows",
           "value_bytes"]
