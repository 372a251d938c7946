"""The records that flow between stages.

Everything here is plain data: dataclasses that serialise to JSON with
`to_dict`, and TypedDicts (at the end) that say what each field of a record
means once it is read back from samples.jsonl or scores.json. A sample holds
what happened during generation, never a judgement; scores are computed from it
later.

SCHEMA_VERSION is written into the manifest, every sample and every scored
sample. Records without it come from runs made before it existed (version 0);
readers accept them, since every field added later has a default.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, NotRequired, TypedDict

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
# NotRequired: absent in runs written before the field existed.

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


class ScoredWhy(TypedDict):
    """Why a scored sample got its category (ScoredSample.why)."""

    rung: int  # 1-based position of the deciding rule in scoring.CATEGORIES
    reason: str  # the deciding facts, in words
    facts: dict[str, Any]  # every fact of the ladder (scoring.categories.Facts)
    plan: dict[str, Any] | None  # gold steps matched and not; None: no plan applied


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
