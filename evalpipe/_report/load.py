"""Reading a run directory for reports and comparisons (read only, never writes)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalpipe.errors import InputError
from evalpipe.questions import Question
from evalpipe.records import (
    DEFAULT_K,
    CellRecord,
    Manifest,
    ModelRef,
    SampleRecord,
    ScoredSample,
    Scores,
)
from evalpipe.store import RunStore, read_scores, require_finished


@dataclass
class RunData:
    """Everything a report needs from one run directory."""

    path: Path
    manifest: Manifest
    questions: dict[str, Question]
    samples: list[SampleRecord]
    scores: Scores
    rescored: bool = False  # scores computed here because scores.json was missing
    audit: dict[str, Any] | None = None  # audit.json, written by `evalpipe audit`
    probe: list[dict[str, Any]] = field(default_factory=list)  # probe.jsonl (latency probe)
    _by_key: dict[tuple[str, str], list[ScoredSample]] = field(default_factory=dict,
                                                                repr=False)

    @property
    def run_id(self) -> str:
        return str(self.manifest.run_id or self.scores.get("run_id") or self.path.name)

    @property
    def k(self) -> int:
        return int(self.scores.get("k") or DEFAULT_K)

    def cells(self) -> list[str]:
        """Cell ids in manifest order, then any that only appear in the scores."""
        out = list(self.manifest.cells)
        for s in self.scores["samples"]:
            if s["cell_id"] not in out:
                out.append(s["cell_id"])
        return out

    def cell_info(self, cell_id: str) -> CellRecord:
        return self.manifest.cell(cell_id)

    def scored_by_question(self) -> dict[tuple[str, str], list[ScoredSample]]:
        """(cell_id, question_id) -> its scored samples, one per repeat, in repeat order."""
        if not self._by_key:
            for s in self.scores["samples"]:
                self._by_key.setdefault((s["cell_id"], s["question_id"]), []).append(s)
            for samples in self._by_key.values():
                samples.sort(key=lambda s: s.get("repeat") or 0)
        return self._by_key

    @property
    def repeats(self) -> int:
        """The most repeats any cell x question has (1 for a run without repeats)."""
        return max((len(v) for v in self.scored_by_question().values()), default=1)


def load_run(path: str | Path, allow_partial: bool = False) -> RunData:
    """Manifest, questions, samples and scores of a finished run (of any run with
    `allow_partial`); scores are computed in memory (not written) when scores.json
    is missing or the run did not finish (its scores.json would be stale)."""
    store = RunStore(path)
    if not store.path.is_dir():
        raise InputError("not a run directory", file=str(path))
    manifest = store.read_manifest()
    require_finished(manifest, store.path, allow_partial)
    questions = store.questions() if (store.path / "questions.jsonl").is_file() else {}
    samples = store.read_samples()
    rescored = False
    if (store.path / "scores.json").is_file() and manifest.status == "finished":
        scores = read_scores(store.path)
    else:
        scores = score_in_memory(manifest, questions, samples,
                                 judgements=store.read_judgements())
        rescored = True
    audit = store.read_json("audit.json") if (store.path / "audit.json").is_file() else None
    probe = list(store.iter_records(store.probe_path))
    return RunData(store.path, manifest, questions, samples, scores, rescored, audit, probe)


def score_in_memory(manifest: Manifest, questions: dict[str, Question],
                    samples: list[SampleRecord], k: int | None = None,
                    judgements: list[dict[str, Any]] | None = None) -> Scores:
    from evalpipe.scoring.run import score_records

    return score_records(manifest, questions, samples, k=k, judgements=judgements)


# -- facts about a run ------------------------------------------------------------------------

def _model_id(model: str | ModelRef | None) -> str | None:
    return model.id if isinstance(model, ModelRef) else model


def run_facts(manifest: Manifest) -> dict[str, Any]:
    """What a reader wants first about a run, from its manifest alone: config name and
    file, models, start and end, git commit, status (and error), and the warnings the
    run recorded (e.g. a server that ignored the tools)."""
    config = manifest.config
    models = [_model_id(m) for m in config.models or []]
    for info in manifest.cells.values():
        model_id = _model_id(info.settings.model if info.settings else None)
        if model_id and model_id not in models:
            models.append(model_id)
    return {"run_id": manifest.run_id, "config_name": config.name,
            "config_source": manifest.config_source, "models": models,
            "started": manifest.started, "finished": manifest.finished or manifest.ended,
            "commit": manifest.git_commit, "status": manifest.status,
            "error": manifest.error, "match": config.match, "warnings": list(manifest.warnings)}


# -- facts about cells -------------------------------------------------------------------------

def cell_facets(run: RunData, cell_id: str) -> dict[str, Any]:
    """model id, format, toolset and retrieval mode/method of a cell, as the run recorded
    them: the manifest's facets of the cell (config.Cell.facets), or for a run recorded
    before those, the cell's settings in the manifest or in its scored samples. A cell id
    is a name, never parsed."""
    info = run.cell_info(cell_id)
    if info.facets is not None:
        recorded = info.facets
        return {"model": recorded.get("model"), "format": recorded.get("format"),
                "toolset": recorded.get("toolset"), "retrieval_mode": recorded.get("retrieval"),
                "retrieval_method": recorded.get("method")}
    if info.settings is not None:
        s = info.settings
        retrieval = s.retrieval or {}
        return {"model": _model_id(s.model), "format": s.format, "toolset": s.toolset,
                "retrieval_mode": retrieval.get("mode") or (s.model_extra or {}).get(
                    "retrieval_mode"), "retrieval_method": retrieval.get("method")}
    scored: Any = next((s for s in run.scores["samples"] if s["cell_id"] == cell_id), {})
    return {"model": scored.get("model"), "format": scored.get("format"),
            "toolset": scored.get("toolset"), "retrieval_mode": scored.get("retrieval_mode"),
            "retrieval_method": None}


def baseline_cells(run: RunData) -> dict[str, str | None]:
    """cell id -> the cell of the same model without tools and retrieval (or None)."""
    facets = {c: cell_facets(run, c) for c in run.cells()}
    base_of_model: dict[str, str] = {}
    for c, f in facets.items():
        if f["toolset"] == "none" and f["retrieval_mode"] == "none":
            base_of_model.setdefault(f["model"], c)
    return {c: base_of_model.get(f["model"]) for c, f in facets.items()}


_SIZE = re.compile(r"(?<![a-z0-9.])(\d+(?:\.\d+)?)\s*([mb])(?![a-z])", re.IGNORECASE)


def model_engine(run: RunData, cell_id: str) -> dict[str, Any]:
    """How a cell's model ran, from the manifest (backend.describe()): its weights' dtype
    (settings' dtype where the model entry gave one), the path it took and its resident
    size; None where a run does not say (a server, an older run)."""
    info = run.cell_info(cell_id)
    model = info.model or {}
    engine = model.get("engine")
    engine = engine if isinstance(engine, dict) else {}
    return {"dtype": model.get("dtype") or (info.settings.dtype if info.settings else None),
            "activations": model.get("activations"),
            "path": engine.get("path"), "linear": engine.get("linear"),
            "resident_bytes": engine.get("resident_bytes")}


def model_parameters(run: RunData, cell_id: str) -> tuple[float | None, str]:
    """(parameter count, where it came from): the backend's own count recorded in the
    manifest (the cell's `model`, from backend.describe()), else the known count of a
    registered alias, else the nominal size in the model id ("...-270m", "...-1.5B");
    (None, "unknown") otherwise."""
    info = run.cell_info(cell_id)
    settings = info.settings
    model = settings.model if settings is not None else None
    older = info.model_extra or {}  # where runs before the cell's `model` kept the facts
    by_model = (run.manifest.model_extra or {}).get("models")
    candidates = [info.model, older.get("backend"), older.get("facts"),
                  settings.model_extra if settings is not None else None,
                  model.model_extra if isinstance(model, ModelRef) else None,
                  by_model.get(_model_id(model) or "") if isinstance(by_model, dict) else None]
    for c in candidates:
        if isinstance(c, dict) and isinstance(c.get("parameters"), (int, float)):
            return float(c["parameters"]), "backend"
    model_id = cell_facets(run, cell_id)["model"] or ""
    from evalpipe.backends.models import ALIASES  # model facts live with the aliases

    if model_id in ALIASES:
        return float(ALIASES[model_id].parameters), "alias"
    m = _SIZE.search(Path(str(model_id)).name)
    if m:
        scale = 1e6 if m.group(2).lower() == "m" else 1e9
        return float(m.group(1)) * scale, "name"
    return None, "unknown"
