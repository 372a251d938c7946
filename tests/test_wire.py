"""No reply stops a run: every field of a server's reply is untrusted. Replies that do
not fit the wire shape become a recorded malformed_reply verdict, end to end through
`evalpipe run` against a fake server on 127.0.0.1, and `show`, `report`, `score` and
`--resume` read the result back; `show` and the CLI never print control characters raw."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from fake_openai import FakeOpenAI, Json, Stream, chat, question_of, write_config

from evalpipe.backends.openai_reply import MalformedReply, read_body, tool_calls
from evalpipe.cli.common import terminal_safe

ESC = "\x1b"
DEEP = {"a": 1}
for _ in range(900):
    DEEP = {"a": DEEP}


def call(name, arguments='{"a": 1, "b": 2}'):
    return [{"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}]


# (reply, what the malformed_reply reason names) -- None: a well-formed reply
HOSTILE = [
    (chat("The answer is \ud800."), "a lone surrogate U+D800"),
    (chat("", call("add", '{"a": "\\ud800", "b": 2}')), "a lone surrogate U+D800"),
    (chat("", call({"name": "add"})), "function.name: Input should be a valid string"),
    (chat("", call(["add"])), "function.name: Input should be a valid string"),
    (chat(42), "choices[0].message.content: Input should be a valid string (got int)"),
    (chat(["The answer is 2."]), "choices[0].message.content: Input should be a valid string"),
    (chat({"text": "The answer is 2."}), "choices[0].message.content"),
    (chat("", call("add", DEEP)), "nested deeper than"),
    ({"choices": []}, "choices: empty"),
    ({"choices": [{"message": None}]}, "choices[0]: neither a message nor a text"),
    ({"choices": "yes"}, "choices: Input should be a valid list"),
    ({"choices": [{"message": {"content": "x", "tool_calls": {"0": 1}}}]},
     "tool_calls: Input should be a valid list"),
    (chat("The answer is 2.", usage={"prompt_tokens": "12", "completion_tokens": 3}),
     "usage.prompt_tokens: Input should be a valid integer"),
    (chat("The answer is 2.", usage={"prompt_tokens": -1}), "usage.prompt_tokens"),
    ([1, 2, 3], "the reply is a JSON list, not an object"),
    (b'{"choices": [{"message": {"content": NaN}}]}', "NaN is not a JSON number"),
    (b'{"choices": [{"message": {"content": "\xff\xfe"}}]}', "not UTF-8"),
    (b'{"choices": [', "the reply is not JSON"),
    (b"[" * 5000 + b"]" * 5000, "nested"),
    (chat(f"The answer is {ESC}[2J{ESC}]0;pwned\x07 \x9b31m 2."), None),  # shown, escaped
    ({**chat("The answer is 2."), "system_fingerprint": {"odd": [1]}, "id": 7}, None),
]


def check(raw: bytes) -> None:
    """What the backend checks of a whole reply: its body, then its calls' arguments."""
    body = read_body(raw)
    message = body.choices[0].message
    tool_calls([(c.id or "", c.function.name or "", c.function.arguments or "")
                for c in (message.tool_calls if message else None) or ()], "tool_calls", raw)


@pytest.mark.parametrize("reply, why", HOSTILE, ids=range(len(HOSTILE)))
def test_the_validator_names_what_does_not_fit(reply, why):
    raw = reply if isinstance(reply, bytes) else json.dumps(reply).encode()
    if why is None:
        check(raw)
        return
    with pytest.raises(MalformedReply) as err:
        check(raw)
    assert why in err.value.reason
    err.value.excerpt.encode("utf-8")  # what is kept of it can be written and shown


def evalpipe(*args, env):
    return subprocess.run([sys.executable, "-m", "evalpipe", *map(str, args)],
                          capture_output=True, text=True, env=env, check=False)


def test_hostile_replies_never_stop_a_run_and_everything_reads_the_result(tmp_path):
    """Question i gets hostile reply i; the run finishes, each sample gets a verdict, and
    show, report, score and resume read the run back."""
    def respond(path, body):
        i = int(question_of(body).split()[2])
        reply, _ = HOSTILE[i]
        return Json(reply)

    env = dict(os.environ, EVALPIPE_CACHE=str(tmp_path / "cache"))
    with FakeOpenAI(respond=respond) as server:
        config = write_config(tmp_path, server.url, n=len(HOSTILE))
        res = evalpipe("run", "--config", config, "--out", tmp_path / "o", env=env)
        assert res.returncode == 0, res.stderr
        run_dir = (tmp_path / "o" / "latest").resolve()
        assert "Traceback" not in res.stderr
        scores = json.loads((run_dir / "scores.json").read_text())
        verdicts = {s["question_id"]: s["category"] for s in scores["samples"]}
        assert scores["unscored"] == []
        for i, (_, why) in enumerate(HOSTILE):
            assert (verdicts[f"q{i}"] == "malformed_reply") == (why is not None), (i, verdicts)
        samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text(
            encoding="utf-8").splitlines()]
        for s in samples:
            i = int(s["question_id"][1:])
            if HOSTILE[i][1] is not None:
                assert HOSTILE[i][1] in s["turns"][-1]["malformed"]
                assert s["stop_reason"] == "malformed_reply" and s["error"] is None
        assert "malformed_reply" in (run_dir / "table.md").read_text()

        for i in range(len(HOSTILE)):
            shown = evalpipe("show", run_dir, f"q{i}", env=env)
            assert shown.returncode == 0, shown.stderr
            assert not any(c in shown.stdout for c in (ESC, "\x07", "\x9b")), i
        escaped = evalpipe("show", run_dir, "q19", env=env).stdout
        assert "\\u001b[2J\\u001b]0;pwned\\u0007 \\u009b31m" in escaped
        for args in (["score", run_dir], ["report", run_dir], ["report", run_dir, "--format",
                                                                "html"],
                     ["run", "--resume", run_dir]):
            res = evalpipe(*args, env=env)
            assert res.returncode == 0, (args, res.stderr)
            assert ESC not in res.stdout


def test_a_streamed_reply_is_checked_chunk_by_chunk(tmp_path):
    from evalpipe.backends.base import GenerationSettings
    from evalpipe.backends.openai_backend import OpenAIBackend

    chunks = [
        [{"choices": [{"delta": {"content": "The answer "}}]},
         {"choices": [{"delta": {"content": 42}}]}],
        [{"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"name": {"x": 1}}}]}}]}],
        [{"choices": [{"delta": {"content": "\ud800"}, "finish_reason": "stop"}]}],
        [b"not json at all"],
        [{"choices": [{"delta": {"tool_calls": [{"index": 10_000}]}}]}],
    ]
    replies = iter(chunks)
    with FakeOpenAI(respond=lambda path, body: Stream(next(replies))) as server:
        backend = OpenAIBackend("fake", server.url, stream="on", max_retries=0)
        prompt = backend.render([{"role": "user", "content": "What is 1 plus 1?"}], None)
        gens = [backend.generate([prompt], GenerationSettings())[0] for _ in chunks]
    assert [g.finish_reason for g in gens] == ["malformed"] * len(chunks)
    assert "content: Input should be a valid string" in gens[0].error
    assert "name: Input should be a valid string" in gens[1].error
    assert "lone surrogate" in gens[2].error and "not JSON" in gens[3].error
    assert "index" in gens[4].error


def test_terminal_safe_keeps_text_and_json():
    text = f"Kết quả: 42\ttab\nline {ESC}[31mred\u202etxt\r\ud800"
    safe = terminal_safe(text)
    assert safe == "Kết quả: 42\ttab\nline \\u001b[31mred\\u202etxt\\u000d\\ud800"
    data = json.dumps({"a": "x\x9by"}, ensure_ascii=False)
    assert json.loads(terminal_safe(data)) == {"a": "x\x9by"}  # JSON stays the same JSON
