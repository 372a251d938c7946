"""The OpenAI-compatible backend against a tiny stub HTTP server on 127.0.0.1.

The stub answers Chat Completions and Completions (streaming or not), and can
be told to fail N times first (429, 500, a hang, a dropped connection), so
retries, backoff, timeouts and errors are tested without any model. The tests
against a real llama.cpp server are in test_llamacpp_server.py.
"""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from helpers import FakeClock

from evalpipe.backends import http_client, load_backend
from evalpipe.backends.base import GenerationSettings
from evalpipe.backends.openai_backend import OpenAIBackend, wire_messages
from evalpipe.errors import InputError

GEN = GenerationSettings(max_new_tokens=32)
KEY = "sk-test-4f1d2c9b8a7e6d5c"


class Stub:
    """What the stub server does; tests change its fields."""

    def __init__(self):
        self.failures: list = []  # consumed one per request: an int status, "hang" or "drop"
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.paths: list[str] = []
        self.usage_in_stream = True
        self.reply = lambda body: ("The answer is 42.", None)  # (text, tool_calls | None)
        self.before_reply = lambda body: None  # runs in the handler: a barrier, an event
        self.release = threading.Event()  # a "hang" lasts until the test ends
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        self.retry_after: str | None = None


def _handler(stub: Stub):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _json(self, status, data, extra=None):
            raw = json.dumps(data).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(raw)

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with stub.lock:
                stub.requests.append(body)
                stub.headers.append(dict(self.headers))
                stub.paths.append(self.path)
                failure = stub.failures.pop(0) if stub.failures else None
                stub.in_flight += 1
                stub.max_in_flight = max(stub.max_in_flight, stub.in_flight)
            try:
                stub.before_reply(body)
                if failure == "hang":
                    stub.release.wait(60)  # the bound only ends a stub the test forgot
                    return
                if failure == "drop":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if isinstance(failure, int):
                    extra = {"Retry-After": stub.retry_after} if stub.retry_after else None
                    self._json(failure, {"error": {"message": f"stub failure {failure}"}}, extra)
                    return
                self._answer(body)
            finally:
                with stub.lock:
                    stub.in_flight -= 1

        def _answer(self, body):
            text, calls = stub.reply(body)
            chat = self.path.endswith("/chat/completions")
            usage = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
            if not body.get("stream"):
                if chat:
                    message = {"role": "assistant", "content": text}
                    if calls:
                        message["tool_calls"] = calls
                    choice = {"index": 0, "message": message,
                              "finish_reason": "tool_calls" if calls else "stop"}
                else:
                    choice = {"index": 0, "text": text, "finish_reason": "stop"}
                self._json(200, {"id": "x", "choices": [choice], "usage": usage})
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True

            def send(data):
                self.wfile.write(b"data: " + json.dumps(data).encode() + b"\n\n")
                self.wfile.flush()

            if chat:
                send({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})
                for word in (text or "").split(" "):
                    if word:
                        send({"choices": [{"index": 0, "delta": {"content": word + " "}}]})
                for i, call in enumerate(calls or []):
                    args = call["function"]["arguments"]
                    half = len(args) // 2
                    send({"choices": [{"index": 0, "delta": {"tool_calls": [
                        {"index": i, "id": call["id"], "type": "function",
                         "function": {"name": call["function"]["name"],
                                      "arguments": args[:half]}}]}}]})
                    send({"choices": [{"index": 0, "delta": {"tool_calls": [
                        {"index": i, "function": {"arguments": args[half:]}}]}}]})
                send({"choices": [{"index": 0, "delta": {},
                                   "finish_reason": "tool_calls" if calls else "stop"}]})
            else:
                for word in text.split(" "):
                    send({"choices": [{"index": 0, "text": word + " "}]})
                send({"choices": [{"index": 0, "text": "", "finish_reason": "stop"}]})
            if stub.usage_in_stream and (body.get("stream_options") or {}).get("include_usage"):
                send({"choices": [], "usage": usage})
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

    return Handler


@pytest.fixture
def stub():
    state = Stub()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    yield state
    state.release.set()
    server.shutdown()
    server.server_close()


def backend(stub, **kw) -> OpenAIBackend:
    kw.setdefault("backoff_s", 0.01)
    kw.setdefault("max_backoff_s", 0.05)
    return OpenAIBackend("stub-model", stub.url, **kw)


def prompt(b: OpenAIBackend, question="What is 6 times 7?", tools=None) -> str:
    return b.render([{"role": "system", "content": "Be brief."},
                     {"role": "user", "content": question}], tools)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


ADD_TOOL = {"type": "function", "function": {
    "name": "add", "description": "a + b",
    "parameters": {"type": "object", "properties": {"a": {"type": "number"},
                                                    "b": {"type": "number"}},
                   "required": ["a", "b"]}}}


# -- rendering ---------------------------------------------------------------------------------

def test_render_is_canonical_json_in_chat_completions_shape():
    b = OpenAIBackend("m", "http://127.0.0.1:9/v1")
    messages = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_0_0", "type": "function", "function": {"name": "add",
                                                                 "arguments": {"a": 1, "b": 2}}},
            {"id": "call_0_1", "type": "function",
             "function": {"name": "add", "arguments": '{"a": 3, "b": 4}'}}]},
        {"role": "tool", "tool_call_id": "call_0_0", "name": "add", "content": "3"},
        {"role": "tool", "tool_call_id": "call_0_1", "name": "add", "content": "7"},
        {"role": "user", "content": "again", "format_feedback": True},
    ]
    text = b.render(messages, [ADD_TOOL["function"]])
    data = json.loads(text)
    assert text == json.dumps(data, sort_keys=True, ensure_ascii=False)  # canonical
    assert data["model"] == "m" and data["mode"] == "chat"
    assert data["tools"] == [ADD_TOOL]  # bare function definitions are wrapped
    calls = data["messages"][2]["tool_calls"]
    assert [c["id"] for c in calls] == ["call_0_0", "call_0_1"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"a": 1, "b": 2}
    assert calls[1]["function"]["arguments"] == '{"a": 3, "b": 4}'
    assert data["messages"][3] == {"role": "tool", "tool_call_id": "call_0_0", "content": "3"}
    assert "format_feedback" not in data["messages"][5]
    assert b.render(messages, [ADD_TOOL]) == text  # same prompt, same cache key
    assert b.template_supports_tools


def test_wire_messages_never_sends_null_content():
    out = wire_messages([{"role": "assistant", "content": None,
                          "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": {}}}]}])
    assert out[0]["content"] == "" and out[0]["tool_calls"][0]["function"]["arguments"] == "{}"


# -- chat, streaming, tool calls ---------------------------------------------------------------

def test_streamed_chat_reply_has_usage_and_time_to_first_token(stub):
    b = backend(stub)
    [gen] = b.generate([prompt(b)], GEN)
    assert gen.finish_reason == "stop" and gen.error is None
    assert gen.text.strip() == "The answer is 42."
    assert (gen.prompt_tokens, gen.completion_tokens) == (11, 7)
    assert gen.prefill_ms > 0 and gen.decode_ms >= 0  # measured: load can only lengthen them
    assert gen.tool_calls is None  # plain text: the format parses it
    sent = stub.requests[0]
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert sent["temperature"] == 0.0 and sent["max_tokens"] == 32 and sent["seed"] == 0
    assert sent["messages"][1] == {"role": "user", "content": "What is 6 times 7?"}


@pytest.mark.parametrize("stream", ["on", "off"])
def test_structured_parallel_tool_calls_come_back_with_ids(stub, stream):
    calls = [{"id": "call_a", "type": "function",
              "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}},
             {"id": "call_b", "type": "function",
              "function": {"name": "add", "arguments": '{"a": 3, "b": 4}'}}]
    stub.reply = lambda body: ("", calls)
    b = backend(stub, stream=stream)
    [gen] = b.generate([prompt(b, tools=[ADD_TOOL])], GEN)
    assert gen.error is None, gen.error
    assert [(c.id, c.name, c.arguments) for c in gen.tool_calls] == [
        ("call_a", "add", {"a": 1, "b": 2}), ("call_b", "add", {"a": 3, "b": 4})]
    assert stub.requests[0]["tools"] == [ADD_TOOL]


def test_arguments_that_are_not_a_json_object_stay_a_string(stub):
    stub.reply = lambda body: ("", [{"id": "c", "type": "function",
                                     "function": {"name": "add", "arguments": "{a: 1"}}])
    b = backend(stub, stream="off")
    [gen] = b.generate([prompt(b, tools=[ADD_TOOL])], GEN)
    assert gen.tool_calls[0].arguments == "{a: 1"  # the tool check reports invalid_arguments


def test_stream_without_usage_falls_back_to_plain_requests(stub):
    stub.usage_in_stream = False
    b = backend(stub)
    first = b.generate([prompt(b)], GEN)[0]
    second = b.generate([prompt(b, "again")], GEN)[0]
    assert (first.prompt_tokens, second.prompt_tokens) == (11, 11)
    assert [r["stream"] for r in stub.requests] == [True, False, False]


def test_text_mode_uses_completions_with_a_chat_template(stub):
    b = backend(stub, mode="text")
    p = prompt(b)
    assert json.loads(p)["prompt"] == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n"
                                       "What is 6 times 7?<|im_end|>\n<|im_start|>assistant\n")
    [gen] = b.generate([p], GEN)
    assert gen.text.strip() == "The answer is 42." and gen.completion_tokens == 7
    assert stub.paths == ["/v1/completions"]
    assert stub.requests[0]["stop"] == ["<|im_end|>"]
    assert not b.template_supports_tools  # the hermes protocol goes into the prompt


# -- retries, timeouts, dead servers ---------------------------------------------------------

def test_429_and_500_are_retried_with_backoff_then_answered(stub, monkeypatch):
    clock = FakeClock()  # records the waits instead of waiting
    monkeypatch.setattr(http_client, "time", clock)
    stub.failures = [429, 500, 503]
    b = backend(stub, max_retries=4, stream="off")
    [gen] = b.generate([prompt(b)], GEN)
    assert gen.error is None and gen.text == "The answer is 42."
    assert len(stub.requests) == 4
    # a wait before each retry, exponential with full jitter: within [cap / 2, cap]
    caps = [0.01, 0.02, 0.04]
    assert len(clock.sleeps) == 3
    assert all(cap / 2 <= wait <= cap for wait, cap in zip(clock.sleeps, caps)), clock.sleeps


def test_retry_after_header_is_honoured(stub, monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(http_client, "time", clock)
    stub.failures, stub.retry_after = [429], "0.3"
    b = backend(stub, stream="off", max_backoff_s=5)
    [gen] = b.generate([prompt(b)], GEN)
    assert gen.error is None and clock.sleeps == [0.3]


def test_retries_run_out_into_an_error_generation(stub):
    stub.failures = [500] * 10
    b = backend(stub, max_retries=2, stream="off")
    [gen] = b.generate([prompt(b)], GEN)
    assert gen.finish_reason == "error"
    assert "HTTP 500" in gen.error and "3 attempts" in gen.error and "stub failure" in gen.error
    assert len(stub.requests) == 3


def test_client_errors_are_not_retried(stub):
    stub.failures = [400]
    b = backend(stub, max_retries=3, stream="off")
    [gen] = b.generate([prompt(b)], GEN)
    assert gen.finish_reason == "error" and "HTTP 400" in gen.error
    assert len(stub.requests) == 1


def test_a_dropped_connection_is_retried(stub):
    stub.failures = ["drop"]
    b = backend(stub)
    [gen] = b.generate([prompt(b)], GEN)
    assert gen.error is None and gen.text.strip() == "The answer is 42."


def test_a_hung_request_times_out_and_is_retried(stub):
    stub.failures = ["hang"]
    # The hung request never answers, so 0.5 s only says when it is given up; a retry that
    # a loaded machine slows past 0.5 s is retried in turn, so the clock decides nothing.
    b = backend(stub, timeout_s=0.5, stream="off", max_retries=8)
    [gen] = b.generate([prompt(b)], GEN)
    assert gen.error is None and len(stub.requests) >= 2


def test_a_server_that_is_down_gives_error_generations_quickly(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(http_client, "time", clock)
    b = OpenAIBackend("m", f"http://127.0.0.1:{free_port()}/v1", concurrency=4, max_retries=3,
                      backoff_s=0.05, max_backoff_s=0.1)
    prompts = [prompt(b, f"q{i}") for i in range(12)]
    gens = b.generate(prompts, GEN)
    assert len(gens) == 12 and all(g.finish_reason == "error" for g in gens)
    assert all("cannot connect" in g.error and "127.0.0.1" in g.error for g in gens)
    # Quickly: only the requests in flight when the server was found dead wait out their
    # retries (4 x 3 waits at most); every later one tries once, without a wait.
    assert 3 <= len(clock.sleeps) <= 4 * 3 < 12 * 3


# -- concurrency -------------------------------------------------------------------------------

@pytest.mark.parametrize("concurrency", [1, 4])
def test_concurrency_bounds_requests_in_flight_and_keeps_order(stub, concurrency):
    # Replies wait until `concurrency` requests are in: the bound is reached every time,
    # and a request over it would be counted.
    meet = threading.Barrier(concurrency, timeout=60)  # the bound only ends a failed test
    stub.before_reply = lambda body: meet.wait()
    stub.reply = lambda body: (f"echo {body['messages'][-1]['content']}", None)
    b = backend(stub, concurrency=concurrency, stream="off")
    seen = []
    gens = b.generate([prompt(b, f"q{i}") for i in range(12)], GEN, progress=seen.append)
    assert [g.text for g in gens] == [f"echo q{i}" for i in range(12)]
    assert stub.max_in_flight == concurrency
    assert sum(seen) == 12


def test_a_session_sends_each_prompt_at_once_and_returns_replies_as_they_arrive(stub):
    """A slow request does not hold back a fast one, and a prompt submitted while
    others are in flight goes out at once (the agent loop's next turn)."""
    slow_may_answer = threading.Event()

    def reply(body):
        text = body["messages"][-1]["content"]
        if text == "slow":
            slow_may_answer.wait(60)  # the bound only ends a failed test
        return f"echo {text}", None

    stub.reply = reply
    b = backend(stub, concurrency=4, stream="off")
    session = b.session(GEN)
    session.submit("s", prompt(b, "slow"))
    session.submit("f", prompt(b, "fast"))
    first = session.poll()
    assert [(k, g.text) for k, g in first] == [("f", "echo fast")]
    session.submit("f2", prompt(b, "fast again"))  # while "slow" is still in flight
    second = session.poll()
    assert [(k, g.text) for k, g in second] == [("f2", "echo fast again")]
    slow_may_answer.set()
    seen = dict(first + second)
    while session.pending:
        seen.update(session.poll())
    assert seen["f2"].text == "echo fast again" and seen["s"].text == "echo slow"
    assert stub.max_in_flight >= 2


# -- the API key -------------------------------------------------------------------------------

def test_api_key_is_sent_but_never_described(stub, monkeypatch):
    monkeypatch.setenv("STUB_API_KEY", KEY)
    b = load_backend({"id": "stub-model", "backend": "openai", "base_url": stub.url,
                      "api_key_env": "STUB_API_KEY"})
    [gen] = b.generate([prompt(b)], GEN)
    assert gen.error is None
    assert stub.headers[0]["Authorization"] == f"Bearer {KEY}"
    assert KEY not in json.dumps(b.describe()) and KEY not in json.dumps(vars(b), default=str)


def test_a_key_written_into_the_config_is_refused():
    with pytest.raises(InputError, match="api_key_env"):
        load_backend({"id": "m", "backend": "openai", "base_url": "http://x/v1", "api_key": KEY})
    with pytest.raises(InputError, match="concurency"):
        load_backend({"id": "m", "backend": "openai", "base_url": "http://x/v1",
                      "concurency": 4})


def test_a_run_through_the_runner_keeps_the_key_out_of_the_run_dir(stub, tmp_path, monkeypatch):
    from evalpipe.config import parse_config
    from evalpipe.runner import execute_run

    monkeypatch.setenv("STUB_API_KEY", KEY)
    monkeypatch.setenv("EVALPIPE_CACHE", str(tmp_path / "cache"))

    def reply(body):  # call the tool on the first turn, answer on the second
        if any(m["role"] == "tool" for m in body["messages"]):
            return "The answer is 42.", None
        return "", [{"id": "call_x", "type": "function",
                     "function": {"name": "multiply", "arguments": '{"a": 6, "b": 7}'}}]

    from evalpipe.formats import FORMATS

    fmt = "openai" if "openai" in FORMATS else "native"
    stub.reply = reply
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"id": "q1", "suite": "arithmetic",
                                     "question": "What is 6 times 7?", "answer": 42}) + "\n"
                         + json.dumps({"id": "q2", "suite": "arithmetic",
                                       "question": "What is 7 times 6?", "answer": 42}) + "\n")
    config = parse_config({
        "name": "stub", "questions": [str(questions)],
        "models": [{"id": "stub-model", "backend": "openai", "base_url": stub.url,
                    "api_key_env": "STUB_API_KEY", "concurrency": 2, "backoff_s": 0.01}],
        "formats": [fmt], "toolsets": ["calculator"]}, source=str(tmp_path / "c.yaml"))
    run_dir = execute_run(config, tmp_path / "out", echo=lambda s: None)
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 2 and all(s["stop_reason"] == "answered" for s in samples)
    assert all(s["final_answer"] == "The answer is 42." for s in samples)
    assert stub.headers[0]["Authorization"] == f"Bearer {KEY}"
    # the second request carried the tool's result (answering the call by its id in
    # the openai format, which keeps the Chat Completions shape)
    tool_msgs = [m for m in stub.requests[-1]["messages"] if m["role"] == "tool"]
    assert tool_msgs and tool_msgs[0]["content"] == "42"
    if fmt == "openai":
        assistant = [m for m in stub.requests[-1]["messages"] if m["role"] == "assistant"]
        assert tool_msgs[0]["tool_call_id"] == assistant[0]["tool_calls"][0]["id"]
    for path in [*run_dir.rglob("*"), *(tmp_path / "cache").rglob("*")]:
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


def test_the_format_and_the_backend_send_one_wire_shape():
    from evalpipe.formats.openai import OpenAIFormat

    tool = {"name": "add", "description": "a + b", "parameters": {"type": "object"}}
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": None},
                {"role": "assistant", "content": None, "reasoning": "hidden",
                 "tool_calls": [{"function": {"name": "add", "arguments": {"a": 1}}}]},
                {"role": "tool", "content": "1"}]
    wire, tools = OpenAIFormat().prepare(messages, [tool], True)
    body = json.loads(OpenAIBackend("m", "http://127.0.0.1:9/v1").render(wire, tools))
    assert body["messages"] == wire and body["tools"] == tools
    assert wire[1]["content"] == "" and "reasoning" not in wire[2]
    assert wire[2]["tool_calls"] == [{"id": "call_0", "type": "function", "function": {
        "name": "add", "arguments": '{"a": 1}'}}]
    assert wire[3] == {"role": "tool", "content": "1", "tool_call_id": ""}
    assert tools == [{"type": "function", "function": tool}]
