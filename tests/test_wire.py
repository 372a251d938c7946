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
from fake_openai import Cut, Drop, FakeOpenAI, Hang, Json, Stream, chat, question_of, write_config

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


# -- one verdict per fault, streamed or not ------------------------------------------------

def as_events(reply) -> list:
    """The streamed form of a whole reply: each choice's message as a delta (a fault in it
    kept as it is), then usage in a chunk of its own; raw bytes sent as one event."""
    if isinstance(reply, bytes):
        return [reply.replace(b'"message"', b'"delta"')]
    if not isinstance(reply, dict) or not isinstance(reply.get("choices"), list):
        return [reply]
    events = []
    for choice in reply["choices"]:
        if isinstance(choice, dict):
            choice = {("delta" if k == "message" else k): v for k, v in choice.items()}
        events.append({k: v for k, v in reply.items() if k not in ("choices", "usage")}
                      | {"choices": [choice]})
    if "usage" in reply:
        events.append({"choices": [], "usage": reply["usage"]})
    return events


WORDS = chat("The answer is 2.")
EVENTS = as_events(WORDS)
PART = {"choices": [{"delta": {"content": "The answer"}}]}  # no finish_reason yet
# name -> (the whole reply, its streamed forms, the verdict both must get: None for a
# verdict on the answer itself); the streamed forms: server-sent events, and the whole
# reply sent back to a streamed request (a server that ignores `stream`). The first
# kinds are test_the_validator's.
KINDS = {f"hostile-{i}": (Json(reply), [Stream(as_events(reply)), Json(reply)],
                          "malformed_reply" if why else None)
         for i, (reply, why) in enumerate(HOSTILE)}
KINDS |= {
    "well-formed": (Json(WORDS), [Stream(EVENTS), Json(WORDS)], None),
    "a number where an object belongs": (Json({"choices": [{"message": 5}]}),
                                         [Stream([{"choices": [{"delta": 5}]}])],
                                         "malformed_reply"),
    "a choice without a message": (Json({"choices": [{"finish_reason": "stop"}]}),
                                   [Stream([{"choices": [{"finish_reason": "stop"}]}])],
                                   "malformed_reply"),
    "not JSON at all": (Json(b"<html>bad gateway</html>"),
                        [Stream([b"<html>bad gateway</html>"]),
                         Json(b"<html>bad gateway</html>")], "malformed_reply"),
    "an error instead of choices": (Json({"error": {"message": "overloaded"}}),
                                    [Stream([{"error": {"message": "overloaded"}}]),
                                     Json({"error": {"message": "overloaded"}})],
                                    "infra_error"),
    "HTTP 500": (Json({"error": {"message": "boom"}}, status=500),
                 [Json({"error": {"message": "boom"}}, status=500)], "infra_error"),
    "HTTP 429": (Json({"error": {"message": "slow down"}}, status=429),
                 [Json({"error": {"message": "slow down"}}, status=429)], "infra_error"),
    "connection closed without a reply": (Drop(), [Drop()], "infra_error"),
    "connection reset": (Drop(reset=True), [Drop(reset=True)], "infra_error"),
    "cut mid-reply": (Cut(json.dumps(WORDS).encode()[:40]),
                      [Cut(b"data: " + json.dumps(PART).encode() + b"\n\ndata: {\"cho",
                           events=True),
                       Stream([PART], done=False)], "infra_error"),
    "an empty stream": (Cut(b""), [Cut(b"", events=True)], "infra_error"),
    "no answer within timeout_s": (Hang(), [Hang()], "infra_error"),
}


def test_every_kind_has_the_same_verdict_whole_or_streamed_and_retry_infra_asks_only_infra(
        tmp_path):
    """Question i of a run gets kind i, whole (stream off) in one run and in each streamed
    form (stream on) in the others: every sample's category is the kind's in every run,
    and `--resume --retry-infra` asks again exactly the infra_error ones."""
    from fake_openai import FakeOpenAI

    from evalpipe import api

    names = list(KINDS)
    forms = [("off", 0)] + [("on", j) for j in range(max(len(k[1]) for k in KINDS.values()))]
    wrong = []  # (form, kind, what it got, what it should get)
    for stream, j in forms:
        def respond(path, body, stream=stream, j=j):
            numbers = question_of(body).split()
            if len(numbers) < 3 or not numbers[2].isdigit():
                return Json(chat("ok"))  # the served-model probe
            whole, streamed, _ = KINDS[names[int(numbers[2])]]
            return whole if stream == "off" else streamed[min(j, len(streamed) - 1)]

        home = tmp_path / f"{stream}-{j}"
        home.mkdir()
        with FakeOpenAI(respond=respond) as server:
            config = write_config(home, server.url, n=len(names), stream=stream,
                                  concurrency=4, timeout_s=3)
            run_dir = api.run(config, out=home / "o", use_cache=False).run_dir
            asked = {q: len([b for b in server.posts() if question_of(b) == q])
                     for q in {question_of(b) for b in server.posts()}}
            api.run(resume=run_dir, retry_infra=True, use_cache=False)
            again = {q: len([b for b in server.posts() if question_of(b) == q]) - n
                     for q, n in asked.items()}
        scores = json.loads((run_dir / "scores.json").read_text())
        got = {names[int(s["question_id"][1:])]: s["category"] for s in scores["samples"]}
        for i, (name, (_, _, category)) in enumerate(KINDS.items()):
            form = f"stream {stream}" + (f", form {j}" if stream == "on" else "")
            if got[name] != category and (category is not None or got[name] in (
                    "malformed_reply", "infra_error")):
                wrong.append((form, name, got[name], category or "a verdict on the answer"))
            asked_again = again[f"What is {i} plus 1?"] > 0
            if asked_again != (category == "infra_error"):
                wrong.append((form, name, f"asked again: {asked_again}", got[name]))
    assert not wrong, "\n".join(" | ".join(w) for w in wrong)
