"""Replies from a recorded samples.jsonl, for tests and re-runs without a model.

The prompt of a replay is the request key of evalpipe.identity (canonical JSON
of the wire messages and tools), so it does not depend on any tokenizer's chat
template; each recorded turn is found by its hash (Turn.request_hash).
"""

from __future__ import annotations

from pathlib import Path

from evalpipe import jsonl
from evalpipe.backends.base import Backend, GenerationSettings, ModelEntry
from evalpipe.errors import InputError
from evalpipe.identity import request_hash, request_key
from evalpipe.records import Generation


class ReplayModel(ModelEntry):
    """A `backend: replay` entry: the recorded run whose replies it serves."""

    recording: str  # a samples.jsonl written by an earlier run

    def load(self) -> Backend:
        return ReplayBackend(self.id, self.recording)


class ReplayBackend(Backend):
    def __init__(self, model_id: str, recording: str | Path):
        self.model_id = model_id
        self.replies: dict[str, dict] = {}
        path = Path(recording)
        if not path.is_file():
            raise InputError("recording not found", file=str(path), field="models.recording",
                             expected="a samples.jsonl written by an earlier run")
        for _, number, sample in jsonl.scan(path):  # a bad line is an InputError naming it
            turns = sample.get("turns") if isinstance(sample, dict) else None
            if not isinstance(turns, list):
                raise InputError("not a sample record", file=str(path), line=number,
                                 expected="a samples.jsonl written by an earlier run")
            for turn in turns:
                if isinstance(turn, dict) and turn.get("request_hash"):
                    self.replies[turn["request_hash"]] = turn

    def describe(self):
        return {"model_id": self.model_id, "backend": "replay", "recorded": len(self.replies)}

    def render(self, messages, tools):
        return request_key(messages, tools)

    def generate(self, prompts, settings: GenerationSettings, progress=None):
        out = []
        for prompt in prompts:
            turn = self.replies.get(request_hash(prompt))
            if turn is None:
                out.append(Generation("", finish_reason="error", error="no recorded reply"))
            else:
                out.append(Generation(turn["raw"], turn.get("prompt_tokens", 0),
                                      turn.get("completion_tokens", 0), turn.get("prefill_ms", 0.0),
                                      turn.get("decode_ms", 0.0), turn.get("finish_reason", "stop"),
                                      error=turn.get("malformed")))
        if progress is not None:
            progress(len(prompts))
        return out
