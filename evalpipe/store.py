"""The run directory: manifest, question snapshot, append-only samples, scores.

The store owns the manifest (records.Manifest) while a run writes it, and changes it
by named steps alone: `begin` (and begin again, resumed), `record_cell`, `warn`,
`finish` and `end`. Every step but the last writes it the disk-safe way, keeping
space in reserve; `end` gives the reserve up, so that how a run ended is recorded on
a full disk too. manifest.json and scores.json are read back through their types
(`read_run_file`): a file that does not fit is named, with its field.

outputs/<run_id>/
  manifest.json     config, cell fingerprints, versions, git commit, machine, times
  questions.jsonl   the questions as run, so a run can be re-scored without its sources
  samples.jsonl     one record per cell x question, appended whole and fsynced per batch
  samples.retry.jsonl  re-runs of infra errors (--retry-infra), folded into samples.jsonl
                    in place when the retry finishes (or when the run is next resumed)
  scores.json       recomputable at any time from the two files above
  table.md          the score table
  .lock             held by the one process writing this run
  .reserve          disk space kept while the run is written, so that its end (failed,
                    interrupted) can be recorded in the manifest even on a full disk
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import re
import subprocess
import sys
import time
import warnings
from collections.abc import Iterable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any, TextIO, TypeVar

from pydantic import TypeAdapter, ValidationError

from evalpipe import jsonl
from evalpipe.errors import DataWarning, EvalpipeError, InputError, StorageError
from evalpipe.identity import sample_key
from evalpipe.questions import Question, parse_question
from evalpipe.records import CellRecord, Manifest, SampleRecord, Scores

PACKAGES = ("evalpipe", "torch", "transformers", "datasets", "scikit-learn", "numpy", "gguf",
            "accelerate", "jsonschema")


class RunLockedError(EvalpipeError):
    exit_code = 2


@contextlib.contextmanager
def storage(path: Path, what: str = "write"):
    """The storage boundary: a full disk or an unwritable folder becomes one clear
    line (StorageError) instead of a traceback."""
    try:
        yield
    except OSError as exc:
        raise StorageError(f"cannot {what} {path}: {exc.strerror or exc}; what was written "
                           "before is kept: free space or fix permissions, then continue "
                           "with --resume") from None


def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_commit(cwd: Path | None = None) -> str | None:
    try:
        proc = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              cwd=cwd or Path(__file__).parent, timeout=5)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, cwd=cwd or Path(__file__).parent,
                               timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    commit = proc.stdout.strip() or None
    return f"{commit}-dirty" if commit and dirty else commit


def machine() -> dict[str, Any]:
    return {"platform": platform.platform(), "python": sys.version.split()[0],
            "processor": platform.processor() or platform.machine(), "cpus": os.cpu_count()}


def now() -> str:
    """A time as the manifest records it."""
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


class RunStore:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock_file: TextIO | None = None  # held open while this process writes
        self._manifest: Manifest | None = None  # the manifest a run writes, once begun

    @property
    def samples_path(self) -> Path:
        return self.path / "samples.jsonl"

    @property
    def retry_path(self) -> Path:
        return self.path / "samples.retry.jsonl"

    @property
    def manifest_path(self) -> Path:
        return self.path / "manifest.json"

    # -- lifecycle ---------------------------------------------------------------------------
    def lock(self) -> None:
        """Hold the run's lock for as long as this process writes it."""
        with storage(self.path, "create the run directory"):
            self.path.mkdir(parents=True, exist_ok=True)
            # closed by unlock(): the lock lasts as long as the file is open
            lock_file = open(self.path / ".lock", "a+")  # noqa: SIM115
        try:
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock_file.seek(0)
            holder = lock_file.read().strip() or "another process"
            lock_file.close()
            raise RunLockedError(f"{self.path} is being written by {holder}; refusing a second "
                                 "writer") from None
        lock_file.seek(0)
        lock_file.truncate()
        lock_file.write(f"pid {os.getpid()} on {platform.node()}\n")
        lock_file.flush()
        self._lock_file = lock_file

    def unlock(self) -> None:
        self.release()
        if self._lock_file is not None:
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()
            self._lock_file = None

    def __enter__(self):
        self.lock()
        return self

    def __exit__(self, *exc):
        self.unlock()

    # -- the manifest, by its steps, and the space its last write needs -----------------------
    @property
    def reserve_path(self) -> Path:
        return self.path / ".reserve"

    @property
    def manifest(self) -> Manifest:
        """The manifest this run writes; made by `begin`."""
        if self._manifest is None:
            raise RuntimeError("the run's manifest is made when the run begins")
        return self._manifest

    def read_manifest(self) -> Manifest:
        """manifest.json as written, checked (InputError where it is missing or does
        not fit its type)."""
        try:
            return read_run_file(self.manifest_path, Manifest)
        except FileNotFoundError:
            raise InputError("no manifest.json in run directory", file=str(self.path)) from None

    def begin(self, manifest: Manifest, *, resumed: bool = False) -> None:
        """The run starts, or starts again (`resumed`: when is added, the error of its
        last end is cleared): its manifest says running."""
        manifest.status = "running"
        if resumed:
            manifest.error = None
            manifest.resumed = [*manifest.resumed, now()]
        self._manifest = manifest
        self._save()

    def record_cell(self, cell_id: str, cell: CellRecord) -> None:
        """A cell starts: what decides its outputs. A resumed run refuses a cell whose
        fingerprint differs from the one recorded when it first ran."""
        recorded = self.manifest.cells.get(cell_id)
        if recorded is not None and recorded.fingerprint != cell.fingerprint:
            raise InputError(
                f"cell {cell_id} no longer matches the run (model, settings, corpus or "
                "questions changed since it started); start a new run instead",
                file=str(self.manifest_path), field="cells")
        self.manifest.cells = {**self.manifest.cells, cell_id: cell}
        self._save()

    def warn(self, message: str) -> bool:
        """A warning about the run (reports show it), once; False when it was given."""
        if message in self.manifest.warnings:
            return False
        self.manifest.warnings = [*self.manifest.warnings, message]
        self._save()
        return True

    def finish(self, *, retry: dict[str, Any] | None = None,
               cache: dict[str, Any] | None = None, judge: dict[str, Any] | None = None
               ) -> None:
        """The run finished: its status, when, and what its last steps found (this
        retry of infra errors, the generation cache's counts, what the judge did)."""
        manifest = self.manifest
        if retry is not None:
            manifest.retries = [*manifest.retries, retry]
        if cache is not None:
            manifest.cache = cache
        if judge is not None:
            manifest.judge = judge
        manifest.finished, manifest.status = now(), "finished"
        self._save()

    def end(self, status: str, error: str) -> str | None:
        """Record how a run that did not finish ended (interrupted or failed, and why),
        on a full disk too: the reserve is given up for this write. Returns why the
        manifest could not be written, or None."""
        manifest = self.manifest
        manifest.status, manifest.error, manifest.ended = status, error, now()
        failed = None
        for _ in range(2):  # the second time with the reserve given up
            try:
                self.write_json("manifest.json", manifest.to_dict())
                failed = None
                break
            except StorageError as exc:
                failed = str(exc).split("; what was written")[0]
                if not self.reserve_path.exists():
                    break
                self.release()
        self.release()
        return failed

    def _save(self) -> None:
        """Write manifest.json, then keep twice its size in reserve (best effort): the
        write that records how the run ended must not fail for lack of space."""
        self.write_json("manifest.json", self.manifest.to_dict())
        need = 2 * (self.manifest_path.stat().st_size + 4096)
        with contextlib.suppress(OSError):
            if not self.reserve_path.is_file() or self.reserve_path.stat().st_size < need:
                with open(self.reserve_path, "ab") as f:
                    try:
                        os.posix_fallocate(f.fileno(), 0, need)
                    finally:
                        if not os.fstat(f.fileno()).st_size:  # nothing kept: no file
                            self.release()

    def release(self) -> None:
        """Give the reserved space back (the run is no longer being written)."""
        with contextlib.suppress(OSError):
            self.reserve_path.unlink(missing_ok=True)

    # -- files -------------------------------------------------------------------------------
    def write_json(self, name: str, data: Any) -> None:
        """Write whole or not at all: a temp file renamed over the target. Text that no
        UTF-8 file can hold (a lone surrogate in an error message) is written escaped."""
        text = json.dumps(data, indent=2, ensure_ascii=False, default=str)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = json.dumps(data, indent=2, ensure_ascii=True, default=str)
        self.write_text(name, text + "\n")

    def read_json(self, name: str) -> Any:
        try:
            return json.loads((self.path / name).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise InputError(f"no {name} in run directory", file=str(self.path)) from None
        except (ValueError, RecursionError) as exc:  # not JSON, or not UTF-8
            raise InputError(f"unreadable ({type(exc).__name__}: {str(exc)[:200]})",
                             file=str(self.path / name), expected="the JSON evalpipe wrote"
                             ) from None
        except OSError as exc:
            raise InputError(f"cannot read: {exc.strerror or exc}",
                             file=str(self.path / name)) from None

    def write_text(self, name: str, text: str) -> None:
        """Whole or not at all: a temp file renamed over the target."""
        tmp = self.path / f".{name}.tmp"
        with storage(self.path / name):
            try:
                tmp.write_text(text, encoding="utf-8")
            except OSError:
                tmp.unlink(missing_ok=True)
                raise
            os.replace(tmp, self.path / name)

    def write_questions(self, questions: Iterable[Question]) -> None:
        self.write_text("questions.jsonl", "".join(
            json.dumps(q.to_dict(), ensure_ascii=False) + "\n" for q in questions))

    def questions(self) -> dict[str, Question]:
        """The run's question snapshot, checked record by record (read as plain JSON
        lines: the file is evalpipe's own, and HF datasets took seconds to load 20,000)."""
        path = self.path / "questions.jsonl"
        if not path.is_file():
            raise InputError("no questions.jsonl in run directory", file=str(self.path))
        out: dict[str, Question] = {}
        for line, record in enumerate(jsonl.read(path), start=1):
            q = parse_question(record, file=str(path), line=line)
            out[q.id] = q
        return out

    def append_samples(self, samples: Iterable[dict[str, Any]]) -> None:
        """Append whole records and fsync, so a crash never leaves a half-written batch
        that looks complete (a torn last line is detected and dropped on read)."""
        self._append_to(self.samples_path, samples)

    @property
    def probe_path(self) -> Path:
        return self.path / "probe.jsonl"

    def append_probe(self, records: Iterable[dict[str, Any]]) -> None:
        """Latency-probe records (evalpipe.probe): apart from samples.jsonl, so they
        never count in accuracy."""
        self._append_to(self.probe_path, records)

    def append_retries(self, samples: Iterable[dict[str, Any]]) -> None:
        """Re-runs of infra errors; fold_retries() moves them into samples.jsonl."""
        self._append_to(self.retry_path, samples)

    def _append_to(self, path: Path, samples: Iterable[dict[str, Any]]) -> None:
        with storage(path):
            jsonl.append(path, samples)

    @property
    def judgements_path(self) -> Path:
        return self.path / "judgements.jsonl"

    def read_judgements(self) -> list[dict[str, Any]]:
        """The judge's recorded verdicts (evalpipe.judge); [] when the run has none."""
        return list(self.iter_records(self.judgements_path))

    def write_judgements(self, records: Iterable[dict[str, Any]]) -> None:
        """Replace judgements.jsonl whole (one record per judged sample)."""
        self.write_text("judgements.jsonl", "".join(jsonl.dumps(r) for r in records))

    def iter_samples(self, path: Path | None = None) -> Iterator[SampleRecord]:
        """Every complete sample, streamed, once: a torn last line is dropped and a
        second record of a (cell, question, repeat) is skipped, each with a DataWarning."""
        path = path or self.samples_path
        first: dict[tuple[str, str, int], int] = {}
        for _, line, record in jsonl.scan(path):
            try:
                key = sample_key(record)
            except (KeyError, TypeError, ValueError):
                raise InputError("not a sample record", file=str(path), line=line,
                                 expected="an object with cell_id and question_id") from None
            if key in first:
                warnings.warn(DataWarning(
                    f"{path}:{line}: a second record of cell {key[0]!r}, question {key[1]!r}"
                    + (f", repeat {key[2]}" if key[2] else "")
                    + f" (the first is on line {first[key]}); only the first is counted"),
                    stacklevel=2)
                continue
            first[key] = line
            yield record

    def iter_records(self, path: Path) -> Iterator[dict[str, Any]]:
        """Every complete record of a JSON-lines file of the run (probe.jsonl,
        judgements.jsonl), as written; none when the file is absent."""
        yield from (record for _, _, record in jsonl.scan(path))

    def read_samples(self, repair: bool = False) -> list[SampleRecord]:
        """Every complete sample, once; a torn last line (from a kill mid-write) is
        dropped, and with repair=True also cut from the file so appends continue cleanly."""
        if repair:
            with storage(self.samples_path):
                jsonl.repair(self.samples_path)
        return list(self.iter_samples())

    def fold_retries(self) -> int:
        """Put the re-run samples of samples.retry.jsonl in place of their first
        attempts in samples.jsonl (same line, same order), atomically. Returns how
        many were replaced; without a retry file, 0."""
        retries = {sample_key(s): s for s in self.iter_samples(self.retry_path)}
        if not self.retry_path.exists():
            return 0
        tmp = self.path / ".samples.jsonl.tmp"
        replaced = 0
        with storage(self.samples_path), open(tmp, "w", encoding="utf-8") as out:
            for s in self.iter_samples():
                again = retries.pop(sample_key(s), None)
                replaced += again is not None
                out.write(jsonl.dumps(again or s))
            for s in retries.values():  # a pair the first attempt never wrote
                out.write(jsonl.dumps(s))
            out.flush()
            os.fsync(out.fileno())
        with storage(self.samples_path):
            os.replace(tmp, self.samples_path)
            self.retry_path.unlink()
        return replaced + len(retries)


def read_scores(run_dir: Path) -> Scores:
    """A run's scores.json, checked (InputError where it is missing or does not fit)."""
    path = Path(run_dir) / "scores.json"
    try:
        return read_run_file(path, Scores)
    except FileNotFoundError:
        raise InputError("no scores.json in run directory", file=str(run_dir)) from None


def require_finished(manifest: Manifest, run_dir: Path, allow_partial: bool) -> None:
    """Refuse a run that did not finish, unless the caller asked for partial runs."""
    if manifest.status != "finished" and not allow_partial:
        why = f" ({manifest.error})" if manifest.error else ""
        raise InputError(f"run is {manifest.status}, not finished{why}",
                         file=str(run_dir / "manifest.json"), field="status",
                         expected="a finished run, or --allow-partial to read the samples "
                         "it has")


# -- reading a run's JSON files through their types --------------------------------------------

Shape = TypeVar("Shape")


_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}


def _adapter(shape: Any) -> TypeAdapter[Any]:
    if shape not in _ADAPTERS:
        _ADAPTERS[shape] = TypeAdapter(shape)
    return _ADAPTERS[shape]


def read_run_file(path: Path, shape: type[Shape]) -> Shape:
    """A JSON file of a run read as its type (records.Manifest, records.Scores):
    InputError naming the file, the field and what was there where it does not fit (a
    number is no text, text no number); FileNotFoundError where it is not there."""
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 (byte {exc.start + 1})", file=str(path)) from None
    except (ValueError, RecursionError) as exc:
        raise InputError(f"not JSON ({str(exc)[:120]})", file=str(path)) from None
    except OSError as exc:
        raise InputError(f"cannot be read ({exc.strerror or exc})", file=str(path)) from None
    if not isinstance(data, dict):
        raise InputError(f"expected an object, got {_kind(data)}", file=str(path))
    try:
        return _adapter(shape).validate_python(data)
    except ValidationError as exc:
        raise InputError(shape_problem(exc), file=str(path)) from None


def shape_problem(exc: ValidationError) -> str:
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
_BRANCHES = {"str", "int", "float", "bool", "ModelRef", "list[int]"}
_EXPECTED = {"missing": "present", "string_type": "text", "dict_type": "an object",
             "model_type": "an object", "list_type": "a list", "int_type": "a whole number",
             "float_type": "a number", "bool_type": "true or false"}


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "text", bool: "true/false",
             int: "a number", float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


_PLAIN_NAME = re.compile(r"[\w][\w.-]{0,99}")


def run_name_problem(name: str) -> str | None:
    """Why a name cannot be part of a run's folder name; None when it can. Names become
    path components, so they are plain: no separator, no leading dot, no '..'."""
    if _PLAIN_NAME.fullmatch(name) and ".." not in name:
        return None
    return (f"{name!r} cannot name a run folder: use letters, digits, '.', '_' and '-' "
            "(at most 100, not starting with '.' or '-')")


def new_run_id(name: str, config_hash: str) -> str:
    """Date, time to the millisecond (two runs of one config a second apart must not
    share a folder), name, config hash; ids sort in the order the runs started."""
    now = time.time()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now)) + f"{int(now * 1000) % 1000:03d}"
    return f"{stamp}-{name}-{config_hash[:6]}"
