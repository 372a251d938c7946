"""Reading a run directory for reports and comparisons (read only, never writes)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalpipe.errors import InputError
from evalpipe.questions import Question
from evalpipe.store import RunStore, require_finished, run_status

# Parameter counts of the registered aliases, used when a run's manifest does not
# record the backend's own count (runs written before it did).


@dataclass
class RunData:
    """Everything a report needs from one run directory."""

    path: Path
    manifest: dict[str, Any]
    questions: dict[str, Question]
    samples: list[dict[str, Any]]
    scores: dict[str, Any]
    rescored: bool = False  # scores computed here because scores.json was missing
    audit: dict[str, Any] | None = None  # audit.json, written by `evalpipe audit`
    probe: list[dict[str, Any]] = field(default_factory=list)  # probe.jsonl (latency probe)
    _by_key: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict,
                                                                 repr=False)

    @property
    def run_id(self) -> str:
        return str(self.manifest.get("run_id") or self.scores.get("run_id") or self.path.name)

    @property
    def k(self) -> int:
        return int(self.scores.get("k") or 3)

    def cells(self) -> list[str]:
        """Cell ids in manifest order, then any that only appear in the scores."""
        out = list((self.manifest.get("cells") or {}).keys())
        for s in self.scores.get("samples", []):
            if s["cell_id"] not in out:
                out.append(s["cell_id"])
        return out

    def cell_info(self, cell_id: str) -> dict[str, Any]:
        return (self.manifest.get("cells") or {}).get(cell_id) or {}

    def scored_by_question(self) -> dict[tuple[str, str], list[dict[str, Any]]]:
        """(cell_id, question_id) -> its scored samples, one per repeat, in repeat order."""
        if not self._by_key:
            for s in self.scores.get("samples", []):
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
    manifest = store.read_json("manifest.json")
    require_finished(manifest, store.path, allow_partial)
    questions = store.questions() if (store.path / "questions.jsonl").is_file() else {}
    samples = store.read_samples()
    rescored = False
    if (store.path / "scores.json").is_file() and run_status(manifest) == "finished":
        scores = store.read_json("scores.json")
    else:
        scores = score_in_memory(manifest, questions, samples,
                                 judgements=store.read_judgements())
        rescored = True
    for key in ("groups", "samples"):
        if key not in scores:
            raise InputError(f"scores.json has no '{key}'", file=str(store.path / "scores.json"),
                             expected="the output of `evalpipe score`")
    audit = store.read_json("audit.json") if (store.path / "audit.json").is_file() else None
    probe = list(store.iter_samples(store.path / "probe.jsonl"))
    return RunData(store.path, manifest, questions, samples, scores, rescored, audit, probe)


def score_in_memory(manifest: dict[str, Any], questions: dict[str, Question],
                    samples: list[dict[str, Any]], k: int | None = None,
                    judgements: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    from evalpipe.scoring.run import score_records

    return score_records(manifest, questions, samples, k=k, judgements=judgements)


# -- facts about cells -------------------------------------------------------------------------

def cell_facets(run: RunData, cell_id: str) -> dict[str, Any]:
    """model id, format, toolset and retrieval mode/method of a cell, from the manifest
    settings, else from its scored samples, else parsed from the cell id
    (model/format/toolset/retrieval)."""
    settings = run.cell_info(cell_id).get("settings") or {}
    model = settings.get("model")
    retrieval = settings.get("retrieval") or {}
    facets = {
        "model": (model.get("id") if isinstance(model, dict) else model),
        "format": settings.get("format"),
        "toolset": settings.get("toolset"),
        "retrieval_mode": retrieval.get("mode"),
        "retrieval_method": retrieval.get("method"),
    }
    if any(v is None for k, v in facets.items() if k != "retrieval_method"):
        for s in run.scores.get("samples", []):
            if s["cell_id"] == cell_id:
                m = s.get("model")
                facets["model"] = facets["model"] or (m.get("id") if isinstance(m, dict) else m)
                facets["format"] = facets["format"] or s.get("format")
                facets["toolset"] = facets["toolset"] or s.get("toolset")
                facets["retrieval_mode"] = facets["retrieval_mode"] or s.get("retrieval_mode")
                break
    parts = cell_id.rsplit("/", 3)
    if len(parts) == 4:
        model_id, fmt, toolset, rpart = parts
        facets["model"] = facets["model"] or model_id
        facets["format"] = facets["format"] or fmt
        facets["toolset"] = facets["toolset"] or toolset
        if facets["retrieval_mode"] is None:
            facets["retrieval_mode"] = "none" if rpart == "no-rag" else rpart.split("-")[-1]
    return facets


def baseline_cells(run: RunData) -> dict[str, str | None]:
    """cell id -> the cell of the same model without tools and retrieval (or None)."""
    facets = {c: cell_facets(run, c) for c in run.cells()}
    base_of_model: dict[str, str] = {}
    for c, f in facets.items():
        if f["toolset"] == "none" and f["retrieval_mode"] == "none":
            base_of_model.setdefault(f["model"], c)
    return {c: base_of_model.get(f["model"]) for c, f in facets.items()}


_SIZE = re.compile(r"(?<![a-z0-9.])(\d+(?:\.\d+)?)\s*([mb])(?![a-z])", re.IGNORECASE)


def model_parameters(run: RunData, cell_id: str) -> tuple[float | None, str]:
    """(parameter count, where it came from): the backend's own count recorded in the
    manifest (manifest["cells"][cell]["model"]["parameters"], from backend.describe()), else the known count of a registered alias, else the nominal size in the
    model id ("...-270m", "...-1.5B"); (None, "unknown") otherwise."""
    info = run.cell_info(cell_id)
    settings = info.get("settings") or {}
    model = settings.get("model")
    model = model if isinstance(model, dict) else {}
    candidates = [info.get("model"), info.get("backend"), info.get("facts"), settings,
                  model, (run.manifest.get("models") or {}).get(model.get("id", ""))
                  if isinstance(run.manifest.get("models"), dict) else None]
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
