"""The retrying HTTP client of the OpenAI backend: POSTs JSON to an
OpenAI-compatible server and reads the reply (plain or streamed), checked field
by field (backends/openai_reply.py), into the one record of a completion,
records.Generation.

429, 5xx, timeouts and connection errors are retried with exponential backoff
and full jitter (a server's Retry-After is honoured); a server that streams
without usage is asked again without streaming, so token counts are never
guesses. The API key is read from the environment at each request and masked
in every message (`clean`). What a request carries (messages, tools) is the
backend's business; the wire shape of calls lives in formats/openai.py.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

from evalpipe.backends.openai_reply import (
    MAX_BODY_BYTES,
    MAX_CALLS,
    Function,
    MalformedReply,
    Usage,
    WireCall,
    excerpt,
    read_body,
    server_error,
    tool_calls,
)
from evalpipe.records import Generation, ToolCall

RETRY_STATUS = frozenset({408, 409, 425, 429}) | frozenset(range(500, 600))


class RequestFailed(Exception):
    def __init__(self, message: str, retryable: bool, retry_after: float | None = None):
        super().__init__(message)
        self.retryable, self.retry_after = retryable, retry_after


class StreamRejected(Exception):
    """The server refused the streaming form of a request (400/404/422)."""


class Circuit:
    """Shared by the requests of one generate(): once a request has used all its
    retries because the server cannot be reached, the others try once each, so
    a dead server fails a batch in seconds instead of retries x prompts."""

    def __init__(self):
        self.open = False

    def trip(self) -> None:
        self.open = True

    def close(self) -> None:
        self.open = False


class HttpClient:
    def __init__(self, base_url: str, *, api_key_env: str | None = None,
                 timeout_s: float = 120.0, max_retries: int = 4, backoff_s: float = 0.5,
                 max_backoff_s: float = 30.0, stream: str = "auto"):
        self.base_url = base_url
        self.api_key_env = api_key_env
        self.timeout_s, self.max_retries = float(timeout_s), int(max_retries)
        self.backoff_s, self.max_backoff_s = float(backoff_s), float(max_backoff_s)
        self.stream = stream
        self._local = threading.local()
        self._state_lock = threading.Lock()
        self._stream_usage: bool | None = None  # does the server send usage when streaming?

    def post(self, path: str, body: dict[str, Any], circuit: Circuit) -> Generation:
        """POST body to base_url + path, retried, and the reply as a Generation; raises
        RequestFailed (not retryable) when every attempt failed, MalformedReply when the
        reply does not fit the wire shape (never retried: the same server says the same)."""
        url = self.base_url + path
        attempts = 1 + (0 if circuit.open else self.max_retries)
        last: RequestFailed | None = None
        for attempt in range(attempts):
            if attempt:
                time.sleep(self._delay(attempt, last.retry_after if last else None))
            try:
                reply = self._send(url, body)
                circuit.close()
                return reply
            except RequestFailed as exc:
                last = exc
                if not exc.retryable:
                    break
        if last is not None and last.retryable and "cannot connect" in str(last):
            circuit.trip()
        tries = f" after {attempt + 1} attempt{'s' if attempt else ''}"
        raise RequestFailed(f"openai backend: POST {url} failed{tries}: {last}", False)

    def get_json(self, path: str) -> Any:
        """GET base_url + path once, as JSON (e.g. /models); None when it cannot be had."""
        import requests

        deadline = time.monotonic() + self.timeout_s
        try:
            response = self._session().get(self.base_url + path, headers=self._headers(),
                                           timeout=(min(10.0, self.timeout_s), self.timeout_s),
                                           stream=True)
        except requests.exceptions.RequestException:
            return None
        try:
            if response.status_code != 200:
                return None
            raw = b"".join(self._pieces(response, deadline))
            return json.loads(raw.decode("utf-8"))
        except (RequestFailed, MalformedReply, ValueError, RecursionError):
            return None
        finally:
            response.close()

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        """Exponential backoff with full jitter; a server's Retry-After is honoured
        (up to max_backoff_s)."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_backoff_s)
        cap = min(self.max_backoff_s, self.backoff_s * (2 ** (attempt - 1)))
        return cap / 2 + random.uniform(0, cap / 2)

    def _session(self):
        import requests

        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
            session.trust_env = False  # no proxies from the environment for a model server
        return session

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def _use_stream(self) -> bool:
        if self.stream == "off":
            return False
        if self.stream == "on":
            return True
        with self._state_lock:
            return self._stream_usage is not False

    def _send(self, url: str, body: dict[str, Any]) -> Generation:
        if self._use_stream():
            try:
                reply, had_usage = self._post_stream(url, body)
            except StreamRejected:
                with self._state_lock:
                    self._stream_usage = False
                return self._post(url, body)
            if self.stream == "auto" and not had_usage:
                # The server streams without usage: token counts would be guesses, so
                # this prompt is asked again without streaming, and so are later ones.
                with self._state_lock:
                    self._stream_usage = False
                return self._post(url, body)
            with self._state_lock:
                self._stream_usage = True
            return reply
        return self._post(url, body)

    def _request(self, url: str, body: dict[str, Any], deadline: float):
        """POST `body`; the response with its body not yet read (every body is read by
        `_pieces`, within the request's deadline), or RequestFailed / StreamRejected."""
        import requests

        try:
            response = self._session().post(url, data=json.dumps(body, ensure_ascii=False)
                                            .encode("utf-8"), headers=self._headers(),
                                            timeout=(min(10.0, self.timeout_s), self.timeout_s),
                                            stream=True)
        except requests.exceptions.ConnectionError as exc:
            raise RequestFailed(f"cannot connect to the server ({_reason(exc)})", True) from None
        except requests.exceptions.Timeout:
            raise RequestFailed(f"no answer within timeout_s={self.timeout_s:g}", True) from None
        except requests.exceptions.RequestException as exc:
            raise RequestFailed(f"{type(exc).__name__}: {_short(exc)}", True) from None
        if response.status_code >= 400:
            try:
                text = _snippet(b"".join(self._pieces(response, deadline)), response.reason)
            except (RequestFailed, MalformedReply):
                text = response.reason or ""
            finally:
                response.close()
            retry_after = _retry_after(response.headers.get("Retry-After"))
            retryable = response.status_code in RETRY_STATUS
            if body.get("stream") and response.status_code in (400, 404, 422) \
                    and "stream" in text.lower():
                raise StreamRejected()
            raise RequestFailed(f"HTTP {response.status_code}: {text}", retryable, retry_after)
        return response

    def _post(self, url: str, body: dict[str, Any]) -> Generation:
        start = time.monotonic()
        deadline = start + self.timeout_s
        response = self._request(url, dict(body, stream=False), deadline)
        try:
            raw = b"".join(self._pieces(response, deadline))
        finally:
            response.close()
        return _whole_reply(raw, start, time.monotonic())

    def _pieces(self, response, deadline: float) -> Iterator[bytes]:
        """The body as it arrives, within `deadline` for the whole of it (a server that
        sends one byte at a time is stopped there, not only a silent one) and at most
        MAX_BODY_BYTES."""
        import requests

        size = 0
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RequestFailed(f"reply not finished within timeout_s="
                                        f"{self.timeout_s:g}", True)
                _read_timeout(response, left)
                piece = response.raw.read1(1 << 16)
                if not piece:
                    return
                size += len(piece)
                if size > MAX_BODY_BYTES:
                    raise MalformedReply(f"the reply is over {MAX_BODY_BYTES} bytes",
                                         excerpt(piece))
                yield piece
        except (requests.exceptions.RequestException, urllib3_errors()) as exc:
            if "timed out" in str(exc).lower() or "timeout" in type(exc).__name__.lower():
                raise RequestFailed(f"no answer within timeout_s={self.timeout_s:g}",
                                    True) from None
            raise RequestFailed(f"connection lost mid-reply ({_short(exc)})", True) from None

    def _post_stream(self, url: str, body: dict[str, Any]) -> tuple[Generation, bool]:
        """A streamed reply and whether it carried usage. Each fault gets the verdict the
        same fault gets in a whole reply: what the server sent that does not fit is
        MalformedReply, a stream cut before it finished is RequestFailed (the connection
        or the server failed). A server that answers a streamed request with a whole
        reply is read as one."""
        start = time.monotonic()
        deadline = start + self.timeout_s
        response = self._request(url, dict(body, stream=True,
                                           stream_options={"include_usage": True}), deadline)
        try:
            events, pieces = _events_or_body(self._pieces(response, deadline),
                                             response.headers.get("Content-Type") or "")
            if not events:
                reply = _whole_reply(b"".join(pieces), start, time.monotonic())
                return reply, True  # not streaming: asking again without would not help
            stream = _StreamedReply(start)
            for line in _lines(pieces):
                if line.startswith(b"data:"):
                    stream.add(line[5:].strip())
                    if stream.done:
                        break
        finally:
            response.close()
        return stream.finish(time.monotonic())

    def clean(self, message: str) -> str:
        """message with the API key, if any, masked."""
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        return message.replace(key, "***") if key else message


def _triple(call: WireCall) -> tuple[str, str, str | dict[str, Any]]:
    """(id, name, arguments) of a checked wire call, absent parts empty."""
    fn = call.function or Function()
    return call.id or "", fn.name or "", fn.arguments if fn.arguments is not None else ""


def _whole_reply(raw: bytes, start: float, end: float) -> Generation:
    """A whole (not streamed) reply body as a Generation."""
    data = read_body(raw)
    failed = server_error(data)
    if failed is not None:
        raise RequestFailed(f"server error: {failed}", True)
    choice = data.choices[0]
    if choice.message is not None:
        text = choice.message.content or ""
        calls = tool_calls([_triple(c) for c in choice.message.tool_calls or ()],
                           "choices[0].message.tool_calls", raw)
    else:
        text, calls = choice.text or "", None
    usage = data.usage or Usage()
    return Generation(text, usage.prompt_tokens or 0, usage.completion_tokens or 0, 0.0,
                      (end - start) * 1000, _finish(choice.finish_reason, calls),
                      tool_calls=calls, model=data.model)


class _StreamedReply:
    """A streamed reply as its events arrive, and at its end the same checks a whole
    reply gets (a choice, with a delta or a text)."""

    def __init__(self, start: float):
        self.start = start
        self.first: float | None = None  # when the first content or call arrived
        self.text: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.model: str | None = None
        self.pieces = 0
        self.done = False  # the server's end-of-stream event arrived
        self.choices = False  # some chunk carried a choice
        self.parts = False  # some choice carried a delta or a text
        self.last = b""  # the last payload, for the excerpt of a verdict at the end

    def add(self, payload: bytes) -> None:
        if payload == b"[DONE]":
            self.done = True
            return
        self.last = payload
        chunk = read_body(payload, stream=True)
        failed = server_error(chunk)
        if failed is not None:
            raise RequestFailed(f"server error in stream: {failed}", True)
        self.usage = chunk.usage or self.usage
        self.model = chunk.model or self.model
        for choice in chunk.choices:
            self.choices = True
            delta = choice.delta
            self.parts = self.parts or delta is not None or choice.text is not None
            piece = delta.content if delta is not None else choice.text
            deltas = (delta.tool_calls if delta is not None else None) or []
            if piece or deltas:
                self.pieces += 1
                if self.first is None:
                    self.first = time.monotonic()
            if piece:
                self.text.append(piece)
            for d in deltas:
                index = d.index if d.index is not None else len(self.calls)
                if index not in self.calls and len(self.calls) >= MAX_CALLS:
                    raise MalformedReply(f"more than {MAX_CALLS} tool calls", excerpt(payload))
                call_id, name, args = _triple(d)
                slot = self.calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
                slot["id"] = call_id or slot["id"]
                slot["name"] += name
                slot["arguments"] += args if isinstance(args, str) else json.dumps(args)
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason

    def finish(self, end: float) -> tuple[Generation, bool]:
        """The reply once the stream ended, and whether it carried usage."""
        if self.finish_reason is None and not self.done:
            # neither a finish_reason nor [DONE]: the connection or the server gave out
            raise RequestFailed("the stream ended before the reply did (no finish_reason, "
                                "no [DONE])", True)
        if not self.choices:
            raise MalformedReply("choices: empty in every chunk, expected one choice",
                                 excerpt(self.last))
        if not self.parts:
            raise MalformedReply("choices[0]: neither a delta nor a text in any chunk",
                                 excerpt(self.last))
        first = self.first or end
        found = tool_calls([(c["id"], c["name"], c["arguments"])
                            for _, c in sorted(self.calls.items())], "the streamed tool_calls")
        usage = self.usage or Usage()
        reply = Generation("".join(self.text), usage.prompt_tokens or 0,
                           usage.completion_tokens or self.pieces, (first - self.start) * 1000,
                           (end - first) * 1000, _finish(self.finish_reason, found),
                           tool_calls=found, model=self.model)
        return reply, usage.prompt_tokens is not None or usage.completion_tokens is not None


SSE_FIELDS = (b"data:", b"event:", b"id:", b"retry:", b":")


def _events_or_body(pieces: Iterator[bytes], content_type: str
                    ) -> tuple[bool, Iterator[bytes]]:
    """Whether a reply to a streamed request is server-sent events (its first line is
    an SSE field; an empty body sent as an event stream is a stream cut at once), and
    the body's pieces, those read to tell included."""
    head = b""
    for piece in pieces:
        head += piece
        if b"\n" in head or len(head.lstrip()) >= 6:
            break
    start = head.lstrip()
    events = start.startswith(SSE_FIELDS) or (
        not start and content_type.split(";")[0].strip().lower() == "text/event-stream")
    return events, itertools.chain([head], pieces)


def _lines(pieces: Iterable[bytes]) -> Iterator[bytes]:
    """The whole lines of a body that arrives in pieces (server-sent events); a last line
    without its end is dropped, as the event-stream format drops an unfinished event."""
    rest = b""
    for piece in pieces:
        *lines, rest = (rest + piece).split(b"\n")
        yield from (line.rstrip(b"\r") for line in lines)


def _read_timeout(response, seconds: float) -> None:
    """Let the next read of `response` wait at most `seconds` (best effort: urllib3
    keeps the socket on the response's connection)."""
    sock = getattr(getattr(response.raw, "connection", None), "sock", None)
    if sock is not None:
        sock.settimeout(max(0.001, seconds))


def urllib3_errors() -> type[Exception]:
    """What urllib3 raises when a read fails or times out mid-body."""
    from urllib3.exceptions import HTTPError

    return HTTPError


def _finish(reason: str | None, calls: list[ToolCall] | None) -> str:
    if reason == "length":
        return "length"
    return "stop"  # stop, tool_calls, function_call, eos, ...


def _retry_after(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _snippet(raw: bytes, reason: str | None) -> str:
    """The message of an error body, on one line and short."""
    text = raw[:100_000].decode("utf-8", "replace")
    try:
        data = json.loads(text)
        err = data.get("error", data) if isinstance(data, dict) else data
        text = err.get("message", json.dumps(err)) if isinstance(err, dict) else str(err)
    except (ValueError, AttributeError, RecursionError):
        pass
    text = " ".join(str(text).split())
    return text[:300] or reason or ""


def _reason(exc: BaseException) -> str:
    """The useful part of a connection error: '[Errno 111] Connection refused',
    not urllib3's nested reprs."""
    text = str(exc)
    match = re.search(r"\[Errno -?\d+\] [^'\")\]]+", text)
    if match:
        return match.group(0).strip()
    for marker in ("Connection aborted", "Connection reset", "Read timed out",
                   "Remote end closed connection"):
        if marker in text:
            return marker.lower()
    return _short(exc)


def _short(exc: BaseException) -> str:
    text = str(exc)
    return (text[:200] + "...") if len(text) > 200 else text
