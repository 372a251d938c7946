"""Run configuration: YAML -> RunConfig -> the grid of cells.

A run is the product models x formats x toolsets x retrieval settings, less
the cells that `exclude` rules drop (and those `include` rules do not keep).
Cells without tools ignore the format, so the grid keeps one of them per
model x retrieval instead of one per format.

The schema is declared once, below, as typed sections (pydantic models that
forbid unknown keys). A misspelt key fails with the file, line, field, what was
expected and the closest valid name. The config hash and the manifest come from
the normalised config (`RunConfig.to_dict`), so a config built in Python hashes
like the same config read from YAML. To add a key: add a field to its section.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import itertools
import json
import typing
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evalpipe.backends.base import GenerationSettings
from evalpipe.errors import InputError
from evalpipe.questions import BFCL_SOURCE

RETRIEVAL_MODES = ("none", "prepend", "tool")


def stable_hash(value: Any, n: int = 12) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:n]


# -- the schema ------------------------------------------------------------------------------

class _Section(BaseModel):
    # strict: YAML's "3" stays a string and `true` is no number
    model_config = ConfigDict(extra="forbid", strict=True)


class TransformersModel(_Section):
    id: str
    backend: Literal["transformers"] = "transformers"
    dtype: str = "auto"  # auto | float32 | bfloat16 | float16 (checked by the backend)


class ReplayModel(_Section):
    id: str
    backend: Literal["replay"]
    recording: str  # a samples.jsonl written by an earlier run


class LlamaCppModel(_Section):
    id: str
    backend: Literal["llamacpp"]
    n_ctx: int = 4096
    n_threads: int | None = None
    seed: int = 0
    n_batch: int = 512


class OpenAIModel(_Section):
    """Any OpenAI-compatible server (docs/backends.md); the backend checks the values."""

    id: str
    backend: Literal["openai"]
    base_url: str
    api_key_env: str | None = None  # the key itself never goes into a config
    concurrency: int = 4
    timeout_s: float = 120.0
    max_retries: int = 4
    mode: str = "chat"
    model: str | None = None
    stream: str | bool = "auto"
    backoff_s: float = 0.5
    max_backoff_s: float = 30.0
    chat_template: str | None = None
    stop: list[str] | None = None
    extra_body: dict[str, Any] | None = None
    tool_choice: Any = None


MODEL_SPECS: dict[str, type[_Section]] = {
    "transformers": TransformersModel, "replay": ReplayModel, "llamacpp": LlamaCppModel,
    "openai": OpenAIModel}
ModelEntry = Annotated[Union[TransformersModel, ReplayModel, LlamaCppModel, OpenAIModel],
                       Field(discriminator="backend")]


class BM25Section(_Section):
    variant: str = "lucene"
    k1: float = 1.5
    b: float = 0.75


class RetrievalSection(_Section):
    """One retrieval setting; evalpipe.retrieval.resolve_settings checks the ranges."""

    mode: Literal["none", "prepend", "tool"]
    method: str | None = None  # bm25 | dense | hybrid | weighted
    k: int | None = None  # chunks per query; defaults to the top-level k
    name: str | None = None  # a label for retrieval reports
    bm25: BM25Section | None = None
    bigrams: bool | None = None
    tone_norm: bool | None = None
    fold_accents: bool | None = None
    rrf_k: float | None = None
    weight: float | None = None
    model: str | None = None  # the dense encoder
    depth: int | None = None


class GenerationSection(_Section):
    # The defaults live in GenerationSettings, the one place the engine reads them from.
    max_new_tokens: int = Field(GenerationSettings.max_new_tokens, ge=1)
    temperature: float = Field(GenerationSettings.temperature, ge=0)
    top_p: float = Field(GenerationSettings.top_p, gt=0, le=1)
    seed: int = GenerationSettings.seed
    batch_size: int = Field(GenerationSettings.batch_size, ge=1)


class ChunkingSection(_Section):
    size: int = Field(800, ge=1)  # characters per chunk
    overlap: int = Field(0, ge=0)


class SchemaToolsSection(_Section):
    """What a question's own schema-only tools do when called (docs/bfcl.md)."""

    mode: Literal["call_only", "stub"] = "call_only"  # call_only: the first reply ends it
    result: Any = None  # mode stub: what every schema-only call returns to the model


class ToolLimitsSection(_Section):
    timeout_s: float = Field(5.0, gt=0)
    max_result_chars: int = Field(4000, ge=1)


class GridRule(_Section):
    """An include/exclude rule: every named facet must match (a list matches any of it)."""

    model: str | list[str] | None = None
    format: str | list[str] | None = None
    toolset: str | list[str] | None = None
    retrieval: str | list[str] | None = None  # the mode
    method: str | list[str] | None = None


class JudgeSection(_Section):
    """The model-graded judge (docs/scoring.md, "The judge"): a model entry like those of
    `models:`, where it is used, and whether to measure it on a labelled set."""

    model: ModelEntry
    use: Literal["undecided", "all"] = "undecided"  # where the rules abstain, or everywhere
    max_new_tokens: int = Field(64, ge=1)
    agreement: bool = False  # also measure it on `labels`, into the run's judge.json
    labels: str | None = None  # a labelled set; default tests/data/grading_labels.jsonl


class ConfigSpec(_Section):
    name: str | None = None
    questions: list[str] = Field(min_length=1)
    corpus: str | None = None
    limit: int | None = Field(None, ge=1)  # questions per suite
    suites: list[str] | None = None
    models: list[ModelEntry] = Field(min_length=1)
    formats: list[str] = ["hermes"]
    toolsets: list[str] = ["calculator"]
    custom_tools: list[str] = []
    retrieval: list[RetrievalSection] = Field(min_length=1)
    generation: GenerationSection = GenerationSection()
    max_turns: int = Field(5, ge=1)
    system_prompt: str | None = None
    final_answer_line: bool = False  # ask for a last line "Answer: ..." (docs/scoring.md)
    repeats: int = Field(1, ge=1)  # samples per cell x question (with temperature > 0)
    latency_probe: int = Field(0, ge=0)  # per cell, samples re-run alone to time (probe.jsonl)
    include: list[GridRule] = []
    exclude: list[GridRule] = []
    chunking: ChunkingSection = ChunkingSection()
    tool_limits: ToolLimitsSection = ToolLimitsSection()
    schema_tools: SchemaToolsSection = SchemaToolsSection()
    match: Literal["evalpipe", "bfcl"] = "evalpipe"  # argument rule set (scoring/plan.py)
    k: int = Field(3, ge=1)
    judge: JudgeSection | None = None


# -- the config the rest of the code reads ---------------------------------------------------

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

    def facets(self) -> dict[str, Any]:
        """What include/exclude rules and reports group by."""
        return {"model": self.model["id"], "format": self.format, "toolset": self.toolset,
                "retrieval": self.retrieval["mode"], "method": self.retrieval.get("method")}

    def settings(self) -> dict[str, Any]:
        return {"model": self.model, "format": self.format, "toolset": self.toolset,
                "retrieval": self.retrieval}


@dataclass
class RunConfig:
    """A checked config. Models and retrieval settings stay plain dicts (they are
    recorded with every cell); only keys the user gave are kept in them, plus the
    backend, method and k the grid needs, so existing runs keep their fingerprints."""

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
    final_answer_line: bool = False
    repeats: int = 1
    latency_probe: int = 0
    custom_tools: list[str] = field(default_factory=list)
    chunking: dict[str, int] = field(default_factory=lambda: {"size": 800, "overlap": 0})
    tool_limits: dict[str, float] = field(default_factory=dict)
    schema_tools: dict[str, Any] = field(default_factory=dict)
    match: str = "evalpipe"
    k: int = 3
    include: list[dict[str, Any]] = field(default_factory=list)
    exclude: list[dict[str, Any]] = field(default_factory=list)
    judge: dict[str, Any] | None = None  # JudgeSection, its model entry a plain dict
    source: str = ""

    def __post_init__(self) -> None:
        # The same defaults parse_config fills, so Python-built and YAML configs agree.
        self.models = [{"backend": "transformers", **m} for m in self.models]
        self.retrieval = [_retrieval_defaults(r, self.k) for r in self.retrieval]
        self.chunking = {"size": 800, "overlap": 0, **self.chunking}
        self.tool_limits = {**ToolLimitsSection().model_dump(), **self.tool_limits}
        self.schema_tools = {**SchemaToolsSection().model_dump(), **self.schema_tools}

    def to_dict(self) -> dict[str, Any]:
        """The normalised config: what the manifest records and the hash covers."""
        out = asdict(self)
        del out["source"]
        if out["judge"] is None:  # configs without a judge keep the hash they had
            del out["judge"]
        return out

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
        facts = cell.facets()

        def matches(rule):
            return all(facts.get(k) == v or (isinstance(v, list) and facts.get(k) in v)
                       for k, v in rule.items())

        if self.include and not any(matches(r) for r in self.include):
            return False
        return not any(matches(r) for r in self.exclude)


def _retrieval_defaults(r: dict[str, Any], k: int) -> dict[str, Any]:
    return r if r["mode"] == "none" else {"mode": r["mode"], "method": "bm25", "k": k, **r}


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


def apply_dtype(raw: dict[str, Any], dtype: str) -> dict[str, Any]:
    """--dtype: the weights dtype of every model with a dtype (the transformers ones)."""
    raw = copy.deepcopy(raw)
    models = [{"id": m} if isinstance(m, str) else m
              for m in _as_list(raw.get("models") or [{"id": DEFAULT_MODEL}])]
    raw["models"] = [{**m, "dtype": dtype} if "dtype" in MODEL_SPECS.get(
        m.get("backend", "transformers"), TransformersModel).model_fields else m
        for m in models]
    return raw


DEFAULT_MODEL = "smollm2-135m"


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
    """Check a config mapping against the schema and build the RunConfig.
    `text` (the YAML) lets errors name a line; `overridden` keys came from --set."""
    if not isinstance(raw, dict):
        raise InputError("config is not a mapping", file=source, expected="YAML mapping")
    given = _shape(raw)
    try:
        spec = ConfigSpec.model_validate(given)
    except ValidationError as exc:
        raise _input_error(exc, given, source, text, overridden) from None

    def resolve(p: str) -> str:
        # Paths are relative to the working directory when they exist there, else to the config.
        if p.startswith(BFCL_SOURCE) or Path(p).exists() or Path(p).is_absolute():
            return p
        return str(base / p)

    if spec.corpus is None and any(r.mode != "none" for r in spec.retrieval):
        raise InputError("retrieval is on but no corpus is named", file=source, field="corpus",
                         expected="a folder of documents")
    return RunConfig(
        name=spec.name or Path(source).stem,
        questions=[resolve(p) for p in spec.questions],
        corpus=resolve(spec.corpus) if spec.corpus else None,
        # only the keys given (and the backend): a model entry is recorded with each cell
        models=[{"id": m.id, **m.model_dump(exclude_unset=True)} for m in spec.models],
        formats=spec.formats,
        toolsets=spec.toolsets,
        retrieval=[r.model_dump(exclude_unset=True) for r in spec.retrieval],
        generation=GenerationSettings(**spec.generation.model_dump()),
        max_turns=spec.max_turns,
        limit=spec.limit,
        suites=spec.suites,
        system_prompt=spec.system_prompt,
        final_answer_line=spec.final_answer_line,
        repeats=spec.repeats,
        latency_probe=spec.latency_probe,
        custom_tools=spec.custom_tools,
        chunking=spec.chunking.model_dump(),
        tool_limits=spec.tool_limits.model_dump(),
        schema_tools=spec.schema_tools.model_dump(),
        match=spec.match,
        k=spec.k,
        include=[r.model_dump(exclude_none=True) for r in spec.include],
        exclude=[r.model_dump(exclude_none=True) for r in spec.exclude],
        judge=None if spec.judge is None else {
            **spec.judge.model_dump(exclude={"model"}),
            "model": {"id": spec.judge.model.id,
                      **spec.judge.model.model_dump(exclude_unset=True)},
            "labels": resolve(spec.judge.labels) if spec.judge.labels else None},
        source=source,
    )


def _shape(raw: dict[str, Any]) -> dict[str, Any]:
    """The YAML shorthands the schema does not spell: a scalar for a one-item list,
    `models: [m1]` for [{id: m1}], `retrieval: [none]` for [{mode: none}], and the
    defaults of sections that must not be empty."""
    out = {k: v for k, v in raw.items() if v is not None}
    for key in ("questions", "suites", "formats", "toolsets", "custom_tools", "include",
                "exclude", "models", "retrieval"):
        if key in out:
            out[key] = _as_list(out[key])
    out["models"] = [{"backend": "transformers", **({"id": m} if isinstance(m, str) else m)}
                     if isinstance(m, (str, dict)) else m
                     for m in out.get("models") or [DEFAULT_MODEL]]
    out["retrieval"] = [{"mode": r} if isinstance(r, str) else r
                        for r in out.get("retrieval") or ["none"]]
    judge = out.get("judge")
    if isinstance(judge, dict) and isinstance(judge.get("model"), (str, dict)):
        model = judge["model"]
        out["judge"] = {**judge, "model": {"backend": "transformers",
                                           **({"id": model} if isinstance(model, str)
                                              else model)}}
    for key in ("formats", "toolsets", "generation", "chunking", "tool_limits"):
        if not out.get(key, True):
            del out[key]  # `generation:` with nothing under it means the defaults
    return out


def _input_error(exc: ValidationError, given: dict[str, Any], source: str, text: str | None,
                 overridden: Sequence[str]) -> InputError:
    """The first schema error as an InputError: field path, line, expected, and for an
    unknown key the closest valid name."""
    err = exc.errors()[0]
    loc = [p for p in err["loc"] if not (isinstance(p, str) and p in MODEL_SPECS)]
    dotted = _dotted(loc)
    line = _line_of(text, loc) if text else None
    file = source
    plain = ".".join(map(str, loc))  # how --set spells the path
    if any(plain == k or plain.startswith(k + ".") for k in overridden):
        file, line = f"--set {dotted}", None
    if err["type"] == "extra_forbidden":
        names = sorted(_section_at(given, loc[:-1]).model_fields)
        close = difflib.get_close_matches(str(loc[-1]), names, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        return InputError(f"unknown key {loc[-1]!r}{hint}", file=file, line=line,
                          field=dotted, expected="one of " + ", ".join(names))
    if err["type"] == "union_tag_invalid":
        return InputError(f"unknown backend {err['input'].get('backend')!r}", file=file,
                          line=line, field=dotted + ".backend", expected=" | ".join(MODEL_SPECS))
    got = "missing" if err["type"] == "missing" else f"got {err.get('input')!r}"
    return InputError(got, file=file, line=line, field=dotted or "(top level)",
                      expected=err["msg"].lower().removeprefix("input should be ").removeprefix(
                          "value error, "))


def _dotted(loc: list) -> str:
    """('models', 0, 'dtype') -> models[0].dtype"""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")


def _section_at(given: Any, loc: list) -> type[BaseModel]:
    """The schema class that describes given[loc...] (a model entry's backend picks its)."""
    cls: Any = ConfigSpec
    node = given
    for part in loc:
        node = node[part] if isinstance(part, int) else node.get(part)
        if isinstance(part, str):
            cls = _inner_section(cls.model_fields[part].annotation)
    if cls is None:  # the union of model entries
        cls = MODEL_SPECS.get(node.get("backend", "transformers"), TransformersModel)
    return cls


def _inner_section(annotation: Any) -> type[BaseModel] | None:
    """The section inside list[...] / X | None; None for the union of model entries."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    found = {s for s in map(_inner_section, typing.get_args(annotation)) if s is not None}
    return found.pop() if len(found) == 1 else None


def _line_of(text: str, loc: list) -> int | None:
    """The YAML line of loc (of its nearest enclosing node that the file spells)."""
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            hit = [(k, v) for k, v in node.value if k.value == str(part)]
            if not hit:
                break
            key, node = hit[0]
            if part == loc[-1]:
                return key.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                break
            node = node.value[part]
    return node.start_mark.line + 1 if node is not None else None
