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
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from evalpipe import jsonl
from evalpipe._report.build import MAIN_METRICS, build_report, metric_label
from evalpipe._report.compare import Comparison, compare_runs, cost_changes
from evalpipe._report.html import sample_view
from evalpipe._report.load import RunData, run_facts
from evalpipe._report.render import (
    COST_NOTE,
    accuracy_grid,
    category_grid,
    cost_grid,
    noise_floor_line,
    repeats_grid,
    report_notes,
)
from evalpipe.errors import InputError
from evalpipe.questions import Question
from evalpipe.records import SampleRecord, ScoredSample
from evalpipe.scoring.aggregate import aggregate
from evalpipe.scoring.run import score_records, verdict_counts
from evalpipe.store import RunStore, run_status

MAX_PAGE = 500  # rows per page of the sample browser
ANSWER_CHARS = 2000  # of a final answer kept for the text filter and the row


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


class RunIndex:
    """One run directory, read in place and kept up to date by `refresh`."""

    def __init__(self, path: Path):
        self.path = path
        self.store = RunStore(path)
        self.lock = threading.RLock()
        self.manifest: dict[str, Any] = {}
        self.questions: dict[str, Question] = {}
        self.scored: list[ScoredSample] = []
        self.rows: dict[tuple[str, str, int], _Row] = {}
        self.blocks: dict[str, tuple[int, int]] = {}  # prompt block id -> the line carrying it
        self.from_file = False  # scored comes from scores.json
        self.version = 0  # bumped whenever what the run shows changed
        self._seen: dict[str, Any] = {}
        self._offset = 0  # samples.jsonl read up to here
        self._report: tuple[int, RunData, dict[str, Any]] | None = None
        self._plots: tuple[int, dict[str, bytes]] | None = None

    # -- reading ---------------------------------------------------------------------------
    def refresh(self) -> None:
        with self.lock:
            samples_id = _identity(self.store.samples_path)
            seen = {name: _identity(self.path / name) for name in
                    ("manifest.json", "questions.jsonl", "scores.json", "audit.json",
                     "probe.jsonl", "judgements.jsonl")}
            seen["samples"] = samples_id
            if seen == self._seen:
                return
            old, self._seen = self._seen, seen
            manifest = _read_json(self.store.manifest_path)
            if not isinstance(manifest, dict):
                raise InputError("manifest.json is missing or not JSON", file=str(self.path))
            self.manifest = manifest
            if seen["questions.jsonl"] != old.get("questions.jsonl") or not self.questions:
                self.questions = (self.store.questions() if seen["questions.jsonl"] else {})
            rewritten = (samples_id is None or old.get("samples") is None
                         or samples_id[:2] != old["samples"][:2] or samples_id[2] < self._offset
                         # the judge's verdicts change scores already made here
                         or seen["judgements.jsonl"] != old.get("judgements.jsonl"))
            use_file = run_status(manifest) == "finished" and seen["scores.json"] is not None
            if rewritten or (use_file and seen["scores.json"] != old.get("scores.json")) \
                    or (self.from_file and not use_file):
                self.scored, self.rows, self.blocks, self._offset = [], {}, {}, 0
                self.from_file = False
            fresh = self._scan()
            if use_file:
                if not self.from_file:
                    scores = _read_json(self.path / "scores.json") or {}
                    self.scored = list(scores.get("samples") or [])
                    self._scores_meta = {k: v for k, v in scores.items() if k != "samples"}
                    self.from_file = True
            elif fresh:
                self.scored += score_records(self.manifest, self.questions, fresh,
                                             source=str(self.store.samples_path),
                                             judgements=self.store.read_judgements())["samples"]
            self.version += 1

    def _scan(self) -> list[SampleRecord]:
        """Index the lines appended since the last scan; returns their records."""
        fresh: list[SampleRecord] = []
        start = self._offset
        for end, _, record in jsonl.scan(self.store.samples_path, start=self._offset):
            if isinstance(record, dict):
                answer = record.get("final_answer")
                self.rows[_key(record)] = _Row(start, end, str(answer or "")[:ANSWER_CHARS])
                for block in record.get("prompt_text") or {}:
                    self.blocks.setdefault(block, (start, end))
                fresh.append(cast(SampleRecord, record))  # a line Sample.to_dict wrote
            start = self._offset = end
        return fresh

    def _line(self, start: int, end: int) -> SampleRecord:
        with open(self.store.samples_path, "rb") as f:
            f.seek(start)
            return json.loads(f.read(end - start))

    # -- what the pages show ---------------------------------------------------------------
    def run_data(self) -> tuple[RunData, dict[str, Any]]:
        """The run as the report reads it (raw samples left on disk) and its report data."""
        with self.lock:
            self.refresh()
            if self._report is None or self._report[0] != self.version:
                if self.from_file:
                    scores = {**self._scores_meta, "samples": self.scored}
                else:
                    k = int((self.manifest.get("config") or {}).get("k") or 3)
                    scores = {"run_id": self.manifest.get("run_id"), "k": k,
                              "groups": aggregate(self.scored), "samples": self.scored,
                              "scorer_version": (self.scored[0].get("scorer_version")
                                                 if self.scored else None),
                              "unscored": [s for s in self.scored if s.get("scorer_error")],
                              "verdicts": verdict_counts(self.scored)}
                audit = _read_json(self.path / "audit.json")
                probe = list(self.store.iter_records(self.store.probe_path))
                run = RunData(self.path, self.manifest, self.questions, [], scores,
                              rescored=not self.from_file, audit=audit, probe=probe)
                self._report = (self.version, run, build_report(run))
            return self._report[1], self._report[2]

    def summary(self) -> dict[str, Any]:
        """The run page: facts, notes, tables (formatted as the reports format them),
        the browser's filter values and the plot names."""
        run, data = self.run_data()
        k = data["k"]
        tables = []
        for metric, _, proportion in MAIN_METRICS:
            header, rows = accuracy_grid(data, metric, proportion)
            tables.append({"id": f"acc-{metric}", "title": metric_label(metric, k),
                           "header": header, "rows": rows})
        for table_id, title, (header, rows) in (
                ("categories", "Failure categories (suite all)", category_grid(data)),
                ("cost", "Cost per sample (suite all, means)", cost_grid(data))):
            tables.append({"id": table_id, "title": title, "header": header, "rows": rows})
        if any(r["repeats"] > 1 for r in data.get("repeats") or []):
            header, rows = repeats_grid(data)
            tables.append({"id": "repeats", "title": "Repeats", "header": header, "rows": rows})
        notes = report_notes(data)
        if run.rescored:
            notes.append("Scored here with the current scorer as samples arrive (no "
                         "scores.json yet).")
        scored = self.scored
        return {
            "id": self.path.name, "run": data["run"], "version": self.version,
            "samples": len(scored), "expected": expected_samples(self.manifest),
            "notes": notes, "cost_note": COST_NOTE, "noise": noise_floor_line(data),
            "tables": tables,
            "filters": {"cell": run.cells(),
                        "suite": sorted({str(s.get("suite")) for s in scored}),
                        "category": sorted({str(s.get("category")) for s in scored})},
            "plots": self.plot_names(),
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

    def plot_names(self) -> list[str]:
        """The plots this run has, without drawing them; [] without matplotlib."""
        from evalpipe._report.plots import applicable

        try:
            import matplotlib  # noqa: F401 -- the plots' one extra
        except ModuleNotFoundError:
            return []
        return applicable(self.run_data()[1])

    def plots(self) -> dict[str, bytes]:
        """The report's plots (PNG), drawn once per version of the run; {} without
        matplotlib."""
        from evalpipe._report.plots import render_plots
        from evalpipe.errors import EvalpipeError

        with self.lock:
            _, data = self.run_data()
            if self._plots is None or self._plots[0] != self.version:
                try:
                    self._plots = (self.version, render_plots(data))
                except EvalpipeError:
                    self._plots = (self.version, {})
            return self._plots[1]


def expected_samples(manifest: dict[str, Any]) -> int | None:
    """How many samples the finished run will hold (cells x questions x repeats), or None
    when the manifest cannot tell."""
    from evalpipe.config import parse_config

    try:
        cells = len(parse_config(manifest["config"], source="manifest.json").cells())
        repeats = len((manifest.get("repeats") or {}).get("seeds") or [0])
        return cells * int(manifest["questions"]) * repeats
    except (KeyError, TypeError, ValueError, InputError):
        return None


class Outputs:
    """Every run directly under one outputs folder (a folder holding manifest.json)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        if not self.root.is_dir():
            raise InputError("not a folder", file=str(root),
                             expected="an outputs folder holding run directories")
        self._runs: dict[str, RunIndex] = {}
        self._headlines: dict[str, tuple[Any, dict[str, Any] | None]] = {}
        self._lock = threading.Lock()

    def _dirs(self) -> dict[str, Path]:
        out = {}
        for path in self.root.iterdir():
            if path.is_dir() and not path.is_symlink() and (path / "manifest.json").is_file():
                out[path.name] = path
        return out

    def get(self, run_id: str) -> RunIndex:
        """The index of a run by its folder name; KeyError for any other name."""
        with self._lock:
            if run_id not in self._runs:
                path = self._dirs().get(run_id)
                if path is None:
                    raise KeyError(run_id)
                self._runs[run_id] = RunIndex(path)
            return self._runs[run_id]

    def listing(self) -> list[dict[str, Any]]:
        """Every run, newest first: its facts and headline scores."""
        latest = self.root / "latest"
        latest_name = os.readlink(latest) if latest.is_symlink() else None
        out = []
        for name, path in self._dirs().items():
            manifest = _read_json(path / "manifest.json")
            if not isinstance(manifest, dict):
                continue
            facts = run_facts(manifest)
            out.append({"id": name, **facts, "latest": Path(latest_name or "").name == name,
                        **self._headline(name, path, manifest)})
        return sorted(out, key=lambda r: (r.get("started") or "", r["id"]), reverse=True)

    def _headline(self, name: str, path: Path, manifest: dict[str, Any]) -> dict[str, Any]:
        """Samples and exact match (pooled over cells, and the best cell) of a run: from
        scores.json when the run finished, else from its index when one is open, else
        the count of lines written so far."""
        finished = run_status(manifest) == "finished"
        scores_path = path / "scores.json"
        stamp = (_identity(scores_path), _identity(path / "samples.jsonl"), finished)
        cached = self._headlines.get(name)
        if cached and cached[0] == stamp:
            return cached[1] or {}
        groups: list[dict[str, Any]] | None = None
        samples = None
        if finished and stamp[0] is not None:
            scores = _read_json(scores_path) or {}
            groups = scores.get("groups")
            samples = len(scores.get("samples") or [])
        elif name in self._runs:
            run, _ = self._runs[name].run_data()
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
        from evalpipe._report.compare import HEADER, metric_rows, summary_line

        run_a, data_a = self.get(a).run_data()
        run_b, data_b = self.get(b).run_data()
        cmp: Comparison = compare_runs(run_a, run_b)
        cells = []
        for cc in cmp.cells + ([cmp.pooled] if cmp.pooled else []):
            cells.append({
                "title": cc.b_cell if cc.a_cell == cc.b_cell else f"{cc.a_cell} -> {cc.b_cell}",
                "a_cell": cc.a_cell, "b_cell": cc.b_cell, "matched_by": cc.matched_by,
                "pairs": cc.n_pairs, "header": HEADER, "rows": metric_rows(cc, cmp.k),
                "right_to_wrong": cc.right_to_wrong, "wrong_to_right": cc.wrong_to_right,
                "category_moves": [list(m) for m in cc.category_moves],
                "unchanged": cc.unchanged_categories})
        return {"a": {"id": a, **data_a["run"]}, "b": {"id": b, **data_b["run"]},
                "verdict": summary_line(cmp), "warnings": cmp.warnings,
                "questions": cmp.questions_shared, "cells": cells,
                "cost": cost_changes(cmp, data_a, data_b)}


def _count_lines(path: Path) -> int:
    count = 0
    try:
        with open(path, "rb") as f:
            while block := f.read(1 << 20):
                count += block.count(b"\n")
    except OSError:
        return 0
    return count
