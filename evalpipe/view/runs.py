"""The runs under an outputs folder, read as they are, for `evalpipe view`.

Nothing is copied into a database: each run's files are read in place and what
was read is remembered. A run's index holds its scored samples (from
scores.json once the run finished, else scored here as samples arrive) and, for
each raw sample, where its line sits in samples.jsonl, so a page of the sample
browser or one transcript reads a few lines, never the whole file. A run that is
still writing is read again from where the last read stopped (a torn last line
is left for the next read); a file rewritten in place (a merge, a retry folded
in) is read anew.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from evalpipe import jsonl
from evalpipe._report.pages import RunData, RunReport, compare_page, run_facts, sample_view
from evalpipe.errors import InputError
from evalpipe.questions import Question
from evalpipe.records import GroupRecord, Manifest, SampleRecord, ScoredSample, Scores
from evalpipe.scoring.run import score_samples, scores_of
from evalpipe.store import RunStore, read_run_file
from evalpipe.view.shapes import DamagedRun, check_record

MAX_PAGE = 500  # rows per page of the sample browser
ANSWER_CHARS = 2000  # of a final answer kept for the text filter and the row


def _damaged(run: Path, exc: InputError) -> DamagedRun:
    """An InputError about a file of the run, as the run's damage (files named within it)."""
    file = exc.file or ""
    if file and Path(file).parent == run:
        file = Path(file).name
    where = f"{file} line {exc.line}" if exc.line else file
    parts = [p for p in (where, f"field '{exc.field}'" if exc.field else "", exc.message,
                         f"expected {exc.expected}" if exc.expected else "") if p]
    return DamagedRun(run.name, ": ".join(parts))


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _identity(path: Path) -> tuple[int, int, int, int] | None:
    """What tells a file changed: inode, device, size, mtime (None: absent)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns


@dataclass
class _Row:
    """Where one raw sample sits in samples.jsonl, and what the filters read of it."""

    start: int
    end: int
    final_answer: str


def _key(s: Mapping[str, Any]) -> tuple[str, str, int]:
    return s.get("cell_id") or "", s.get("question_id") or "", s.get("repeat") or 0


def read_manifest(run: Path) -> Manifest:
    """A run's manifest.json, checked by its type; DamagedRun where it does not fit,
    FileNotFoundError where it is gone."""
    try:
        return read_run_file(run / "manifest.json", Manifest)
    except InputError as exc:
        raise _damaged(run, exc) from None


def read_scores(run: Path) -> Scores:
    """A run's scores.json, checked by its type (as read_manifest)."""
    try:
        return read_run_file(run / "scores.json", Scores)
    except InputError as exc:
        raise _damaged(run, exc) from None


class RunIndex:
    """One run directory, read in place and kept up to date by `refresh`."""

    def __init__(self, path: Path):
        self.path = path
        self.store = RunStore(path)
        self.lock = threading.RLock()
        self.manifest: Manifest | None = None
        self.scores: Scores | None = None  # scores.json, once the run finished
        self.questions: dict[str, Question] = {}
        self.scored: list[ScoredSample] = []
        self.rows: dict[tuple[str, str, int], _Row] = {}
        self.blocks: dict[str, tuple[int, int]] = {}  # prompt block id -> the line carrying it
        self.from_file = False  # scored comes from scores.json
        self.version = 0  # bumped whenever what the run shows changed
        self._seen: dict[str, Any] = {}
        self._offset = 0  # samples.jsonl read up to here
        self._lines = 0  # the lines before _offset (a damaged line is named by its number)
        self.damage: tuple[dict[str, Any], DamagedRun] | None = None  # what was seen, why
        self._report: tuple[int, RunReport] | None = None
        self._plots: tuple[int, dict[str, bytes]] | None = None

    # -- reading ---------------------------------------------------------------------------
    def refresh(self) -> None:
        """Read what changed since the last read. DamagedRun when a file the pages read
        does not have its shape (raised again, without reading, until one of the files
        changes); FileNotFoundError when the run or its manifest was deleted."""
        with self.lock:
            samples_id = _identity(self.store.samples_path)
            seen = {name: _identity(self.path / name) for name in
                    ("manifest.json", "questions.jsonl", "scores.json", "audit.json",
                     "probe.jsonl", "judgements.jsonl")}
            seen["samples"] = samples_id
            if self.damage is not None and self.damage[0] == seen:
                raise self.damage[1]
            if seen == self._seen:
                return
            try:
                self._read(seen)
            except Exception as exc:
                # what was read is partly stale now: the next read starts afresh
                self._seen, self.questions = {}, {}
                self.scored, self.rows, self.blocks, self._offset = [], {}, {}, 0
                self._lines, self.from_file = 0, False
                self.version += 1
                if isinstance(exc, InputError):  # a run file evalpipe's readers refused
                    exc = exc if isinstance(exc, DamagedRun) else _damaged(self.path, exc)
                    self.damage = (seen, exc)
                    raise exc from None
                raise
            self.damage = None

    def _read(self, seen: dict[str, Any]) -> None:
        old, self._seen = self._seen, seen
        samples_id = seen["samples"]
        self.manifest = manifest = read_manifest(self.path)
        if seen["questions.jsonl"] != old.get("questions.jsonl") or not self.questions:
            self.questions = (self.store.questions() if seen["questions.jsonl"] else {})
        rewritten = (samples_id is None or old.get("samples") is None
                     or samples_id[:2] != old["samples"][:2] or samples_id[2] < self._offset
                     # the judge's verdicts change scores already made here
                     or seen["judgements.jsonl"] != old.get("judgements.jsonl"))
        use_file = manifest.status == "finished" and seen["scores.json"] is not None
        if rewritten or (use_file and seen["scores.json"] != old.get("scores.json")) \
                or (self.from_file and not use_file):
            self.scored, self.rows, self.blocks, self._offset = [], {}, {}, 0
            self._lines, self.from_file = 0, False
        fresh = self._scan()
        if use_file:
            if not self.from_file:
                self.scores = read_scores(self.path)
                self.scored = self.scores["samples"]
                self.from_file = True
        elif fresh:
            self.scored += score_samples(manifest, self.questions, fresh,
                                         source=str(self.store.samples_path),
                                         judgements=self.store.read_judgements())
        self.version += 1

    def _scan(self) -> list[SampleRecord]:
        """Index the lines appended since the last scan; returns their records."""
        fresh: list[SampleRecord] = []
        start, before = self._offset, self._lines
        try:
            for end, line, record in jsonl.scan(self.store.samples_path, start=self._offset):
                check_record(self.path, before + line, record)
                answer = record.get("final_answer")
                self.rows[_key(record)] = _Row(start, end, str(answer or "")[:ANSWER_CHARS])
                for block in record.get("prompt_text") or {}:
                    self.blocks.setdefault(block, (start, end))
                fresh.append(cast(SampleRecord, record))  # a line Sample.to_dict wrote
                start = self._offset = end
                self._lines = before + line
        except DamagedRun:
            raise
        except InputError as exc:  # scan counts lines from where it started
            raise DamagedRun(self.path.name, f"samples.jsonl line {before + (exc.line or 0)}: "
                             f"{exc.message}") from None
        return fresh

    def _line(self, start: int, end: int) -> SampleRecord:
        with open(self.store.samples_path, "rb") as f:
            f.seek(start)
            return json.loads(f.read(end - start))

    # -- what the pages show ---------------------------------------------------------------
    def report(self) -> RunReport:
        """The run as the reports read it (raw samples left on disk), and its report."""
        with self.lock:
            self.refresh()
            if self._report is None or self._report[0] != self.version:
                manifest = self.manifest
                assert manifest is not None  # refresh() read it
                scores = self.scores if self.from_file and self.scores is not None else \
                    scores_of(manifest, self.scored)
                audit = _read_json(self.path / "audit.json")
                probe = list(self.store.iter_records(self.store.probe_path))
                run = RunData(self.path, manifest, self.questions, [], scores,
                              rescored=not self.from_file, audit=audit, probe=probe)
                self._report = (self.version, RunReport(run))
            return self._report[1]

    def summary(self) -> dict[str, Any]:
        """The run page: facts, notes, tables (formatted as the reports format them),
        the browser's filter values and the plot names."""
        report = self.report()
        shown = report.summary()
        scored = self.scored
        return {
            "id": self.path.name, "run": shown["run"], "version": self.version,
            "samples": len(scored), "expected": expected_samples(report.run.manifest),
            "notes": shown["notes"], "cost_note": shown["cost_note"], "noise": shown["noise"],
            "tables": shown["tables"],
            "filters": {"cell": shown["cells"],
                        "suite": sorted({str(s.get("suite")) for s in scored}),
                        "category": sorted({str(s.get("category")) for s in scored})},
            "plots": report.plot_names(),
        }

    def page(self, *, cell: str = "", suite: str = "", category: str = "", result: str = "",
             text: str = "", offset: int = 0, limit: int = 100) -> dict[str, Any]:
        """One page of the samples that pass the filters, in run order."""
        limit = max(1, min(limit, MAX_PAGE))
        needle = text.strip().casefold()
        with self.lock:
            self.refresh()
            out, matched = [], 0
            for index, s in enumerate(self.scored):
                if (cell and s.get("cell_id") != cell) or (suite and s.get("suite") != suite) \
                        or (category and s.get("category") != category) \
                        or (result == "correct" and not s.get("exact")) \
                        or (result == "wrong" and (s.get("exact") or s.get("infra"))):
                    continue
                row = self.rows.get(_key(s))
                answer = row.final_answer if row else ""
                if needle:
                    q = self.questions.get(s.get("question_id") or "")
                    hay = f"{s.get('question_id')} {q.question if q else ''} {answer}"
                    if needle not in hay.casefold():
                        continue
                matched += 1
                if offset < matched <= offset + limit:
                    out.append({"index": index, "cell": s.get("cell_id"), "suite": s.get("suite"),
                                "qid": s.get("question_id"), "repeat": s.get("repeat") or 0,
                                "exact": bool(s.get("exact")), "infra": bool(s.get("infra")),
                                "category": s.get("category"), "subtype": s.get("subtype"),
                                "final_answer": answer[:200]})
            return {"total": len(self.scored), "matched": matched, "offset": offset,
                    "rows": out, "version": self.version}

    def sample(self, index: int) -> dict[str, Any]:
        """One sample's transcript (the report's sample view) and its prompt blocks."""
        with self.lock:
            self.refresh()
            if not 0 <= index < len(self.scored):
                raise KeyError(index)
            scored = self.scored[index]
            row = self.rows.get(_key(scored))
            if row is None and not self.store.samples_path.is_file():
                raise FileNotFoundError(self.store.samples_path)  # deleted: 404
            raw = self._line(row.start, row.end) if row else None
            view = sample_view(scored, raw, self.questions.get(scored.get("question_id") or ""))
            wanted = {b for t in view["turns"] for b in t.get("prompt_blocks") or ()}
            blocks: dict[str, str] = {}
            for start, end in sorted({self.blocks[b] for b in wanted if b in self.blocks}):
                carrier = raw if raw is not None and row and start == row.start else \
                    self._line(start, end)
                blocks.update({b: t for b, t in (carrier.get("prompt_text") or {}).items()
                               if b in wanted})
            return {"sample": view, "blocks": blocks, "index": index}

    def plots(self) -> dict[str, bytes]:
        """The report's plots (PNG), drawn once per version of the run; {} without
        matplotlib."""
        with self.lock:
            report = self.report()
            if self._plots is None or self._plots[0] != self.version:
                self._plots = (self.version, report.plots())
            return self._plots[1]


def expected_samples(manifest: Manifest) -> int | None:
    """How many samples the finished run will hold (cells x questions x repeats), or None
    when the manifest cannot tell."""
    from evalpipe.config import parse_config

    if manifest.questions is None:
        return None
    try:
        cells = len(parse_config(manifest.config.as_dict(), source="manifest.json").cells())
    except InputError:
        return None
    repeats = len(manifest.repeats.seeds or [0]) if manifest.repeats else 1
    return cells * manifest.questions * repeats


class Outputs:
    """Every run directly under one outputs folder (a folder holding manifest.json).

    A run whose files do not have the shape the viewer reads (view/shapes.py) is listed
    apart, with what is wrong, and `warn` is told once per new damage; every other run
    is listed as usual."""

    def __init__(self, root: str | Path, warn: Callable[[str], None] | None = None):
        self.root = Path(root)
        if not self.root.is_dir():
            raise InputError("not a folder", file=str(root),
                             expected="an outputs folder holding run directories")
        self.warn = warn or (lambda line: None)
        self._runs: dict[str, RunIndex] = {}
        self._headlines: dict[str, tuple[Any, dict[str, Any] | None]] = {}
        self._warned: dict[str, str] = {}  # run -> the damage last warned about
        self._lock = threading.Lock()

    def _dirs(self) -> dict[str, Path]:
        out = {}
        for path in self.root.iterdir():
            if path.is_dir() and not path.is_symlink() and (path / "manifest.json").is_file():
                out[path.name] = path
        return out

    def get(self, run_id: str) -> RunIndex:
        """The index of a run by its folder name; KeyError for any other name, and for a
        run deleted since it was opened (its folder or its manifest gone)."""
        with self._lock:
            index = self._runs.get(run_id)
            if index is not None and not index.store.manifest_path.is_file():
                del self._runs[run_id]  # deleted while viewed
                self._headlines.pop(run_id, None)
                index = None
            if index is None:
                path = self._dirs().get(run_id)
                if path is None:
                    raise KeyError(run_id)
                index = self._runs[run_id] = RunIndex(path)
            return index

    def damaged(self, exc: DamagedRun) -> None:
        """Note a run's damage: warned once, until it changes."""
        with self._lock:
            if self._warned.get(exc.run) != exc.problem:
                self._warned[exc.run] = exc.problem
                self.warn(f"warning: {exc}; the run is left out of the list")

    def listing(self) -> dict[str, list[dict[str, Any]]]:
        """Every run, newest first: its facts and headline scores; and, apart, every run
        whose files cannot be shown, with the reason."""
        latest = self.root / "latest"
        latest_name = os.readlink(latest) if latest.is_symlink() else None
        runs, damaged = [], []
        for name, path in self._dirs().items():
            try:
                manifest = read_manifest(path)
                facts = run_facts(manifest)
                runs.append({"id": name, **facts, "latest": Path(latest_name or "").name == name,
                             **self._headline(name, path, manifest)})
            except FileNotFoundError:
                continue  # deleted while being listed
            except DamagedRun as exc:
                self.damaged(exc)
                damaged.append({"id": name, "problem": exc.problem})
            else:
                self._warned.pop(name, None)
        runs.sort(key=lambda r: (r.get("started") or "", r["id"]), reverse=True)
        return {"runs": runs, "damaged": sorted(damaged, key=lambda d: d["id"])}

    def _headline(self, name: str, path: Path, manifest: Manifest) -> dict[str, Any]:
        """Samples and exact match (pooled over cells, and the best cell) of a run: from
        scores.json when the run finished, else from its index when one is open, else
        the count of lines written so far."""
        finished = manifest.status == "finished"
        scores_path = path / "scores.json"
        stamp = (_identity(scores_path), _identity(path / "samples.jsonl"), finished)
        index = self._runs.get(name)
        cached = self._headlines.get(name)
        if cached and cached[0] == stamp and (index is None or index.damage is None):
            return cached[1] or {}
        groups: list[GroupRecord] | None = None
        samples = None
        if index is not None and index.damage is not None:
            index.refresh()  # raises the damage found when the run was opened, if still there
        if finished and stamp[0] is not None:
            scores = read_scores(path)
            groups = scores["groups"]
            samples = len(scores["samples"])
        elif name in self._runs:
            run = self._runs[name].report().run
            groups, samples = run.scores["groups"], len(run.scores["samples"])
        else:
            samples = _count_lines(path / "samples.jsonl")
        head: dict[str, Any] = {"samples": samples, "exact": None, "best": None}
        if groups:
            cells = [g for g in groups if g.get("suite") == "all"]
            rates = [(g.get("rates") or {}).get("exact") or {} for g in cells]
            hits = sum(round((r.get("rate") or 0) * (r.get("n") or 0)) for r in rates)
            n = sum(r.get("n") or 0 for r in rates)
            head["exact"] = {"rate": hits / n, "hits": hits, "n": n, "cells": len(cells)} \
                if n else None
            best = max(zip(cells, rates), key=lambda cr: cr[1].get("rate") or -1, default=None)
            if best and best[1].get("n"):
                head["best"] = {"cell_id": best[0]["cell_id"], "rate": best[1]["rate"],
                                "n": best[1]["n"]}
        self._headlines[name] = (stamp, head)
        return head

    def compare(self, a: str, b: str) -> dict[str, Any]:
        """The paired comparison of run b against run a, as the compare page shows it."""
        page = compare_page(self.get(a).report(), self.get(b).report())
        return {**page, "a": {"id": a, **page["a"]}, "b": {"id": b, **page["b"]}}


def _count_lines(path: Path) -> int:
    count = 0
    try:
        with open(path, "rb") as f:
            while block := f.read(1 << 20):
                count += block.count(b"\n")
    except OSError:
        return 0
    return count
