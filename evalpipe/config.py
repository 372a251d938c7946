"""Run configuration: YAML -> RunConfig -> the grid of cells.

A run is the product models x formats x toolsets x retrieval settings, less
the cells that `exclude` rules drop (and those `include` rules do not keep).
Cells without tools ignore the format, so the grid keeps one of them per
model x retrieval instead of one per format.

The config is declared once, below: `RunConfig` and its typed sections
(evalpipe.schema), built on the sections the rest of the package declares (each
backend's model entry, the retriever settings, the tool limits, the generation
settings). What `parse_config` validates is what the run keeps: there is no second
class to copy it into. Keys and values are checked before anything runs: a misspelt
key or a name that is not in its registry (a format, a toolset, a retrieval method,
a dtype, a backend) fails with the file, line, field, what was expected and the
closest valid name. Paths are resolved, the run's name and each retrieval's k filled
in, while the config is validated. The config hash and the manifest come from the
normalised config (`RunConfig.to_dict`: defaults left out of model and retrieval
entries, `dtype: auto` written as what it resolves to), so spelling a default out
does not change the hash, and a config built in Python hashes like the same config
read from YAML. To add a key: add a field to its section.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from evalpipe.backends import BACKENDS, DEFAULT_BACKEND, AnyModelEntry, ModelEntry
from evalpipe.backends.base import GenerationSettings
from evalpipe.backends.models import DEFAULT_MODEL
from evalpipe.corpus import CHUNK_SIZE
from evalpipe.engine import CellRuntime
from evalpipe.errors import InputError
from evalpipe.formats import FORMATS
from evalpipe.questions import BFCL_SOURCE, QuestionLimits, QuestionSource, lone_surrogate
from evalpipe.questions import FIELDS as QUESTION_FIELDS
from evalpipe.retrieval import RETRIEVERS, RetrieverSettings
from evalpipe.schema import Section, closest, input_error, line_of
from evalpipe.store import run_name_problem
from evalpipe.tools import TOOLSETS, ToolLimits
from evalpipe.tools.builtin import BUILTIN_TOOLS, SEARCH_TOOL, tool_from_callable


def stable_hash(value: Any, n: int = 12) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:n]


# -- the schema ------------------------------------------------------------------------------

def _record(section: BaseModel, always: Sequence[str]) -> dict[str, Any]:
    """A section as recorded and hashed: the `always` keys and every value that is not
    its default, so that spelling a default out changes nothing."""
    return {**{k: getattr(section, k) for k in always},
            **section.model_dump(exclude_defaults=True, exclude_none=True)}


def _resolve(path: str, info: ValidationInfo) -> str:
    """A path of the config: relative to the working folder when it exists there, else
    to the config's folder (the validation context's `base`)."""
    base = (info.context or {}).get("base")
    if base is None or path.startswith(BFCL_SOURCE) or Path(path).exists() \
            or Path(path).is_absolute():
        return path
    return str(Path(base) / path)


RetrievalMode = Literal["none", "prepend", "tool"]  # no retrieval, chunks in the prompt, a tool


class RetrievalSection(RetrieverSettings):
    """One retrieval setting: a mode, and for a mode other than none the retriever."""

    mode: RetrievalMode
    k: int | None = Field(None, ge=1)  # chunks per query; defaults to the top-level k
    name: str | None = None  # a label for retrieval reports

    @property
    def on(self) -> bool:
        return self.mode != "none"

    def record(self) -> dict[str, Any]:
        """As recorded with each cell and hashed: mode, method and k always (for a mode
        other than none), the other settings where they are not the defaults."""
        if not self.on:
            return {"mode": "none", **({"name": self.name} if self.name else {})}
        return _record(self, ("mode", "method", "k"))


class ChunkingSection(Section):
    size: int = Field(CHUNK_SIZE, ge=1)  # characters per chunk
    overlap: int = Field(0, ge=0)

    @model_validator(mode="after")
    def _overlap_below_size(self) -> ChunkingSection:
        if self.overlap >= self.size:
            raise ValueError("an overlap smaller than the chunk size")
        return self


class SchemaToolsSection(Section):
    """What a question's own schema-only tools do when called (docs/bfcl.md)."""

    mode: Literal["call_only", "stub"] = "call_only"  # call_only: the first reply ends it
    result: Any = None  # mode stub: what every schema-only call returns to the model


class ToolLimitsSection(Section):
    # The defaults live in ToolLimits, the limits the tools run under.
    timeout_s: float = Field(ToolLimits.timeout_s, gt=0)
    max_result_chars: int = Field(ToolLimits.max_result_chars, ge=1)


class QuestionLimitsSection(Section):
    # The defaults live in QuestionLimits, the limits question files are read under.
    max_field_bytes: int = Field(QuestionLimits.max_field_bytes, ge=1)
    max_record_bytes: int = Field(QuestionLimits.max_record_bytes, ge=1)
    max_rows: int = Field(QuestionLimits.max_rows, ge=1)

    def limits(self) -> QuestionLimits:
        return QuestionLimits(**self.model_dump())


Format = Annotated[str, FORMATS.check()]
Toolset = Annotated[str, TOOLSETS.check()]
RetrievalMethod = Annotated[str, RETRIEVERS.check()]
# package.module:function, a user's tool (described by a worker when the config is read)
CustomTool = Annotated[str, Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")]


class GridRule(Section):
    """An include/exclude rule: every named facet must match (a list matches any of it)."""

    model: str | list[str] | None = None
    format: Format | list[Format] | None = None
    toolset: Toolset | list[Toolset] | None = None
    retrieval: RetrievalMode | list[RetrievalMode] | None = None  # the mode
    method: RetrievalMethod | list[RetrievalMethod] | None = None

    def matches(self, facets: dict[str, Any]) -> bool:
        return all(facets.get(k) == v or (isinstance(v, list) and facets.get(k) in v)
                   for k, v in self.model_dump(exclude_none=True).items())


class JudgeSection(Section):
    """The model-graded judge (docs/scoring.md, "The judge"): a model entry like those of
    `models:`, where it is used, and whether to measure it on a labelled set."""

    model: AnyModelEntry
    use: Literal["undecided", "all"] = "undecided"  # where the rules abstain, or everywhere
    max_new_tokens: int = Field(64, ge=1)
    agreement: bool = False  # also measure it on `labels`, into the run's judge.json
    labels: str | None = None  # a labelled set; default scoring/labels/grading_labels.jsonl

    @field_validator("labels")
    @classmethod
    def _resolved(cls, path: str | None, info: ValidationInfo) -> str | None:
        return _resolve(path, info) if path else path

    def record(self) -> dict[str, Any]:
        """As recorded and hashed: every key, the model entry as recorded."""
        return {**self.model_dump(exclude={"model"}), "model": self.model.record()}


class QuestionSourceSection(Section):
    """A question file in a shape of its own: which column holds each field, and
    fixed values for fields the file lacks (questions.QuestionSource)."""

    path: str
    fields: dict[str, str] = Field(default_factory=dict)
    values: dict[str, Any] = Field(default_factory=dict)

    @field_validator("path")
    @classmethod
    def _resolved(cls, path: str, info: ValidationInfo) -> str:
        return _resolve(path, info)


# -- the config, and the grid of cells it makes --------------------------------------------

@dataclass
class Cell:
    model: ModelEntry  # the config's entry; its record() is what each sample records
    format: str
    toolset: str
    retrieval: RetrievalSection

    @property
    def id(self) -> str:
        r = self.retrieval
        rpart = f"{r.method}-{r.mode}" if r.on else "no-rag"
        fmt = self.format if self.toolset != "none" else "-"
        return f"{self.model.id}/{fmt}/{self.toolset}/{rpart}"

    def facets(self) -> dict[str, Any]:
        """What include/exclude rules and reports group by."""
        return {"model": self.model.id, "format": self.format, "toolset": self.toolset,
                "retrieval": self.retrieval.mode,
                "method": self.retrieval.method if self.retrieval.on else None}

    def settings(self) -> dict[str, Any]:
        return {"model": self.model.record(), "format": self.format, "toolset": self.toolset,
                "retrieval": self.retrieval.record()}


class RunConfig(Section):
    """A checked config, made by `parse_config` (from YAML, or from a mapping with
    evalpipe.load): every section typed, as the run reads it. Its paths are resolved,
    its name and each retrieval's k filled in; `source` says where it was read."""

    name: str  # the run's folder is named from it (store.run_name_problem)
    questions: list[str | QuestionSourceSection] = Field(min_length=1)
    corpus: str | None = None
    limit: int | None = Field(None, ge=1)  # questions per suite
    suites: list[str] | None = None
    models: list[AnyModelEntry] = Field(min_length=1)
    formats: list[Format] = Field(default_factory=lambda: ["hermes"])
    toolsets: list[Toolset] = Field(default_factory=lambda: ["calculator"])
    custom_tools: list[CustomTool] = Field(default_factory=list)
    retrieval: list[RetrievalSection] = Field(min_length=1)
    generation: GenerationSettings = GenerationSettings()
    max_turns: int = Field(CellRuntime.max_turns, ge=1)  # the agent loop's default
    system_prompt: str | None = None
    final_answer_line: bool = False  # ask for a last line "Answer: ..." (docs/scoring.md)
    repeats: int = Field(1, ge=1)  # samples per cell x question (with temperature > 0)
    latency_probe: int = Field(0, ge=0)  # per cell, samples re-run alone to time (probe.jsonl)
    include: list[GridRule] = Field(default_factory=list)
    exclude: list[GridRule] = Field(default_factory=list)
    chunking: ChunkingSection = ChunkingSection()
    tool_limits: ToolLimitsSection = ToolLimitsSection()
    # how the question files are read; not hashed (to_dict)
    question_limits: QuestionLimitsSection = QuestionLimitsSection()
    schema_tools: SchemaToolsSection = SchemaToolsSection()
    match: Literal["evalpipe", "bfcl"] = "evalpipe"  # argument rule set (scoring/plan.py)
    k: int = Field(CellRuntime.k, ge=1)  # chunks per query, the loop's default
    judge: JudgeSection | None = None
    _source: str = PrivateAttr("<config>")

    @model_validator(mode="before")
    @classmethod
    def _named(cls, raw: Any, info: ValidationInfo) -> Any:
        """A config without a name takes its file's (made a plain folder name)."""
        if isinstance(raw, dict) and raw.get("name") is None:
            raw = {**raw, "name": _name_from((info.context or {}).get("source", "run"))}
        return raw

    @field_validator("name")
    @classmethod
    def _plain_name(cls, name: str) -> str:
        problem = run_name_problem(name)
        if problem:
            raise ValueError(problem)
        return name

    @field_validator("questions")
    @classmethod
    def _question_paths(cls, entries: list[str | QuestionSourceSection], info: ValidationInfo
                        ) -> list[str | QuestionSourceSection]:
        return [_resolve(e, info) if isinstance(e, str) else e for e in entries]

    @field_validator("corpus")
    @classmethod
    def _corpus_path(cls, path: str | None, info: ValidationInfo) -> str | None:
        return _resolve(path, info) if path else path

    @model_validator(mode="after")
    def _filled_in(self, info: ValidationInfo) -> RunConfig:
        for r in self.retrieval:  # a retrieval without its own k takes the config's
            if r.k is None:
                r.k = self.k
        self._source = (info.context or {}).get("source", "<config>")
        return self

    @property
    def source(self) -> str:
        return self._source

    def sources(self) -> list[str | QuestionSource]:
        """The `questions` entries as the question readers take them."""
        return [e if isinstance(e, str) else QuestionSource(e.path, e.fields, e.values)
                for e in self.questions]

    def to_dict(self) -> dict[str, Any]:
        """The normalised config: what the manifest records and the hash covers."""
        # the question limits only decide whether a file is read: the questions read are
        # the same, so a run keeps its hash (and resumes) whatever limits it ran under
        out = self.model_dump(exclude={"question_limits"} | ({"judge"} if self.judge is None
                                                              else set()))
        out["questions"] = [q if isinstance(q, str) else q.model_dump(exclude_defaults=True)
                            for q in self.questions]
        out["models"] = [m.record() for m in self.models]
        out["retrieval"] = [r.record() for r in self.retrieval]
        for key in ("include", "exclude"):
            out[key] = [r.model_dump(exclude_none=True) for r in getattr(self, key)]
        if self.judge is not None:  # configs without a judge keep the hash they had
            out["judge"] = self.judge.record()
        return copy.deepcopy(out)

    def hash(self) -> str:
        return stable_hash(self.to_dict())

    def repeat_seeds(self) -> list[int]:
        """The sampling seed of each repeat: the configured seed first (so `repeats: 1` is
        the run of before), then seeds hashed from it, so that runs with different seeds
        share no repeat. Greedy decoding gives the same reply every time: one repeat."""
        if self.generation.temperature <= 0:
            return [self.generation.seed]
        return [self.generation.seed] + [
            int(stable_hash([self.generation.seed, r], n=8), 16) & 0x7FFFFFFF
            for r in range(1, self.repeats)]

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
        facets = cell.facets()
        if self.include and not any(r.matches(facets) for r in self.include):
            return False
        return not any(r.matches(facets) for r in self.exclude)


# -- reading a config ------------------------------------------------------------------------

def _as_list(value: Any) -> list:
    return value if isinstance(value, list) else [value]


def _parse_scalar(text: str) -> Any:
    """--set values are YAML scalars or lists: 3, true, [a, b], bm25."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def apply_overrides(raw: dict[str, Any], sets: list[str]) -> dict[str, Any]:
    """Apply --set key.sub=value overrides to the raw config (a number indexes a list:
    models.0.dtype=bfloat16)."""
    raw = copy.deepcopy(raw)
    for item in sets:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InputError(f"bad override {item!r}", field="--set", expected="key=value")
        node: Any = raw
        *parents, leaf = key.split(".")
        for part in parents:
            if isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            elif isinstance(node, dict):
                node = node.setdefault(part, {})
            else:
                raise InputError(f"cannot set {key!r}: {part!r} is not a mapping",
                                 field="--set", expected="a key path into the config")
        if not isinstance(node, dict):
            raise InputError(f"cannot set {key!r}: not a mapping", field="--set")
        node[leaf] = _parse_scalar(value)
    return raw


def question_limits(sets: Sequence[str]) -> QuestionLimits:
    """The question limits that `--set question_limits.KEY=N` gives without a config
    (`evalpipe validate FILE`), checked like the config's section."""
    raw = apply_overrides({}, list(sets))
    other = sorted(set(raw) - {"question_limits"})
    if other:
        raise InputError(f"--set {other[0]} without a config", field="--set",
                         expected="question_limits.KEY=N, or --config with the config")
    given = raw.get("question_limits") or {}
    try:
        section = QuestionLimitsSection.model_validate(given)
    except ValidationError as exc:
        raise input_error(exc, QuestionLimitsSection, prefix="question_limits",
                          overridden=list(given) if isinstance(given, dict) else []) from None
    return section.limits()


def apply_dtype(raw: dict[str, Any], dtype: str) -> dict[str, Any]:
    """--dtype: the weights dtype of every model with a dtype (the transformers ones)."""
    raw = copy.deepcopy(raw)
    models = [{"id": m} if isinstance(m, str) else m
              for m in _as_list(raw.get("models") or [{"id": DEFAULT_MODEL}])]
    raw["models"] = [{**m, "dtype": dtype} if isinstance(m, dict) and _has_dtype(m) else m
                     for m in models]
    return raw


def _has_dtype(model: dict[str, Any]) -> bool:
    kind = model.get("backend", DEFAULT_BACKEND)  # an unknown one is named by the schema
    return kind in BACKENDS and "dtype" in BACKENDS[kind].model_fields


def load_config(path: str | Path, sets: list[str] | tuple[str, ...] = (), *,
                dtype: str | None = None, **overrides: Any) -> RunConfig:
    """Read a YAML config, apply CLI overrides (--limit, --models, --suites as
    `overrides`, then --set, then --dtype), and check every field."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        raw = yaml.safe_load(text) or {}
    except FileNotFoundError:
        raise InputError("config file not found", file=str(path)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise InputError(f"not valid YAML ({getattr(exc, 'problem', exc)})", file=str(path),
                         line=mark.line + 1 if mark else None) from None
    if not isinstance(raw, dict):
        raise InputError("config is not a mapping", file=str(path), expected="YAML mapping")
    for key, value in overrides.items():
        if value is not None:
            raw[key] = value
    raw = apply_overrides(raw, list(sets))
    if dtype:
        raw = apply_dtype(raw, dtype)
    return parse_config(raw, source=str(path), base=path.parent, text=text,
                        overridden=[s.partition("=")[0] for s in sets])


def parse_config(raw: dict[str, Any], source: str = "<config>", base: Path = Path("."), *,
                 text: str | None = None, overridden: Sequence[str] = ()) -> RunConfig:
    """Check a config mapping against the schema: the RunConfig. Relative paths resolve
    against `base` (the config's folder); `text` (the YAML) lets errors name a line;
    `overridden` keys came from --set."""
    if not isinstance(raw, dict):
        raise InputError("config is not a mapping", file=source, expected="YAML mapping")
    broken = lone_surrogate(raw)  # YAML and --set can spell "\ud800" too: no request holds it
    if broken:
        loc = [int(p[1:-1]) if p.startswith("[") else p
               for p in re.findall(r"\[\d+\]|[^.\[\]]+", broken[0])]
        raise InputError(broken[1], file=source, line=line_of(text, loc) if text else None,
                         field=broken[0], expected="valid Unicode text")
    given = _shape(raw)
    try:
        config = RunConfig.model_validate(given, context={"source": source, "base": base})
    except ValidationError as exc:
        raise input_error(exc, RunConfig, file=source, text=text, overridden=overridden,
                          data=given) from None
    _check_question_mappings(config.questions, source, text)
    if config.corpus is None and any(r.on for r in config.retrieval):
        raise InputError("retrieval is on but no corpus is named", file=source, field="corpus",
                         expected="a folder of documents")
    _check_custom_tools(config, source, text)
    return config


def _check_question_mappings(entries: list[str | QuestionSourceSection], source: str,
                             text: str | None) -> None:
    """Every field a question mapping names is a field of a question record."""
    for i, entry in enumerate(entries):
        if isinstance(entry, str):
            continue
        for part, names in (("fields", entry.fields), ("values", entry.values)):
            for name in names:
                if name in QUESTION_FIELDS:
                    continue
                raise InputError(f"unknown question field {name!r}"
                                 f"{closest(name, QUESTION_FIELDS)}", file=source,
                                 line=line_of(text, ["questions", i, part, name])
                                 if text else None, field=f"questions[{i}].{part}.{name}",
                                 expected="one of " + ", ".join(QUESTION_FIELDS))


def _name_from(source: str) -> str:
    """A run name from the config's file name, made a plain folder name."""
    return re.sub(r"[^\w.-]+", "-", Path(source).stem).strip(".-") or "run"


def _check_custom_tools(spec: RunConfig, source: str, text: str | None) -> None:
    """Describe each custom tool (its module is imported in a worker process, never in
    this one) and refuse a name that another tool of the run already has."""
    taken = {tool.name for toolset in spec.toolsets for tool in TOOLSETS[toolset]}
    if any(r.mode == "tool" for r in spec.retrieval):
        taken.add(SEARCH_TOOL)
    for i, entry in enumerate(spec.custom_tools):
        line = line_of(text, ["custom_tools", i]) if text else None
        field = f"custom_tools[{i}]"
        name = tool_from_callable(entry, file=source, line=line, field=field).name
        if name in taken:
            known = "a built-in tool" if name in BUILTIN_TOOLS or name == SEARCH_TOOL else \
                "another custom tool"
            raise InputError(f"tool name {name!r} is taken by {known}", file=source, line=line,
                             field=field, expected="a function named apart from the run's "
                             "other tools")
        taken.add(name)


def _shape(raw: dict[str, Any]) -> dict[str, Any]:
    """The YAML shorthands the schema does not spell: a scalar for a one-item list,
    `models: [m1]` for [{id: m1}], `retrieval: [none]` for [{mode: none}], and the
    defaults of sections that must not be empty."""
    out = {k: v for k, v in raw.items() if v is not None}
    for key in ("questions", "suites", "formats", "toolsets", "custom_tools", "include",
                "exclude", "models", "retrieval"):
        if key in out:
            out[key] = _as_list(out[key])
    out["models"] = [{"id": m} if isinstance(m, str) else m
                     for m in out.get("models") or [DEFAULT_MODEL]]
    out["retrieval"] = [{"mode": r} if isinstance(r, str) else r
                        for r in out.get("retrieval") or ["none"]]
    judge = out.get("judge")
    if isinstance(judge, dict) and isinstance(judge.get("model"), str):
        out["judge"] = {**judge, "model": {"id": judge["model"]}}
    for key in ("formats", "toolsets", "generation", "chunking", "tool_limits",
                "question_limits"):
        if not out.get(key, True):
            del out[key]  # `generation:` with nothing under it means the defaults
    return out


__all__ = ["Cell", "RetrievalSection", "RunConfig", "apply_dtype", "apply_overrides",
           "load_config", "parse_config", "stable_hash"]
