"""Models behind an OpenAI-compatible HTTP server: vLLM, llama.cpp, Ollama, TGI.

Chat mode (the default) sends Chat Completions with `tools` and reads
structured `tool_calls` back (ids, parallel calls; `tool` messages answer them
by tool_call_id). Text mode sends a prompt rendered by a chat template to
/v1/completions, for servers without tool support: the prompt formats (hermes,
json, xml) write the protocol into the prompt and parse the reply.

The prompt of this backend is canonical JSON (sorted keys) of what is sent:
{mode, model, messages, tools} or {mode, model, prompt}; it is also the cache
key. Requests go out from a thread pool (`concurrency` in flight); 429, 5xx,
timeouts and connection errors are retried with exponential backoff and
jitter; a request that still fails becomes a Generation with
finish_reason "error" (stop reason infra_error), never an exception.

The API key is read from the environment variable named by `api_key_env` at
each request and never stored on the backend, in describe() or in errors.
"""

from __future__ import annotations

import json
import os
import random
import re
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from evalpipe.backends.base import Backend, GenerationSession, GenerationSettings, run_dry
from evalpipe.errors import InputError
from evalpipe.formats.openai import decode_arguments, wire_messages, wire_tools
from evalpipe.records import Generation, ToolCall

MODES = ("chat", "text")
STREAM_MODES = ("auto", "on", "off")
RETRY_STATUS = frozenset({408, 409, 425, 429}) | frozenset(range(500, 600))
CONFIG_KEYS = {"id", "backend", "base_url", "api_key_env", "concurrency", "timeout_s",
               "max_retries", "mode", "model", "stream", "backoff_s", "max_backoff_s",
               "chat_template", "stop", "extra_body", "tool_choice"}


class RequestFailed(Exception):
    def __init__(self, message: str, retryable: bool, retry_after: float | None = None):
        super().__init__(message)
        self.retryable, self.retry_after = retryable, retry_after


class StreamRejected(Exception):
    """The server refused the streaming form of a request (400/404/422)."""


@dataclass
class _Reply:
    text: str
    tool_calls: list[ToolCall] | None
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    prefill_ms: float
    decode_ms: float


class OpenAIBackend(Backend):
    def __init__(self, model_id: str, base_url: str, *, api_key_env: str | None = None,
                 concurrency: int = 4, timeout_s: float = 120.0, max_retries: int = 4,
                 mode: str = "chat", model: str | None = None, stream: str | bool = "auto",
                 backoff_s: float = 0.5, max_backoff_s: float = 30.0,
                 chat_template: str | None = None, stop: list[str] | None = None,
                 extra_body: dict[str, Any] | None = None, tool_choice: Any = None):
        if mode not in MODES:
            raise InputError(f"unknown mode {mode!r}", field="models.mode",
                             expected=" | ".join(MODES))
        if not base_url:
            raise InputError(f"model {model_id!r} has no base_url", field="models.base_url",
                             expected="the server's URL, e.g. http://127.0.0.1:8000/v1")
        stream = {True: "on", False: "off"}.get(stream, stream)
        if stream not in STREAM_MODES:
            raise InputError(f"unknown stream setting {stream!r}", field="models.stream",
                             expected="auto | on | off")
        if int(concurrency) < 1:
            raise InputError("concurrency must be at least 1", field="models.concurrency")
        self.model_id, self.mode = model_id, mode
        self.served_model = model or model_id
        self.base_url = base_url.rstrip("/")
        if not self.base_url.endswith("/v1"):
            self.base_url += "/v1"
        self.api_key_env = api_key_env
        self.concurrency, self.timeout_s = int(concurrency), float(timeout_s)
        self.max_retries = int(max_retries)
        self.backoff_s, self.max_backoff_s = float(backoff_s), float(max_backoff_s)
        self.stream = stream
        self.extra_body = dict(extra_body or {})
        self.tool_choice = tool_choice
        self.template = None
        if mode == "text":
            from evalpipe.backends.templates import ChatTemplate

            self.template = ChatTemplate.from_spec(chat_template, stop=stop)
        self.stop = list(stop) if stop is not None else (self.template.stop if self.template
                                                         else [])
        self._local = threading.local()
        self._state_lock = threading.Lock()
        self._stream_usage: bool | None = None  # does the server send usage when streaming?

    # -- contract ----------------------------------------------------------------------------
    @property
    def template_supports_tools(self) -> bool:
        return True if self.mode == "chat" else self.template.supports_tools

    def describe(self) -> dict[str, Any]:
        facts = {"model_id": self.model_id, "backend": "openai", "base_url": self.base_url,
                 "mode": self.mode, "served_model": self.served_model}
        if self.template is not None:
            facts["chat_template_hash"] = self.template.hash
        if self.stop:
            facts["stop"] = self.stop
        if self.extra_body:
            facts["extra_body"] = self.extra_body
        if self.tool_choice is not None:
            facts["tool_choice"] = self.tool_choice
        return facts

    def render(self, messages, tools):
        if self.mode == "text":
            body = {"mode": "text", "model": self.served_model,
                    "prompt": self.template.render(messages, tools)}
        else:
            body = {"mode": "chat", "model": self.served_model,
                    "messages": wire_messages(messages), "tools": wire_tools(tools)}
        return json.dumps(body, sort_keys=True, ensure_ascii=False)

    def generate(self, prompts, settings: GenerationSettings, progress=None):
        return run_dry(self.session(settings), prompts, progress)

    def session(self, settings: GenerationSettings) -> GenerationSession:
        return _InFlightSession(self, settings)

    # -- one request -------------------------------------------------------------------------
    def _generate_one(self, prompt: str, settings: GenerationSettings,
                      circuit: _Circuit) -> Generation:
        try:
            body = self._body(json.loads(prompt), settings)
            path = "/chat/completions" if body.pop("_mode") == "chat" else "/completions"
            reply = self._with_retries(path, body, circuit)
        except RequestFailed as exc:
            return Generation("", finish_reason="error", error=self._clean(str(exc)))
        except Exception as exc:  # noqa: BLE001 - an odd reply fails this prompt, not the batch
            return Generation("", finish_reason="error",
                              error=self._clean(f"openai backend: {type(exc).__name__}: {exc}"))
        return Generation(reply.text, reply.prompt_tokens, reply.completion_tokens,
                          reply.prefill_ms, reply.decode_ms, reply.finish_reason,
                          tool_calls=reply.tool_calls)

    def _body(self, prompt: dict[str, Any], settings: GenerationSettings) -> dict[str, Any]:
        body: dict[str, Any] = {"model": prompt["model"], "max_tokens": settings.max_new_tokens,
                                "temperature": settings.temperature, "seed": settings.seed}
        if settings.temperature > 0:
            body["top_p"] = settings.top_p
        if prompt["mode"] == "chat":
            body["messages"] = prompt["messages"]
            if prompt.get("tools"):
                body["tools"] = prompt["tools"]
                if self.tool_choice is not None:
                    body["tool_choice"] = self.tool_choice
        else:
            body["prompt"] = prompt["prompt"]
        if self.stop:
            body["stop"] = self.stop
        body.update(self.extra_body)
        body["_mode"] = prompt["mode"]
        return body

    def _with_retries(self, path: str, body: dict[str, Any], circuit: _Circuit) -> _Reply:
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

    def _send(self, url: str, body: dict[str, Any]) -> _Reply:
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

    def _post(self, url: str, body: dict[str, Any]) -> _Reply:
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
            calls = _calls(message.get("tool_calls"))
        else:
            text, calls = choice.get("text") or "", None
        return _Reply(text, calls, _finish(choice.get("finish_reason"), calls),
                      int(usage.get("prompt_tokens") or 0),
                      int(usage.get("completion_tokens") or 0), 0.0, (end - start) * 1000)

    def _post_stream(self, url: str, body: dict[str, Any]) -> tuple[_Reply, bool]:
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
        tool_calls = _calls([{"id": c["id"], "function": {"name": c["name"],
                                                          "arguments": c["arguments"]}}
                             for _, c in sorted(calls.items())]) if calls else None
        usage = usage or {}
        reply = _Reply("".join(text), tool_calls, _finish(finish, tool_calls),
                       int(usage.get("prompt_tokens") or 0),
                       int(usage.get("completion_tokens") or pieces),
                       (first - start) * 1000, (end - first) * 1000)
        return reply, bool(usage)

    def _clean(self, message: str) -> str:
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        return message.replace(key, "***") if key else message


class _Circuit:
    """Shared by the requests of one generate(): once a request has used all its
    retries because the server cannot be reached, the others try once each, so
    a dead server fails a batch in seconds instead of retries x prompts."""

    def __init__(self):
        self.open = False

    def trip(self) -> None:
        self.open = True

    def close(self) -> None:
        self.open = False


def _calls(raw: list[dict[str, Any]] | None) -> list[ToolCall] | None:
    if not raw:
        return None
    calls = []
    for i, call in enumerate(raw):
        fn = call.get("function") or {}
        calls.append(ToolCall(fn.get("name") or "", decode_arguments(fn.get("arguments")),
                              id=call.get("id") or f"call_{i}"))
    return calls


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


def from_config(model: dict[str, Any]) -> OpenAIBackend:
    """An OpenAIBackend from a `models:` entry of the config."""
    if "api_key" in model:
        raise InputError("an API key must not be written in the config", field="models.api_key",
                         expected="api_key_env: THE_NAME_OF_AN_ENVIRONMENT_VARIABLE")
    unknown = sorted(set(model) - CONFIG_KEYS - {"dtype"})
    if unknown:
        raise InputError(f"unknown key(s) {', '.join(unknown)} for backend openai",
                         field="models", expected=", ".join(sorted(CONFIG_KEYS)))
    kwargs = {k: model[k] for k in CONFIG_KEYS - {"id", "backend", "base_url"} if k in model}
    return OpenAIBackend(model["id"], model.get("base_url", ""), **kwargs)


class _InFlightSession(GenerationSession):
    """Each submitted prompt goes out at once (up to `concurrency` in flight); `poll`
    returns the replies that have arrived, so a conversation's next turn is sent while
    other requests are still running and the server's batch stays full."""

    def __init__(self, backend: OpenAIBackend, settings: GenerationSettings):
        super().__init__(backend, settings)
        self.circuit = _Circuit()
        self.pool: ThreadPoolExecutor | None = None
        self.futures: dict[Future, Any] = {}

    @property
    def pending(self) -> int:
        return len(self.futures)

    def submit(self, key, prompt: str) -> None:
        if self.pool is None:
            self.pool = ThreadPoolExecutor(max_workers=self.backend.concurrency,
                                           thread_name_prefix="openai")
        future = self.pool.submit(self.backend._generate_one, prompt, self.settings, self.circuit)
        self.futures[future] = key

    def poll(self):
        if not self.futures:
            return []
        done, _ = wait(self.futures, return_when=FIRST_COMPLETED)
        out = [(self.futures.pop(f), f.result()) for f in done]  # _generate_one never raises
        if not self.futures:  # idle: let the threads go until the next submit
            self.pool.shutdown(wait=False)
            self.pool = None
        return out
