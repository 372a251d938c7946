"""The retrying HTTP client of the OpenAI backend: POSTs JSON to an
OpenAI-compatible server and reads the reply (plain or streamed) into the one
record of a completion, records.Generation.

429, 5xx, timeouts and connection errors are retried with exponential backoff
and full jitter (a server's Retry-After is honoured); a server that streams
without usage is asked again without streaming, so token counts are never
guesses. The API key is read from the environment at each request and masked
in every message (`clean`). What a request carries (messages, tools) is the
backend's business; the wire shape of calls lives in formats/openai.py.
"""

from __future__ import annotations

import json
import os
import random
import re
import threading
import time
from typing import Any

from evalpipe.formats.openai import reply_calls
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
        RequestFailed (not retryable) when every attempt failed."""
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

    def _request(self, url: str, body: dict[str, Any], stream: bool):
        import requests

        try:
            response = self._session().post(url, data=json.dumps(body, ensure_ascii=False)
                                            .encode("utf-8"), headers=self._headers(),
                                            timeout=(min(10.0, self.timeout_s), self.timeout_s),
                                            stream=stream)
        except requests.exceptions.ConnectionError as exc:
            raise RequestFailed(f"cannot connect to the server ({_reason(exc)})", True) from None
        except requests.exceptions.Timeout:
            raise RequestFailed(f"no answer within timeout_s={self.timeout_s:g}", True) from None
        except requests.exceptions.RequestException as exc:
            raise RequestFailed(f"{type(exc).__name__}: {_short(exc)}", True) from None
        if response.status_code >= 400:
            text = _snippet(response)
            retry_after = _retry_after(response.headers.get("Retry-After"))
            retryable = response.status_code in RETRY_STATUS
            response.close()
            if stream and response.status_code in (400, 404, 422) and "stream" in text.lower():
                raise StreamRejected()
            raise RequestFailed(f"HTTP {response.status_code}: {text}", retryable, retry_after)
        return response

    def _post(self, url: str, body: dict[str, Any]) -> Generation:
        import requests

        start = time.perf_counter()
        response = self._request(url, dict(body, stream=False), stream=False)
        try:
            data = response.json()
        except (ValueError, requests.exceptions.RequestException) as exc:
            raise RequestFailed(f"reply is not JSON ({_short(exc)})", True) from None
        end = time.perf_counter()
        choice = (data.get("choices") or [{}])[0]
        usage = data.get("usage") or {}
        if "message" in choice:
            message = choice.get("message") or {}
            text = message.get("content") or ""
            calls = reply_calls(message.get("tool_calls"))
        else:
            text, calls = choice.get("text") or "", None
        return Generation(text, int(usage.get("prompt_tokens") or 0),
                          int(usage.get("completion_tokens") or 0), 0.0, (end - start) * 1000,
                          _finish(choice.get("finish_reason"), calls), tool_calls=calls)

    def _post_stream(self, url: str, body: dict[str, Any]) -> tuple[Generation, bool]:
        import requests

        start = time.perf_counter()
        response = self._request(url, dict(body, stream=True,
                                           stream_options={"include_usage": True}), stream=True)
        first = None
        text: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        finish, usage, pieces = None, None, 0
        try:
            for line in response.iter_lines(decode_unicode=False):
                if time.perf_counter() - start > self.timeout_s:
                    raise RequestFailed(f"reply not finished within timeout_s="
                                        f"{self.timeout_s:g}", True)
                if not line or not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    break
                chunk = json.loads(payload)
                if chunk.get("error"):
                    raise RequestFailed(f"server error in stream: {chunk['error']}", True)
                if chunk.get("usage"):
                    usage = chunk["usage"]
                for choice in chunk.get("choices") or []:
                    delta = choice.get("delta")
                    piece = (delta or {}).get("content") if delta is not None \
                        else choice.get("text")
                    deltas = (delta or {}).get("tool_calls") or []
                    if piece or deltas:
                        pieces += 1
                        if first is None:
                            first = time.perf_counter()
                    if piece:
                        text.append(piece)
                    for d in deltas:
                        slot = calls.setdefault(int(d.get("index", len(calls))),
                                                {"id": "", "name": "", "arguments": ""})
                        slot["id"] = d.get("id") or slot["id"]
                        fn = d.get("function") or {}
                        slot["name"] += fn.get("name") or ""
                        args = fn.get("arguments")
                        slot["arguments"] += args if isinstance(args, str) else (
                            json.dumps(args) if args is not None else "")
                    if choice.get("finish_reason"):
                        finish = choice["finish_reason"]
        except requests.exceptions.RequestException as exc:
            raise RequestFailed(f"connection lost mid-reply ({_short(exc)})", True) from None
        except ValueError as exc:
            raise RequestFailed(f"bad stream chunk ({_short(exc)})", True) from None
        finally:
            response.close()
        end = time.perf_counter()
        if finish is None:
            raise RequestFailed("stream ended without a finish_reason", True)
        first = first or end
        tool_calls = reply_calls([{"id": c["id"], "function": {"name": c["name"],
                                                          "arguments": c["arguments"]}}
                             for _, c in sorted(calls.items())]) if calls else None
        usage = usage or {}
        reply = Generation("".join(text), int(usage.get("prompt_tokens") or 0),
                           int(usage.get("completion_tokens") or pieces), (first - start) * 1000,
                           (end - first) * 1000, _finish(finish, tool_calls),
                           tool_calls=tool_calls)
        return reply, bool(usage)

    def clean(self, message: str) -> str:
        """message with the API key, if any, masked."""
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        return message.replace(key, "***") if key else message


def _finish(reason: str | None, calls: list[ToolCall] | None) -> str:
    if reason == "length":
        return "length"
    return "stop"  # stop, tool_calls, function_call, eos, ...


def _retry_after(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _snippet(response) -> str:
    try:
        text = response.text
    except Exception:  # noqa: BLE001 - the body is only for the message
        text = ""
    try:
        data = json.loads(text)
        err = data.get("error", data) if isinstance(data, dict) else data
        text = err.get("message", json.dumps(err)) if isinstance(err, dict) else str(err)
    except (ValueError, AttributeError):
        pass
    text = " ".join(text.split())
    return text[:300] or response.reason or ""


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
