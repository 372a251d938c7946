"""`evalpipe measure-formats` counts valid call attempts by the scorer's own rule."""

from __future__ import annotations

from helpers import ScriptedBackend, last_user

from evalpipe.measure import run_format, validity
from evalpipe.questions import Question
from evalpipe.scoring.score import score_sample

REPLIES = {
    "good": '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>',
    "unknown tool": '<tool_call>{"name": "teleport", "arguments": {}}</tool_call>',
    "bad arguments": '<tool_call>{"name": "add", "arguments": {"a": "one"}}</tool_call>',
    "repaired": "<tool_call>{'name': 'add', 'arguments': {'a': 1, 'b': 2}}</tool_call>",
    "no call": "The answer is 3.",
}


def test_validity_is_the_scorers_format_validity():
    def reply(prompt: str) -> str:  # one turn per question
        return REPLIES[last_user(prompt)]

    questions = [Question(id=f"q{i}", suite="s", question=text, answer=3)
                 for i, text in enumerate(REPLIES)]
    samples = run_format(ScriptedBackend(reply), "hermes", questions, max_turns=1)
    rates = validity(samples).rates()
    verdicts = [score_sample(s.to_dict(), q) for s, q in zip(samples, questions, strict=True)]
    attempted = [v for v in verdicts if v["format_valid"] is not None]
    assert rates["samples_with_attempts"] == len(attempted) == 4
    assert rates["sample_valid"] == round(sum(v["format_valid"] for v in attempted) / 4, 3)
    assert rates["sample_valid_strict"] == round(
        sum(v["format_valid_strict"] for v in attempted) / 4, 3)
    assert rates["sample_valid"] == 0.5 and rates["sample_valid_strict"] == 0.25
    assert rates["error_kinds"] == {"invalid_arguments": 1, "unknown_tool": 1}
