"""The run directory: manifest, question snapshot, append-only samples, scores.

outputs/<run_id>/
  manifest.json     config, cell fingerprints, versions, git commit, machine, times
  questions.jsonl   the questions as run, so a run can be re-scored without its sources
  samples.jsonl     one record per cell x question, appended whole and fsynced per batch
  scores.json       recomputable at any time from the two files above
  table.md          the score table
  .lock             held by the one process writing this run
"""

from __future__ import annotations

import fcntl
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

from evalpipe.errors import EvalpipeError, InputError
from evalpipe.questions import Question, load_questions

PACKAGES = ("evalpipe", "torch", "transformers", "datasets", "scikit-learn", "numpy", "gguf",
            "accelerate", "jsonschema")


class RunLockedError(EvalpipeError):
    exit_code = 2


def package_versions() -> dict[str, str | None]:
    out = {}
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


class RunStore:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock_file = None

    @property
    def samples_path(self) -> Path:
        return self.path / "samples.jsonl"

    @property
    def manifest_path(self) -> Path:
        return self.path / "manifest.json"

    # -- lifecycle ---------------------------------------------------------------------------
    def lock(self) -> None:
        """Hold the run's lock for as long as this process writes it."""
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock_file = open(self.path / ".lock", "a+")
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_file.seek(0)
            holder = self._lock_file.read().strip() or "another process"
            self._lock_file.close()
            self._lock_file = None
            raise RunLockedError(f"{self.path} is being written by {holder}; refusing a second "
                                 "writer") from None
        self._lock_file.seek(0)
        self._lock_file.truncate()
        self._lock_file.write(f"pid {os.getpid()} on {platform.node()}\n")
        self._lock_file.flush()

    def unlock(self) -> None:
        if self._lock_file is not None:
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()
            self._lock_file = None

    def __enter__(self):
        self.lock()
        return self

    def __exit__(self, *exc):
        self.unlock()

    # -- files -------------------------------------------------------------------------------
    def write_json(self, name: str, data: Any) -> None:
        """Write whole or not at all: a temp file renamed over the target."""
        tmp = self.path / f".{name}.tmp"
        tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n",
                       encoding="utf-8")
        os.replace(tmp, self.path / name)

    def read_json(self, name: str) -> Any:
        try:
            return json.loads((self.path / name).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise InputError(f"no {name} in run directory", file=str(self.path)) from None

    def write_text(self, name: str, text: str) -> None:
        tmp = self.path / f".{name}.tmp"
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, self.path / name)

    def write_questions(self, questions: Iterable[Question]) -> None:
        self.write_text("questions.jsonl", "".join(
            json.dumps(q.to_dict(), ensure_ascii=False) + "\n" for q in questions))

    def questions(self) -> dict[str, Question]:
        return {q.id: q for q in load_questions(self.path / "questions.jsonl")}

    def append_samples(self, samples: Iterable[dict[str, Any]]) -> None:
        """Append whole records and fsync, so a crash never leaves a half-written batch
        that looks complete (a torn last line is detected and dropped on read)."""
        data = "".join(json.dumps(s, ensure_ascii=False, default=str) + "\n" for s in samples)
        with open(self.samples_path, "a", encoding="utf-8") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    def read_samples(self, repair: bool = False) -> list[dict[str, Any]]:
        """Every complete record; a torn last line (from a kill mid-write) is dropped,
        and with repair=True also cut from the file so appends continue cleanly."""
        if not self.samples_path.exists():
            return []
        raw = self.samples_path.read_bytes()
        records, good_end, start = [], 0, 0
        while start < len(raw):
            end = raw.find(b"\n", start)
            if end < 0:
                break  # no newline: the last write was cut short
            line = raw[start:end]
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:
                    if raw.find(b"\n", end + 1) >= 0:
                        raise InputError("corrupt sample record", file=str(self.samples_path),
                                         line=raw.count(b"\n", 0, start) + 1) from None
                    break  # only the last line may be torn
            good_end = start = end + 1
        if repair and good_end < len(raw):
            with open(self.samples_path, "r+b") as f:
                f.truncate(good_end)
        return records


def new_run_id(name: str, config_hash: str) -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{name}-{config_hash[:6]}"
