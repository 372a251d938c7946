"""The records that flow between stages, and the files of a run directory.

Everything here is plain data: dataclasses that serialise to JSON with
`to_dict`; TypedDicts that say what each field of a record means once it is read
back from samples.jsonl or scores.json; and the manifest. A sample holds what
happened during generation, never a judgement; scores are computed from it later.
manifest.json (`Manifest`) and scores.json (`Scores`) are declared here and read
back through these types (store.read_run_file): a file that does not fit is named
with the field that does not, and keys this version does not know are kept.

SCHEMA_VERSION is written into the manifest, every sample and every scored
sample. Records without it come from runs made before it existed (version 0);
readers accept them, since every field added later has a default.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Annotated, Any, NotRequired

from pydantic import BaseModel, ConfigDict, Field, with_config
from typing_extensions import TypedDict  # pydantic checks these: typing's on Python 3.12 only

SCHEMA_VERSION = 1


def _from_dict(cls, data: dict[str, Any]):
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})


@dataclass
class ToolCall:
    """One tool call as parsed from a reply (or given by a structured API)."""

    name: str
    arguments: dict[str, Any]
    id: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ParseError:
    """A typed reason why (part of) a reply did not parse as a tool call."""

    kind: str  # not_json, unclosed_tag, missing_name, arguments_not_object, ...
    message: str
    snippet: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ParseResult:
    """What a format read out of one reply. Parsing never executes anything."""

    calls: list[ToolCall] = field(default_factory=list)
    errors: list[ParseError] = field(default_factory=list)
    content: str = ""  # the reply with calls and reasoning removed
    reasoning: str = ""  # text inside <think>...</think>
    repaired: bool = False  # the lenient parser fixed something the strict one rejected

    @property
    def attempted(self) -> bool:
        return bool(self.calls or self.errors)


@dataclass
class Generation:
    """One model completion, with its cost."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prefill_ms: float = 0.0  # time to first token
    decode_ms: float = 0.0
    finish_reason: str = "stop"  # stop | length | error | malformed
    tool_calls: list[ToolCall] | None = None  # structured calls (openai backend)
    error: str | None = None  # why it failed (error), or why the reply did not fit (malformed)
    cached: bool = False
    prefix_tokens: int = 0  # prompt tokens served from the shared-prefix store
    prefill_compute_ms: float | None = None  # share of batched prefill time; None: unknown
    model: str | None = None  # the model a server says answered (its reply's `model`)


@dataclass
class ToolEvent:
    """One executed (or refused) tool call."""

    call_id: str
    name: str
    arguments: Any
    result: Any = None
    error: str | None = None  # unknown_tool, invalid_arguments, tool_exception, timeout, ...
    error_message: str = ""
    truncated: bool = False
    ms: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Turn:
    """One generation turn of the agent loop."""

    index: int
    prompt_hash: str
    prompt_chars: int
    raw: str
    calls: list[dict[str, Any]]
    parse_errors: list[dict[str, Any]]
    repaired: bool
    prompt_tokens: int
    completion_tokens: int
    prefill_ms: float
    decode_ms: float
    finish_reason: str
    cached: bool = False
    request_hash: str = ""  # hash of the wire messages + tools, independent of the template
    tool_events: list[dict[str, Any]] = field(default_factory=list)
    strict_errors: list[dict[str, Any]] = field(default_factory=list)
    prefix_tokens: int = 0  # prompt tokens served from the shared-prefix store
    prefill_compute_ms: float | None = None  # share of batched prefill time; None: unknown
    prompt_blocks: list[str] = field(default_factory=list)  # the exact prompt (evalpipe.prompts)
    malformed: str | None = None  # why the server's reply did not fit the wire shape

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RetrievedChunk:
    chunk_id: str
    doc: str
    start: int
    end: int
    rank: int
    score: float
    text: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Sample:
    """Everything that happened for one question in one cell."""

    run_id: str
    cell_id: str
    cell_fingerprint: str
    question_id: str
    suite: str
    settings: dict[str, Any]
    messages: list[dict[str, Any]]
    turns: list[dict[str, Any]]
    retrieved: list[dict[str, Any]]
    final_answer: str
    reasoning: str
    stop_reason: str  # answered | turn_limit | length | infra_error | malformed_reply
    error: str | None = None
    wall_ms: float = 0.0
    repeat: int = 0  # with cell_id and question_id, the sample's identity
    seed: int | None = None  # the repeat's sampling seed; None when decoding was greedy
    # Text of the prompt blocks this sample's turns are the first in the file to use
    # (block id -> text); see evalpipe.prompts.
    prompt_text: dict[str, str] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Sample:
        return _from_dict(cls, data)


# -- records as read back ----------------------------------------------------------------------
# NotRequired: absent in runs written before the field existed. Read back strictly (a
# number is no text, text no number) and keeping the keys a newer version adds.

READ = ConfigDict(strict=True, extra="allow")


@with_config(READ)
class ToolEventRecord(TypedDict):
    """One tool call the loop executed or refused (Turn.tool_events)."""

    call_id: str  # the call's id as the reply gave it, or one the loop made up
    name: str  # the tool asked for, known or not
    arguments: Any  # as parsed; not necessarily a mapping
    result: Any  # what the tool returned (after truncation); None on error
    error: str | None  # unknown_tool | invalid_arguments | tool_exception | timeout | ...
    error_message: str
    truncated: bool  # the result was cut to tool_limits.max_result_chars
    ms: float  # wall time of the call


@with_config(READ)
class TurnRecord(TypedDict):
    """One generation of the agent loop (Sample.turns)."""

    index: int  # 0 for the first reply
    prompt_hash: str  # of the rendered prompt text
    prompt_chars: int
    raw: str  # the reply exactly as generated
    calls: list[dict[str, Any]]  # ToolCall dicts parsed from it
    parse_errors: list[dict[str, Any]]  # ParseError dicts of the lenient parser
    repaired: bool  # the lenient parser fixed what the strict one rejected
    prompt_tokens: int
    completion_tokens: int
    prefill_ms: float  # time to first token
    decode_ms: float
    finish_reason: str  # stop | length | error | malformed
    cached: bool  # the reply came from the generation cache
    request_hash: NotRequired[str]  # wire messages + tools, independent of the template
    tool_events: list[ToolEventRecord]
    strict_errors: NotRequired[list[dict[str, Any]]]  # ParseErrors of the strict parser
    prefix_tokens: NotRequired[int]  # prompt tokens served from the shared-prefix store
    prefill_compute_ms: NotRequired[float | None]  # share of batched prefill; None: unknown
    prompt_blocks: NotRequired[list[str]]  # block ids of the exact prompt (evalpipe.prompts)
    malformed: NotRequired[str | None]  # why the server's reply did not fit the wire shape


@with_config(READ)
class SampleRecord(TypedDict):
    """A line of samples.jsonl: one question in one cell (Sample.to_dict)."""

    run_id: str
    cell_id: str  # model/format/toolset/retrieval
    cell_fingerprint: str  # hash of everything that decides the cell's outputs
    question_id: str
    suite: str
    settings: dict[str, Any]  # the cell's settings (model, format, toolset, retrieval, ...)
    messages: list[dict[str, Any]]  # the whole conversation, system prompt first
    turns: list[TurnRecord]
    retrieved: list[dict[str, Any]]  # RetrievedChunk dicts pasted into the prompt or searched
    final_answer: str  # the last reply's content without calls or reasoning
    reasoning: str  # text inside <think>...</think>
    stop_reason: str  # answered | turn_limit | length | infra_error | malformed_reply
    error: str | None  # the infrastructure error, when stop_reason is infra_error
    wall_ms: float
    repeat: NotRequired[int]  # with cell_id and question_id, the sample's identity
    seed: NotRequired[int | None]  # the repeat's sampling seed; None when greedy
    prompt_text: NotRequired[dict[str, str]]  # prompt blocks this line is the first to use
    schema_version: NotRequired[int]


@with_config(READ)
class ScoredWhy(TypedDict):
    """Why a scored sample got its category (ScoredSample.why)."""

    rung: int  # 1-based position of the deciding rule in scoring.CATEGORIES
    reason: str  # the deciding facts, in words
    facts: dict[str, Any]  # every fact of the ladder (scoring.categories.Facts)
    plan: dict[str, Any] | None  # gold steps matched and not; None: no plan applied


@with_config(READ)
class ScoredSample(TypedDict):
    """A sample of scores.json["samples"]: the judgement of one SampleRecord, exactly the
    keys scoring.score_sample writes (tests/test_scored_sample.py ties the two).

    NotRequired here means: absent when the scorer failed on the sample
    (scoring.run.unscored), which then has category scorer_error and the error in
    `scorer_error` instead.
    """

    run_id: str
    cell_id: str
    question_id: str
    repeat: int  # with cell_id and question_id, the sample's identity
    suite: str
    lang: str
    answer_type: str
    scorer_version: str  # scores of different scorer versions are not compared
    infra: bool  # the infrastructure failed: kept out of every rate
    category: str  # the rung of the category ladder that decided (scoring/categories.py)
    subtype: str | None  # wrong_plan's reason; None for every other category
    flags: list[str]  # findings beside the category (scoring.FLAGS: wrong_language, ...)
    cost: dict[str, Any]  # tokens and milliseconds, in units batching does not change
    schema_version: int
    seed: NotRequired[int | None]  # the repeat's sampling seed; None when greedy
    model: NotRequired[str | None]  # the cell's model id
    format: NotRequired[str | None]
    toolset: NotRequired[str | None]
    retrieval_mode: NotRequired[str]  # none | prepend | tool
    tool_failure: NotRequired[bool]  # a tool failed the plan: kept out of rates like infra
    exact: NotRequired[bool]  # the answer verdict (the judge's where it decided)
    exact_strict: NotRequired[bool]  # exact with no lenient reading
    exact_lenient: NotRequired[bool]
    extracted: NotRequired[Any]  # the number read, the phrase found, or None
    extraction: NotRequired[str]  # the extraction rule that read it (docs/scoring.md)
    verdict_source: NotRequired[str]  # rules | rules_undecided | judge
    judge: NotRequired[dict[str, Any] | None]  # the judgement used; None: no judge
    format_valid: NotRequired[bool | None]  # every attempted call parsed; None: none tried
    format_valid_strict: NotRequired[bool | None]  # ... by the strict parser
    calls_attempted: NotRequired[int]
    calls_valid: NotRequired[int]
    calls_valid_strict: NotRequired[int]
    plan_exact: NotRequired[bool | None]  # the calls match the gold plan; None: no plan
    no_unneeded_call: NotRequired[bool | None]  # empty gold plan: no call; None: not empty
    step_precision: NotRequired[float | None]
    step_recall: NotRequired[float | None]
    plan_failure: NotRequired[str | None]  # the first reason the plan did not match
    plan_failures: NotRequired[list[str]]
    k: NotRequired[int]  # the cutoff of the retrieval metrics
    retrieval: NotRequired[dict[str, float] | None]  # recall@k, MRR, ...; None: no RAG
    why: NotRequired[ScoredWhy]  # the rung, its reason and the facts it read
    scorer_error: NotRequired[str]  # the scorer failed on this sample (category scorer_error)


# k where a config sets none: chunks per query, and the cut-off of the retrieval metrics (a
# run whose config and scores record no k was made with it)
DEFAULT_K = 3


# -- scores.json ---------------------------------------------------------------------------------

@with_config(READ)
class Interval(TypedDict, total=False):
    """A rate or a mean with its 95% interval (scoring.stats)."""

    rate: float | None  # None: nothing to rate
    n: int
    lo: float | None
    hi: float | None


@with_config(READ)
class GroupRecord(TypedDict):
    """A row of scores.json["groups"]: one cell x suite (suite "all" too), as
    scoring.aggregate writes it."""

    cell_id: str
    suite: str
    n: NotRequired[int]
    n_infra: NotRequired[int]
    n_scorer_error: NotRequired[int]
    n_tool_failure: NotRequired[int]
    k: NotRequired[int | list[int] | None]
    rates: NotRequired[dict[str, Interval]]
    categories: NotRequired[dict[str, int]]
    subtypes: NotRequired[dict[str, int]]
    flags: NotRequired[dict[str, int]]
    cost: NotRequired[dict[str, Any]]
    repeats: NotRequired[dict[str, Any] | None]


@with_config(READ)
class UnscoredRecord(TypedDict):
    """A sample the scorer failed on (its ScoredSample has the same error)."""

    cell_id: str
    question_id: str
    repeat: int
    scorer_error: str


@with_config(READ)
class VerdictCounts(TypedDict):
    judge: int  # answer verdicts the judge gave
    judge_models: list[str]
    undecided: int  # the rules left undecided, and no judge decided


@with_config(READ)
class Scores(TypedDict):
    """scores.json: every sample scored, the aggregates per cell x suite, and what the
    scorer could not score; built by scoring.run.scores_of alone."""

    run_id: str | None
    scorer_version: str | None
    k: NotRequired[int]  # the retrieval metrics' cut-off
    schema_version: NotRequired[int]
    groups: list[GroupRecord]
    samples: list[ScoredSample]
    unscored: NotRequired[list[UnscoredRecord]]
    verdicts: NotRequired[VerdictCounts]
    match: NotRequired[str]  # the argument rule set (scoring/plan.py)


# -- manifest.json -------------------------------------------------------------------------------

class _Read(BaseModel):
    model_config = READ


class ModelRef(_Read):
    """A model entry as recorded (its backend's options beside the id)."""

    id: str


class RecordedConfig(_Read):
    """The config as the manifest records it (config.RunConfig.to_dict): the keys readers
    of a run use are typed here; parse_config reads it whole (`as_dict`)."""

    name: str | None = None
    models: list[str | ModelRef] | None = None
    match: str | None = None
    k: Annotated[int, Field(ge=1)] | None = None
    judge: dict[str, Any] | None = None  # the judge section, read again by `evalpipe judge`

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump(exclude_unset=True)


class CellSettings(_Read):
    """A cell's settings as recorded with it and with each of its samples."""

    model: str | ModelRef | None = None
    format: str | None = None
    toolset: str | None = None
    retrieval: dict[str, Any] | None = None
    dtype: str | None = None  # the weights' dtype, where the backend has one


class CellRecord(_Read):
    """A cell of manifest.json["cells"], recorded when the cell starts."""

    fingerprint: str | None = None  # everything that decides the cell's outputs, hashed
    facets: dict[str, str | None] | None = None  # model, format, toolset, retrieval, method
    settings: CellSettings | None = None
    model: dict[str, Any] | None = None  # the backend's facts (Backend.describe)
    served: dict[str, Any] | None = None  # what the server said it runs, where one does

    def settings_dict(self) -> dict[str, Any]:
        return self.settings.model_dump(exclude_unset=True) if self.settings else {}


class Repeats(_Read):
    requested: int | None = None
    seeds: list[int] | None = None  # the sampling seed of each repeat


class Manifest(_Read):
    """manifest.json: what ran, where, with what, and where the run stands. Written by
    the run store's steps alone (store.RunStore: begin, record_cell, warn, finish, end);
    every key a step sets is written, the others are left out."""

    run_id: str
    config: RecordedConfig
    schema_version: int = 0
    # running | finished | interrupted | failed; a run made before statuses were
    # recorded could be read only once it finished
    status: str = "finished"
    config_source: str | None = None
    config_hash: str | None = None
    started: str | None = None
    finished: str | None = None
    ended: str | None = None  # when a run that did not finish stopped
    resumed: list[str] = Field(default_factory=list)  # when it was resumed, each time
    error: str | None = None  # why it did not finish
    versions: dict[str, str | None] = Field(default_factory=dict)
    git_commit: str | None = None
    machine: dict[str, Any] = Field(default_factory=dict)
    corpus_version: str | None = None
    questions: Annotated[int, Field(ge=0)] | None = None  # how many the run holds
    cells: dict[str, CellRecord] = Field(default_factory=dict)
    repeats: Repeats | None = None
    warnings: list[str] = Field(default_factory=list)
    retries: list[dict[str, Any]] = Field(default_factory=list)  # each --retry-infra
    cache: dict[str, Any] | None = None  # the generation cache's hits and misses
    judge: dict[str, Any] | None = None  # what the judge did (evalpipe.judge)
    world_size: int | None = None  # processes of a data-parallel run
    launch: str | None = None  # which launch of it wrote this manifest

    def cell(self, cell_id: str) -> CellRecord:
        """The cell as recorded (empty where it was not)."""
        return self.cells.get(cell_id) or CellRecord()

    def to_dict(self) -> dict[str, Any]:
        """As written: every key a step set (values JSON cannot hold are written as text)."""
        return self.model_dump(exclude_unset=True)
