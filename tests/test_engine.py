"""The agent loop on scripted replies and on a tiny model built in the test."""

from __future__ import annotations

import json
from typing import ClassVar

from helpers import ScriptedBackend

from evalpipe.backends.base import GenerationSession, GenerationSettings
from evalpipe.engine import CellRuntime, Engine
from evalpipe.formats import get_format
from evalpipe.questions import Question
from evalpipe.records import Generation
from evalpipe.tools import build_toolset

Q = Question(id="p1", suite="plan", question="Tính (12 + 30) nhân 7.", answer=294, lang="vi",
             answer_type="number",
             gold_calls=[{"id": "s1", "name": "add", "arguments": {"a": 12, "b": 30}},
                         {"id": "s2", "name": "multiply", "arguments": {"a": "$s1", "b": 7}}])


TOOL_RESULT = "<user><tool_response>"  # how ScriptedBackend renders a tool result turn


def call(name, **args):
    return f'<tool_call>{json.dumps({"name": name, "arguments": args})}</tool_call>'


def cell_for(backend, toolset="calculator", max_turns=5, retrieve=None):
    return CellRuntime("m/hermes/calculator/no-rag", "fp", {"toolset": toolset}, backend,
                       get_format("hermes"), build_toolset(toolset), GenerationSettings(),
                       max_turns=max_turns, retrieve=retrieve)


def run_all(cell, questions, **kw):
    return [s for ended in Engine().run(cell, questions, "run", **kw) for s in ended]


def run_one(backend, **kw):
    (sample,) = run_all(cell_for(backend, **kw), [Q])
    return sample


def test_multi_turn_plan_feeds_tool_results_back():
    def reply(prompt):
        if TOOL_RESULT not in prompt:
            return "I will add first. " + call("add", a=12, b=30)
        if prompt.count(TOOL_RESULT) == 1:
            return call("multiply", a=42, b=7)
        return "Kết quả là 294."

    sample = run_one(ScriptedBackend(reply))
    assert sample.stop_reason == "answered"
    assert sample.final_answer == "Kết quả là 294."
    events = [e for t in sample.turns for e in t["tool_events"]]
    assert [(e["name"], e["result"]) for e in events] == [("add", 42), ("multiply", 294)]
    roles = [m["role"] for m in sample.messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]
    tool_msgs = [m for m in sample.messages if m["role"] == "tool"]
    assert tool_msgs[0]["tool_call_id"] == sample.messages[2]["tool_calls"][0]["id"]
    assert len(sample.turns) == 3


def test_turn_limit_ends_a_loop_that_never_answers():
    sample = run_one(ScriptedBackend(lambda p: call("add", a=1, b=1)), max_turns=3)
    assert sample.stop_reason == "turn_limit"
    assert len(sample.turns) == 3
    assert sample.final_answer == ""


def test_bad_calls_become_tool_errors_not_crashes():
    replies = iter([call("rm_rf", path="/") + call("add", a="x", b=1), "Không biết."])
    sample = run_one(ScriptedBackend(lambda p: next(replies)))
    errors = [e["error"] for e in sample.turns[0]["tool_events"]]
    assert errors == ["unknown_tool", "invalid_arguments"]
    assert "unknown tool" in sample.messages[3]["content"]
    assert sample.stop_reason == "answered"


def test_unparseable_call_gets_format_feedback_and_a_second_chance():
    replies = iter(['<tool_call>{"name": "add", "arguments": </tool_call>', "294"])
    sample = run_one(ScriptedBackend(lambda p: next(replies)))
    assert sample.turns[0]["parse_errors"][0]["kind"] == "not_json"
    assert sample.messages[3]["role"] == "user" and sample.messages[3].get("format_feedback")
    assert sample.final_answer == "294"


def test_backend_failure_is_an_infra_error():
    backend = ScriptedBackend(lambda p: Generation("", finish_reason="error", error="boom"))
    sample = run_one(backend)
    assert sample.stop_reason == "infra_error" and sample.error == "boom"


def test_reasoning_is_kept_apart_from_the_answer():
    sample = run_one(ScriptedBackend(lambda p: "<think>42 * 7</think>294"))
    assert sample.final_answer == "294" and sample.reasoning == "42 * 7"


def test_prepend_retrieval_puts_chunks_in_the_system_prompt():
    chunk = {"chunk_id": "a.md#0-10", "doc": "a.md", "start": 0, "end": 10, "rank": 1,
             "score": 1.5, "text": "Máy chủ Ong Chúa có 64 GB RAM."}
    sample = run_one(ScriptedBackend(lambda p: "64"), retrieve=lambda q, k: [chunk])
    assert "Ong Chúa" in sample.messages[0]["content"]
    assert sample.retrieved[0]["source"] == "prepend" and sample.retrieved[0]["doc"] == "a.md"


def test_finished_conversations_drop_out_and_samples_keep_question_order():
    backend = ScriptedBackend(lambda p: call("add", a=1, b=2) if TOOL_RESULT not in p
                              and "12 + 30" in p else "3")
    other = Question(id="c1", suite="control", question="Say hi", answer="hi")
    ended = list(Engine().run(cell_for(backend), [Q, other], "run"))
    # c1 ended first, but p1 comes first in the questions: both come out once p1 ends
    assert [[s.question_id for s in group] for group in ended] == [["p1", "c1"]]
    assert len(ended[0][0].turns) == 2 and len(ended[0][1].turns) == 1
    assert backend.calls == 3  # 2 prompts in turn 0, only the unfinished one in turn 1


class OneAtATime(GenerationSession):
    """A session that returns one reply per poll, oldest first, and logs what it sees."""

    log: ClassVar[list[str]] = []

    def poll(self):
        key, prompt = self.queue.pop(0)
        self.log.append(f"reply {key} turn {prompt.count(TOOL_RESULT)}")
        return [(key, self.backend.generate([prompt], self.settings)[0])]


def test_a_next_turn_does_not_wait_for_other_conversations():
    backend = ScriptedBackend(lambda p: call("add", a=1, b=2) if TOOL_RESULT not in p else "3")
    OneAtATime.log = []
    questions = [Question(id=f"q{i}", suite="control", question=f"Q{i}", answer="3")
                 for i in range(3)]
    samples = [s for ended in Engine(OneAtATime).run(cell_for(backend), questions, "run")
               for s in ended]
    assert sorted(s.question_id for s in samples) == ["q0", "q1", "q2"]
    # q0's second turn was queued as soon as its first reply came back: it is answered
    # right after the first turns of q1 and q2, ahead of their second turns.
    assert OneAtATime.log == ["reply 0 turn 0", "reply 1 turn 0", "reply 2 turn 0",
                              "reply 0 turn 1", "reply 1 turn 1", "reply 2 turn 1"]


def test_window_bounds_the_open_conversations_and_refills():
    most = 0

    class Counting(GenerationSession):
        def submit(self, key, prompt, group=None):  # each open conversation: one turn queued
            nonlocal most
            super().submit(key, prompt, group)
            most = max(most, len(self.queue))

    backend = ScriptedBackend(lambda p: "3")
    questions = [Question(id=f"q{i}", suite="control", question=f"Q{i}", answer="3")
                 for i in range(10)]
    ended = list(Engine(Counting).run(cell_for(backend), questions, "run", window=4))
    assert sorted(s.question_id for group in ended for s in group) == [f"q{i}" for i in range(10)]
    assert most == 4 and len(ended) == 3  # 4 + 4 + 2, each group refilling the window


def test_tiny_model_runs_through_the_real_backend(tiny_model_dir):
    from evalpipe.backends.transformers_backend import TransformersBackend

    backend = TransformersBackend(str(tiny_model_dir))
    cell = cell_for(backend, max_turns=2)
    cell.generation = GenerationSettings(max_new_tokens=8, batch_size=2)
    qs = [Q, Question(id="c1", suite="control", question="Say hi", answer="hi")]
    samples = run_all(cell, qs)
    for s in samples:
        assert s.stop_reason in {"answered", "length", "turn_limit"}
        turn = s.turns[0]
        assert turn["prompt_tokens"] > 0 and 0 < turn["completion_tokens"] <= 8
        assert turn["prefill_ms"] > 0  # measured: load can only lengthen it
    again = run_all(cell, qs)
    assert [(s.question_id, s.final_answer) for s in again] == \
        [(s.question_id, s.final_answer) for s in samples]  # greedy: same replies, same order


def test_progress_hears_of_each_conversation_as_it_ends():
    backend = ScriptedBackend(lambda p: call("add", a=1, b=2) if TOOL_RESULT not in p
                              and "12 + 30" in p else "3")
    other = Question(id="c1", suite="control", question="Say hi", answer="hi")
    seen = []
    list(Engine().run(cell_for(backend), [Q, other], "run", progress=seen.append))
    assert [n for n in seen if n] == [1, 1]  # one after turn 0, the other after turn 1


def test_a_stop_ends_every_cell_of_a_shared_session_alike():
    """Once stop() is true no cell of a shared session opens a conversation or submits a
    turn; each cell yields what ended (after the first dropped one too), nothing else."""
    import dataclasses

    def reply(prompt):  # the first question of a cell needs a tool, the rest answer at once
        return call("add", a=1, b=2) if "Question 0" in prompt and TOOL_RESULT not in prompt \
            else "Done."

    backend = ScriptedBackend(reply)
    cells = [dataclasses.replace(cell_for(backend), cell_id=name) for name in ("a", "b")]
    questions = [Question(id=f"q{i}", suite="s", question=f"Question {i}", answer="x")
                 for i in range(6)]
    polls, submits_after_stop = [], []

    class Counting(GenerationSession):
        def submit(self, key, prompt, group=None):
            if polls:
                submits_after_stop.append(key)
            super().submit(key, prompt, group)

        def poll(self):
            out = super().poll()
            polls.append(len(out))
            return out

    engine = Engine(Counting)
    ended = list(engine.run_cells([(cell, questions) for cell in cells], "run", window=2,
                                  stop=lambda: bool(polls)))
    assert polls == [4]  # two conversations per cell, one poll, then the stop
    assert submits_after_stop == []
    assert [[(s.cell_id, s.question_id) for s in group] for group in ended] == [
        [("a", "q1")], [("b", "q1")]]  # q0 wanted a tool turn: dropped, run again on resume
    polls.clear()
    everything = [s for group in Engine().run_cells([(cell, questions) for cell in cells],
                                                    "run", window=2) for s in group]
    assert len(everything) == 12
