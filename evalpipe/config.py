"""Run configuration: YAML -> RunConfig -> the grid of cells.

A run is the product models x formats x toolsets x retrieval settings, less
the cells that `exclude` rules drop (and those `include` rules do not keep).
Cells without tools ignore the format, so the grid keeps one of them per
model x retrieval instead of one per format.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from evalpipe.backends.base import GenerationSettings
from evalpipe.errors import InputError

RETRIEVAL_MODES = ("none", "prepend", "tool")
_TOP_LEVEL = {
    "name", "questions", "corpus", "limit", "suites", "models", "formats", "toolsets",
    "custom_tools", "retrieval", "generation", "max_turns", "system_prompt", "include",
    "exclude", "chunking", "tool_limits", "k",
}


def stable_hash(value: Any, n: int = 12) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:n]


@dataclass
class Cell:
    model: dict[str, Any]
    format: str
    toolset: str
    retrieval: dict[str, Any]

    @property
    def id(self) -> str:
        r = self.retrieval
        rpart = "no-rag" if r["mode"] == "none" else f"{r.get('method', 'bm25')}-{r['mode']}"
        fmt = self.format if self.toolset != "none" else "-"
        return f"{self.model['id']}/{fmt}/{self.toolset}/{rpart}"

    def settings(self) -> dict[str, Any]:
        return {"model": self.model, "format": self.format, "toolset": self.toolset,
                "retrieval": self.retrieval}


@dataclass
class RunConfig:
    name: str
    questions: list[str]
    corpus: str | None
    models: list[dict[str, Any]]
    formats: list[str]
    toolsets: list[str]
    retrieval: list[dict[str, Any]]
    generation: GenerationSettings
    max_turns: int = 5
    limit: int | None = None  # questions per suite
    suites: list[str] | None = None
    system_prompt: str | None = None
    custom_tools: list[str] = field(default_factory=list)
    chunking: dict[str, int] = field(default_factory=lambda: {"size": 800, "overlap": 0})
    tool_limits: dict[str, float] = field(default_factory=dict)
    k: int = 3
    include: list[dict[str, Any]] = field(default_factory=list)
    exclude: list[dict[str, Any]] = field(default_factory=list)
    source: str = ""
    raw: dict[str, Any] = field(default_factory=dict)

    def cells(self) -> list[Cell]:
        cells, seen = [], set()
        for model, fmt, toolset, retrieval in itertools.product(
                self.models, self.formats, self.toolsets, self.retrieval):
            cell = Cell(model, fmt, toolset, retrieval)
            if cell.id in seen or not self._keeps(cell):
                continue
            seen.add(cell.id)
            cells.append(cell)
        if not cells:
            raise InputError("the grid is empty after include/exclude rules", file=self.source,
                             field="exclude", expected="rules that keep at least one cell")
        return cells

    def _keeps(self, cell: Cell) -> bool:
        facts = {"model": cell.model["id"], "format": cell.format, "toolset": cell.toolset,
                 "retrieval": cell.retrieval["mode"], "method": cell.retrieval.get("method")}

        def matches(rule):
            return all(facts.get(k) == v or (isinstance(v, list) and facts.get(k) in v)
                       for k, v in rule.items())

        if self.include and not any(matches(r) for r in self.include):
            return False
        return not any(matches(r) for r in self.exclude)

    def hash(self) -> str:
        return stable_hash(self.raw)


def _as_list(value: Any) -> list:
    return value if isinstance(value, list) else [value]


def _parse_scalar(text: str) -> Any:
    """--set values are YAML scalars or lists: 3, true, [a, b], bm25."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def apply_overrides(raw: dict[str, Any], sets: list[str]) -> dict[str, Any]:
    """Apply --set key.sub=value overrides to the raw config."""
    raw = copy.deepcopy(raw)
    for item in sets:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InputError(f"bad override {item!r}", field="--set", expected="key=value")
        node = raw
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise InputError(f"cannot set {key!r}: {part!r} is not a mapping", field="--set")
        node[leaf] = _parse_scalar(value)
    return raw


def load_config(path: str | Path, sets: list[str] = (), **overrides: Any) -> RunConfig:
    """Read a YAML config, apply CLI overrides, and check every field."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise InputError("config file not found", file=str(path)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise InputError(f"not valid YAML ({getattr(exc, 'problem', exc)})", file=str(path),
                         line=mark.line + 1 if mark else None) from None
    if not isinstance(raw, dict):
        raise InputError("config is not a mapping", file=str(path), expected="YAML mapping")
    raw = apply_overrides(raw, list(sets))
    for key, value in overrides.items():
        if value is not None:
            raw[key] = value
    return parse_config(raw, source=str(path), base=path.parent)


def parse_config(raw: dict[str, Any], source: str = "<config>", base: Path = Path(".")) -> RunConfig:
    def fail(fld: str, message: str, expected: str | None = None):
        raise InputError(message, file=source, field=fld, expected=expected)

    unknown = sorted(set(raw) - _TOP_LEVEL)
    if unknown:
        fail(unknown[0], "unknown key", "one of " + ", ".join(sorted(_TOP_LEVEL)))

    def resolve(p: str) -> str:
        # Paths are relative to the working directory when they exist there, else to the config.
        return p if Path(p).exists() or Path(p).is_absolute() else str(base / p)

    questions = [resolve(p) for p in _as_list(raw.get("questions") or [])]
    if not questions:
        fail("questions", "no question sets", "a path or a list of paths")
    models = []
    for m in _as_list(raw.get("models") or [{"id": "smollm2-135m"}]):
        m = {"id": m} if isinstance(m, str) else dict(m)
        if not isinstance(m.get("id"), str):
            fail("models", f"model entry {m!r} has no id", "{id: NAME, backend: ...}")
        m.setdefault("backend", "transformers")
        models.append(m)
    retrieval = []
    for r in _as_list(raw.get("retrieval") or [{"mode": "none"}]):
        r = {"mode": r} if isinstance(r, str) else dict(r)
        if r.get("mode") not in RETRIEVAL_MODES:
            fail("retrieval", f"mode {r.get('mode')!r}", " | ".join(RETRIEVAL_MODES))
        if r["mode"] != "none":
            r.setdefault("method", "bm25")
            r.setdefault("k", raw.get("k", 3))
        retrieval.append(r)
    gen_raw = raw.get("generation") or {}
    try:
        generation = GenerationSettings(**gen_raw)
    except TypeError as exc:
        fail("generation", str(exc), "max_new_tokens, temperature, top_p, seed, batch_size")
    max_turns = raw.get("max_turns", 5)
    if not isinstance(max_turns, int) or max_turns < 1:
        fail("max_turns", f"got {max_turns!r}", "an integer >= 1")
    limit = raw.get("limit")
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        fail("limit", f"got {limit!r}", "an integer >= 1")
    corpus = raw.get("corpus")
    needs_corpus = any(r["mode"] != "none" for r in retrieval)
    if needs_corpus and not corpus:
        fail("corpus", "retrieval is on but no corpus is named", "a folder of documents")
    return RunConfig(
        name=str(raw.get("name") or Path(source).stem),
        questions=questions,
        corpus=resolve(corpus) if corpus else None,
        models=models,
        formats=[str(f) for f in _as_list(raw.get("formats") or ["hermes"])],
        toolsets=[str(t) for t in _as_list(raw.get("toolsets") or ["calculator"])],
        retrieval=retrieval,
        generation=generation,
        max_turns=max_turns,
        limit=limit,
        suites=_as_list(raw["suites"]) if raw.get("suites") else None,
        system_prompt=raw.get("system_prompt"),
        custom_tools=_as_list(raw.get("custom_tools") or []),
        chunking={"size": 800, "overlap": 0, **(raw.get("chunking") or {})},
        tool_limits=raw.get("tool_limits") or {},
        k=int(raw.get("k", 3)),
        include=_as_list(raw.get("include") or []),
        exclude=_as_list(raw.get("exclude") or []),
        source=source,
        raw=raw,
    )
