"""The batched agent loop.

Up to `window` conversations are open at once, all in one generation session
of the backend. When a reply comes back, it is parsed, its tool calls are
validated and run, the results are appended as tool messages and the
conversation's next turn is submitted at once: it joins the running batch
without waiting for the other conversations' turns. A conversation ends when
the model answers without calling a tool, when it runs out of tokens, or after
max_turns generations; the next question then takes its place.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from evalpipe import answer_line
from evalpipe.backends.base import Backend, GenerationSession, GenerationSettings
from evalpipe.formats.base import Format
from evalpipe.identity import request_hash, request_key
from evalpipe.prompts import BlockWriter
from evalpipe.questions import Question
from evalpipe.records import DEFAULT_K, Generation, ParseResult, Sample, ToolCall, Turn
from evalpipe.tools.registry import Toolset, result_text
from evalpipe.tools.schema_only import schema_tool

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful assistant. Answer the user's question in the language it was asked in. "
    "Give the final answer directly and briefly."
)
RAG_INSTRUCTION = (
    "Answer only from the passages below. If they do not contain the answer, say that you "
    "don't know.\n\n{passages}"
)
FORMAT_FEEDBACK = "Your tool call could not be read ({errors}). Fix the call or answer directly."
IMITATION_FEEDBACK = ("Do not write tool responses yourself: call a tool and wait for its result, "
                      "or answer directly.")
MAX_RECORDED_CHARS = 100_000  # a runaway reply is recorded cut, with its full length


def recorded(text: str) -> str:
    if len(text) <= MAX_RECORDED_CHARS:
        return text
    return text[:MAX_RECORDED_CHARS] + f"\n[... cut: {len(text)} characters in all]"


@dataclass
class CellRuntime:
    """Everything the loop needs for one cell."""

    cell_id: str
    fingerprint: str
    settings: dict[str, Any]
    backend: Backend
    fmt: Format
    toolset: Toolset
    generation: GenerationSettings
    max_turns: int = 5
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    final_answer_line: bool = False  # ask for a last line "Answer: ..." in the question's language
    retrieve: Callable[[str, int], list[dict[str, Any]]] | None = None  # prepend mode
    k: int = DEFAULT_K
    repeat: int = 0  # which repeat of the cell this is; `generation` holds its seed
    question_tools: bool = True  # offer each question's own schema-only tools
    call_only: bool = True  # a question with its own tools ends after the first reply


@dataclass
class _Conversation:
    question: Question
    messages: list[dict[str, Any]]
    retrieved: list[dict[str, Any]] = field(default_factory=list)
    turns: list[dict[str, Any]] = field(default_factory=list)
    final_answer: str = ""
    reasoning: str = ""
    stop_reason: str = ""
    error: str | None = None
    started: float = field(default_factory=time.perf_counter)
    ended: float = 0.0
    prompt: str = ""  # the turn waiting for the model, and its backend-independent form
    request: str = ""
    toolset: Toolset | None = None  # the cell's tools plus the question's own; None: the cell's
    schemas: list[dict[str, Any]] | None = None
    blocks: list[str] = field(default_factory=list)  # the prompt as stored (evalpipe.prompts)

    @property
    def done(self) -> bool:
        return bool(self.stop_reason)

    def stop(self, reason: str, error: str | None = None) -> None:
        self.stop_reason, self.error, self.ended = reason, error, time.perf_counter()


def passages_text(chunks: list[dict[str, Any]]) -> str:
    return "\n\n".join(f"[{c['rank']}] ({c['doc']})\n{c['text'].strip()}" for c in chunks)


@dataclass
class _Stream:
    """One cell's conversations in a run: those to open, open and ended."""

    group: int  # its prompts' group in the generation session
    cell: CellRuntime
    todo: Iterator[tuple[int, Question]]
    schemas: list[dict[str, Any]]
    blocks: BlockWriter = field(default_factory=BlockWriter)  # each block in its first sample
    live: dict[int, _Conversation] = field(default_factory=dict)  # question index -> open
    done: dict[int, Sample] = field(default_factory=dict)
    released: int = 0

    def release(self, rest: bool = False) -> list[Sample]:
        """The ended samples whose predecessors have all been released, in order; with
        `rest`, every ended sample (a stopped run dropped some before them)."""
        ready = []
        while self.released in self.done:
            ready.append(self.done.pop(self.released))
            self.released += 1
        if rest:
            ready += [self.done.pop(index) for index in sorted(self.done)]
        for sample in ready:
            sample.prompt_text = self.blocks.claim(sample.turns)
        return ready


class Engine:
    def __init__(self, open_session: Callable[[Backend, GenerationSettings], GenerationSession]
                 | None = None, *, shared: bool = True):
        # Sessions are opened through an injectable function so that a cache can sit in
        # front of the backend.
        self._open = open_session or (lambda backend, gen: backend.session(gen))
        # False: each cell in a session of its own, as before the cells of a model shared
        # one (same records; kept to compare the two).
        self.shared = shared

    def run(self, cell: CellRuntime, questions: Iterable[Question], run_id: str,
            window: int | None = None, progress: Callable[[int], None] | None = None,
            stop: Callable[[], bool] | None = None) -> Iterator[list[Sample]]:
        """Yield samples in question order, each as soon as it and all before it have
        ended (so a run's file has the same order cached or not); `progress` hears of
        each conversation as it ends, for a live progress bar. `window`: conversations
        open at once (default: four batches, so the batch stays full while some
        conversations wait on their tools).

        Once `stop()` is true no conversation starts and none gets another turn: the
        requests in flight come back (a local model stops at its next decode step), the
        conversations that ended are yielded, the others are dropped (run again on
        resume)."""
        heard = None if progress is None else (lambda _, ended: progress(ended))
        return self.run_cells([(cell, questions)], run_id, window, heard, stop)

    def run_cells(self, jobs: Sequence[tuple[CellRuntime, Iterable[Question]]], run_id: str,
                  window: int | None = None,
                  progress: Callable[[int, int], None] | None = None,
                  stop: Callable[[], bool] | None = None) -> Iterator[list[Sample]]:
        """`run` for several cells of one backend and one set of generation settings (the
        cells of a model: other prompts, formats, toolsets and retrieval) in one
        generation session, so that every decode step serves the rows of all of them;
        each cell submits as its own group of prompts (its own shared prefix). Each
        yielded list holds one cell's samples, each cell's in its question order as `run`
        gives them; `progress` hears (the job's index, conversations of it that ended);
        `window` bounds the conversations open per cell; `stop` is `run`'s."""
        cells = [cell for cell, _ in jobs]
        if not cells:
            return
        first = cells[0]
        if any(c.backend is not first.backend or c.generation != first.generation
               for c in cells):
            raise ValueError("cells that share a generation session need one backend and "
                             "the same generation settings")
        if not self.shared and len(jobs) > 1:
            for i, job in enumerate(jobs):
                heard = None if progress is None else (
                    lambda _, ended, i=i: progress(i, ended))
                yield from self.run_cells([job], run_id, window, heard, stop)
            return
        if window is None:
            window = max(64, 4 * first.generation.batch_size)
        stopping = stop or (lambda: False)
        session = self._open(first.backend, first.generation)
        session.should_stop = stopping
        streams = [_Stream(group, cell, iter(enumerate(questions)), cell.toolset.schemas())
                   for group, (cell, questions) in enumerate(jobs)]
        # Session keys number the conversations as they open: with one cell, its question
        # indexes.
        keys = itertools.count()
        opened: dict[Hashable, tuple[_Stream, int]] = {}

        def submit(key: Hashable, c: _Conversation) -> None:
            stream, _ = opened[key]
            cell = stream.cell
            wire, template_tools = cell.fmt.prepare(c.messages, c.schemas or stream.schemas,
                                                    cell.backend.template_supports_tools)
            c.prompt = cell.backend.render(wire, template_tools)
            # The backend-independent form of the prompt, which replay looks replies up by.
            c.request = request_key(wire, template_tools)
            c.blocks = stream.blocks.add(c.prompt)
            session.submit(key, c.prompt, group=stream.group)

        def open_next(stream: _Stream) -> None:
            if stopping():
                return
            item = next(stream.todo, None)
            if item is not None:
                index, q = item
                key = next(keys)
                opened[key] = (stream, index)
                stream.live[index] = self._start(stream.cell, q)
                submit(key, stream.live[index])

        for stream in streams:
            for _ in range(max(1, window)):
                open_next(stream)
        while session.pending:
            ended = [0] * len(streams)
            for key, gen in session.poll():
                stream, index = opened[key]
                cell, c = stream.cell, stream.live[index]
                self._advance(cell, c, gen)
                if not c.done and len(c.turns) >= cell.max_turns:
                    c.stop("turn_limit")
                if c.done:
                    stream.done[index] = self._sample(cell, stream.live.pop(index), run_id)
                    del opened[key]
                    ended[stream.group] += 1
                    open_next(stream)
                elif stopping():
                    del stream.live[index], opened[key]  # no new turn: it runs again on resume
                else:
                    submit(key, c)
            for stream in streams:  # a group of samples per cell
                if ended[stream.group] and progress is not None:
                    progress(stream.group, ended[stream.group])
                ready = stream.release()
                if ready:
                    yield ready
        for stream in streams:  # stopped: those that ended after one that was dropped
            ready = stream.release(rest=True)
            if ready:
                yield ready

    def _start(self, cell: CellRuntime, q: Question) -> _Conversation:
        system = cell.system_prompt
        if cell.final_answer_line:
            system += " " + answer_line.instruction(q.lang)
        retrieved: list[dict[str, Any]] = []
        if cell.retrieve is not None:
            retrieved = [dict(c, source="prepend", query_index=0)
                         for c in cell.retrieve(q.question, cell.k)]
            system += "\n\n" + RAG_INSTRUCTION.format(passages=passages_text(retrieved))
        messages = [{"role": "system", "content": system}, {"role": "user", "content": q.question}]
        c = _Conversation(q, messages, retrieved)
        if cell.question_tools and q.tools:
            c.toolset = cell.toolset.with_tools(*(schema_tool(t) for t in q.tools))
            c.schemas = c.toolset.schemas()
        return c

    def _advance(self, cell: CellRuntime, c: _Conversation, gen: Generation) -> None:
        """Record the reply to the turn `c` was waiting on, run its tool calls or end it."""
        turn = len(c.turns)
        record = Turn(
            index=turn, prompt_hash=request_hash(c.prompt), request_hash=request_hash(c.request),
            prompt_chars=len(c.prompt), raw=recorded(gen.text), calls=[], parse_errors=[],
            repaired=False,
            prompt_tokens=gen.prompt_tokens, completion_tokens=gen.completion_tokens,
            prefill_ms=gen.prefill_ms, decode_ms=gen.decode_ms, finish_reason=gen.finish_reason,
            cached=gen.cached, prefix_tokens=gen.prefix_tokens,
            prefill_compute_ms=gen.prefill_compute_ms, prompt_blocks=c.blocks)
        if gen.finish_reason == "error":
            c.turns.append(record.to_dict())
            c.stop("infra_error", gen.error)
            return
        if gen.finish_reason == "malformed":  # the endpoint's reply did not fit the wire shape
            record.malformed = gen.error or "malformed reply"
            c.turns.append(record.to_dict())
            c.stop("malformed_reply")
            return
        if gen.tool_calls is not None:  # structured calls from an API; the text still holds
            text = cell.fmt.parse(gen.text, lenient=True)  # the answer and any <think> block
            parsed = strict = ParseResult(calls=gen.tool_calls, content=text.content,
                                          reasoning=text.reasoning)
        else:
            cut_off = gen.finish_reason == "length"  # a call open at the end is truncated
            strict = cell.fmt.parse(gen.text, lenient=False, cut_off=cut_off)
            parsed = cell.fmt.parse(gen.text, lenient=True, cut_off=cut_off)
        calls = [ToolCall(call.name, call.arguments, id=f"call_{turn}_{i}")
                 for i, call in enumerate(parsed.calls)]
        record.calls = [call.to_dict() for call in calls]
        record.parse_errors = [e.to_dict() for e in parsed.errors]
        record.strict_errors = [e.to_dict() for e in strict.errors]
        record.repaired = parsed.repaired or (bool(strict.errors) and not parsed.errors)
        c.messages.append({
            "role": "assistant", "content": recorded(gen.text),
            **({"tool_calls": [{"id": call.id, "type": "function",
                                "function": {"name": call.name, "arguments": call.arguments}}
                               for call in calls]} if calls else {}),
        })
        one_shot = c.toolset is not None and cell.call_only  # the first reply is all that is scored
        if calls:
            events = (c.toolset or cell.toolset).execute(calls)
            record.tool_events = [e.to_dict() for e in events]
            for event in events:
                c.messages.append({"role": "tool", "tool_call_id": event.call_id,
                                   "name": event.name, "content": result_text(event)})
                if event.name == "search_site" and isinstance(event.result, list):
                    c.retrieved += [dict(hit, source="tool", query_index=turn)
                                    for hit in event.result if isinstance(hit, dict)]
            if one_shot:
                c.stop("call_only")
        elif parsed.errors and not one_shot:
            kinds = sorted({e.kind for e in parsed.errors})
            feedback = IMITATION_FEEDBACK if kinds == ["imitated_turn"] else \
                FORMAT_FEEDBACK.format(errors=", ".join(kinds))
            c.messages.append({"role": "user", "content": feedback, "format_feedback": True})
        else:
            c.final_answer, c.reasoning = parsed.content, parsed.reasoning
            c.stop("length" if gen.finish_reason == "length" else "answered")
        c.turns.append(record.to_dict())

    @staticmethod
    def _sample(cell: CellRuntime, c: _Conversation, run_id: str) -> Sample:
        return Sample(
            run_id=run_id, cell_id=cell.cell_id, cell_fingerprint=cell.fingerprint,
            question_id=c.question.id, suite=c.question.suite,
            settings=cell.settings if c.toolset is None else {**cell.settings,
                                                              "tools_offered": c.toolset.names},
            messages=c.messages, turns=c.turns, retrieved=c.retrieved,
            final_answer=c.final_answer, reasoning=c.reasoning, stop_reason=c.stop_reason,
            error=c.error, wall_ms=(c.ended - c.started) * 1000, repeat=cell.repeat,
            seed=cell.generation.seed if cell.generation.temperature > 0 else None)
