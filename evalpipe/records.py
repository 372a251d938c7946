"""The records that flow between stages.

Everything here is plain data: dataclasses that serialise to JSON with
`to_dict` and come back with `from_dict`. A sample holds what happened during
generation, never a judgement; scores are computed from it later.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any


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
    finish_reason: str = "stop"  # stop | length | error
    tool_calls: list[ToolCall] | None = None  # structured calls (openai backend)
    error: str | None = None
    cached: bool = False
    prefix_tokens: int = 0  # prompt tokens served from the shared-prefix store
    prefill_compute_ms: float | None = None  # share of batched prefill time; None: unknown


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
    stop_reason: str  # answered | turn_limit | length | infra_error
    error: str | None = None
    wall_ms: float = 0.0
    repeat: int = 0  # with cell_id and question_id, the sample's identity
    seed: int | None = None  # the repeat's sampling seed; None when decoding was greedy
    # Text of the prompt blocks this sample's turns are the first in the file to use
    # (block id -> text); see evalpipe.prompts.
    prompt_text: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Sample:
        return _from_dict(cls, data)
