"""The exact prompt of every turn: stored once per block, re-rendered byte for byte."""

from __future__ import annotations

import json

from helpers import ScriptedBackend

from evalpipe.backends.base import GenerationSettings
from evalpipe.engine import CellRuntime, Engine
from evalpipe.formats import get_format
from evalpipe.prompts import BlockWriter, block_texts, split_blocks, turn_prompt
from evalpipe.questions import Question
from evalpipe.tools import build_toolset


def test_blocks_join_back_to_the_prompt_byte_for_byte():
    for text in ["", "a", "no newline", "x\n\ny\n\n\n", "\r\n\r\n<a>\n<b>\u2028c\n\n",
                 "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ\n\n\n<", "\n<\n<\n"]:
        assert "".join(split_blocks(text)) == text


class Recording(ScriptedBackend):
    """Keeps every prompt it was sent, as the model saw it."""

    def __init__(self, reply):
        super().__init__(reply)
        self.seen: list[str] = []

    def render(self, messages, tools):
        # A chat-template-like rendering: each message opens with a tag on its own line.
        return "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in messages) + "<|assistant|>\n"

    def generate(self, prompts, settings, progress=None):
        self.seen += prompts
        return super().generate(prompts, settings, progress)


def _reply(prompt):
    if "<|user|>\n<tool_response>" not in prompt:
        return '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'
    return "The answer is 5."


def _run(n=12):
    backend = Recording(_reply)
    cell = CellRuntime("m/hermes/calculator/no-rag", "fp", {}, backend, get_format("hermes"),
                       build_toolset("calculator"), GenerationSettings(), max_turns=3)
    questions = [Question(id=f"q{i}", suite="s", question=f"What is 2 + 3? ({i})", answer=5)
                 for i in range(n)]
    samples = [s.to_dict() for ended in Engine().run(cell, questions, "r", window=4)
               for s in ended]
    return backend, samples


def test_each_turn_prompt_is_stored_exactly():
    backend, samples = _run()
    texts = block_texts(samples)
    stored = [turn_prompt(t, texts) for s in samples for t in s["turns"]]
    assert all(p is not None for p in stored)
    assert sorted(stored) == sorted(backend.seen)  # byte-identical, every turn
    assert len(samples[0]["turns"]) == 2


def test_shared_blocks_are_written_once_per_cell():
    _, samples = _run()
    lines = [json.dumps(s, ensure_ascii=False) for s in samples]
    # The tool protocol is written into the prompt only (the transcript does not hold it).
    protocol = max(samples[0]["prompt_text"].values(), key=len)
    assert "add" in protocol and protocol not in samples[0]["messages"][0]["content"]
    assert sum(json.dumps(protocol, ensure_ascii=False)[1:-1] in line for line in lines) == 1
    # Later samples carry only what is new to them: their question and the reply.
    new_text = [sum(map(len, s["prompt_text"].values())) for s in samples[1:]]
    assert max(new_text) < len(protocol) / 2
    # Every block referenced is carried by exactly one sample.
    carried = [bid for s in samples for bid in s["prompt_text"]]
    assert len(carried) == len(set(carried))
    assert set(carried) == {b for s in samples for t in s["turns"] for b in t["prompt_blocks"]}


def test_a_missing_block_gives_no_prompt_rather_than_a_wrong_one():
    writer = BlockWriter()
    ids = writer.add("<a>\nx\n<b>\ny")
    turn = {"prompt_blocks": ids}
    texts = writer.claim([turn])
    assert turn_prompt(turn, texts) == "<a>\nx\n<b>\ny"
    del texts[ids[1]]
    assert turn_prompt(turn, texts) is None
    assert turn_prompt({}, texts) is None  # a run from before prompts were stored


def test_html_browser_carries_each_prompt_block_once(tmp_path):
    import re

    from report_fixtures import make_run_a

    from evalpipe._report.build import build_report
    from evalpipe._report.html import render_html
    from evalpipe._report.load import load_run

    run = load_run(make_run_a(tmp_path / "run-a"))
    writer = BlockWriter()
    shared = "<|system|>\nYou are a calculator </script> & friend.\n"
    for i, sample in enumerate(run.samples[:3]):
        turn = sample["turns"][0]
        turn["prompt_blocks"] = writer.add(shared + f"<|user|>\nquestion {i}\n")
        sample["prompt_text"] = writer.claim([turn])
    page = render_html(run, build_report(run))
    blocks = json.loads(re.search(r'id="prompt-data">(.*?)</script>', page, re.DOTALL).group(1)
                        .replace("\\u003c", "<"))
    assert list(blocks.values()).count(shared) == 1  # three prompts, one copy
    assert "<|user|>\nquestion 2\n" in blocks.values()
    assert "</script> &" not in page  # the model's text cannot close the block
    assert "What the model saw and said" in page
