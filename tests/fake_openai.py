"""A fake OpenAI-compatible server on 127.0.0.1 for end-to-end tests.

Each POST is answered by `server.respond(path, body)`, which returns what to
send: a JSON value, raw bytes, a stream of server-sent events, a request held
open until the server closes, a body trickled one byte at a time, a connection
closed (or reset) without a reply, or a reply cut part way. GET
/v1/models lists `server.models`. Every request is recorded, and `held` is set
while a request is being held open, so a test can act on "the server holds a
request" without looking at a clock.
"""

from __future__ import annotations

import json
import re
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self

import yaml
from helpers import write_jsonl


@dataclass
class Json:
    """A JSON body (any value, already-encoded bytes allowed)."""

    data: Any
    status: int = 200


@dataclass
class Stream:
    """Server-sent events: each item is sent as one `data:` line (a JSON value, or bytes
    sent as they are), then `data: [DONE]` unless done=False."""

    events: list[Any]
    done: bool = True


@dataclass
class Hang:
    """Accept the request and send nothing until the server closes."""


@dataclass
class Trickle:
    """A 200 streamed reply sent one byte at a time, `pause_s` apart, forever
    (or until `body` runs out)."""

    body: bytes = b"data: " + b" " * 100_000
    pause_s: float = 0.05


@dataclass
class Drop:
    """Close the connection without answering; `reset`: with a TCP reset (RST)."""

    reset: bool = False


@dataclass
class Cut:
    """A 200 reply that stops part way: `raw` is sent, then the connection is closed.
    A whole reply declares the length it never sends; a streamed one (`events`) is
    closed without its end."""

    raw: bytes
    events: bool = False


Reply = Json | Stream | Hang | Trickle | Drop | Cut


def chat(content: Any = "The answer is 42.", tool_calls: Any = None, *, model: str = "fake",
         finish_reason: str = "stop", usage: Any = None) -> dict[str, Any]:
    """A well-formed Chat Completions reply."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    return {"id": "chatcmpl-1", "object": "chat.completion", "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": usage if usage is not None else {"prompt_tokens": 10,
                                                      "completion_tokens": 5}}


def stream(text: str = "The answer is 42.", *, model: str = "fake") -> Stream:
    """A well-formed streamed Chat Completions reply with usage."""
    events: list[Any] = [{"model": model, "choices": [{"index": 0, "delta": {
        "role": "assistant", "content": word + " "}}]} for word in text.split(" ")]
    events.append({"model": model, "choices": [{"index": 0, "delta": {},
                                                "finish_reason": "stop"}]})
    events.append({"model": model, "choices": [], "usage": {"prompt_tokens": 10,
                                                            "completion_tokens": 5}})
    return Stream(events)


def question_of(body: dict[str, Any]) -> str:
    """The last user message of a chat request."""
    users = [m.get("content") or "" for m in body.get("messages") or [] if m.get("role") == "user"]
    return users[-1] if users else ""


def right_answer(body: dict[str, Any]) -> Reply:
    """Answers "What is N plus 1?" right (the questions of `write_config`)."""
    numbers = re.findall(r"\d+", question_of(body))
    return Json(chat(f"The answer is {int(numbers[0]) + 1}." if numbers else "I do not know."))


class Endpoint:
    """The model behind a fake server's one name: version 1 answers "What is i plus 1?"
    right, version 2 (swapped in behind the same name, reported alike) answers 0;
    `down`: every request gets a 500."""

    def __init__(self):
        self.version, self.down = 1, False

    def __call__(self, path: str, body: dict[str, Any]) -> Reply:
        if self.down:
            return Json({"error": {"message": "upstream down"}}, status=500)
        numbers = re.findall(r"\d+", question_of(body))
        right = int(numbers[0]) + 1 if numbers else 0
        return Json(chat(f"The answer is {right if self.version == 1 else 0}."))


@dataclass
class FakeOpenAI:
    respond: Callable[[str, dict[str, Any]], Reply] = lambda path, body: right_answer(body)
    models: list[dict[str, Any]] = field(default_factory=lambda: [
        {"id": "fake", "object": "model", "owned_by": "tests"}])
    requests: list[tuple[str, Any]] = field(default_factory=list)
    held: threading.Event = field(default_factory=threading.Event)
    closing: threading.Event = field(default_factory=threading.Event)
    url: str = ""
    open_requests: int = 0  # POSTs the server is still answering (or holding)

    def __post_init__(self):
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def posts(self, path_end: str = "/chat/completions") -> list[Any]:
        with self.lock:
            return [body for path, body in self.requests if path.endswith(path_end)]

    def close(self) -> None:
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _handler(fake: FakeOpenAI):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _send(self, status: int, raw: bytes, content_type: str = "application/json"):
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self):
            with fake.lock:
                fake.requests.append((self.path, None))
            if self.path.endswith("/models"):
                self._send(200, json.dumps({"object": "list", "data": fake.models}).encode())
            else:
                self._send(404, b'{"error": {"message": "not found"}}')

        def do_POST(self):
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = json.loads(raw)
            with fake.lock:
                fake.requests.append((self.path, body))
                fake.open_requests += 1
            try:
                self._reply(fake.respond(self.path, body))
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up on this request
            finally:
                with fake.lock:
                    fake.open_requests -= 1

        def _reply(self, reply: Reply):
            if isinstance(reply, Json):
                data = reply.data
                raw = data if isinstance(data, bytes) else json.dumps(data).encode()
                self._send(reply.status, raw)
            elif isinstance(reply, Drop):
                self.close_connection = True
                if reply.reset:  # linger 0: close() sends RST instead of FIN
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                               struct.pack("ii", 1, 0))
                    self.connection.close()
            elif isinstance(reply, Cut):
                self.send_response(200)
                if reply.events:
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Connection", "close")
                else:
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(2 * len(reply.raw) + 10))
                self.end_headers()
                self.wfile.write(reply.raw)
                self.wfile.flush()
                self.close_connection = True
            elif isinstance(reply, Hang):
                fake.held.set()
                fake.closing.wait()
                self.close_connection = True
            elif isinstance(reply, Trickle):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                fake.held.set()
                for byte in reply.body:
                    if fake.closing.is_set():
                        return
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(reply.pause_s)  # the fake's pace, not a test's ordering
            else:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                for event in reply.events:
                    data = event if isinstance(event, bytes) else json.dumps(event).encode()
                    self.wfile.write(b"data: " + data + b"\n\n")
                if reply.done:
                    self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

    return Handler


def write_config(tmp_path: Path, url: str, *, n: int = 6, name: str = "nightly",
                 fmt: str = "openai", toolsets: tuple[str, ...] = ("calculator",),
                 **model: Any) -> Path:
    """A config of n questions "What is i plus 1?" against the server at `url`."""
    questions = [{"id": f"q{i}", "suite": "arithmetic", "question": f"What is {i} plus 1?",
                  "answer": i + 1} for i in range(n)]
    write_jsonl(tmp_path / "q.jsonl", questions)
    entry = {"id": "fake", "backend": "openai", "base_url": url, "stream": "off",
             "max_retries": 0, "backoff_s": 0.01, "timeout_s": 30, **model}
    config = {"name": name, "questions": [str(tmp_path / "q.jsonl")], "models": [entry],
              "formats": [fmt], "toolsets": list(toolsets), "retrieval": ["none"],
              "max_turns": 2, "generation": {"max_new_tokens": 32}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path
