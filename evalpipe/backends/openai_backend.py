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

Three parts: the wire shape (formats/openai.py), the retrying HTTP client
(backends/http_client.py) and this backend, which builds requests from prompts
and keeps `concurrency` of them in flight.
"""

from __future__ import annotations

import json
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from evalpipe.backends.base import Backend, GenerationSession, GenerationSettings, run_dry
from evalpipe.backends.http_client import Circuit, HttpClient, RequestFailed
from evalpipe.errors import InputError
from evalpipe.formats.openai import wire_messages, wire_tools
from evalpipe.records import Generation

MODES = ("chat", "text")
STREAM_MODES = ("auto", "on", "off")
CONFIG_KEYS = {"id", "backend", "base_url", "api_key_env", "concurrency", "timeout_s",
               "max_retries", "mode", "model", "stream", "backoff_s", "max_backoff_s",
               "chat_template", "stop", "extra_body", "tool_choice"}


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
        if isinstance(stream, bool):
            stream = "on" if stream else "off"
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
        self.concurrency = int(concurrency)
        self.client = HttpClient(self.base_url, api_key_env=api_key_env, timeout_s=timeout_s,
                                 max_retries=max_retries, backoff_s=backoff_s,
                                 max_backoff_s=max_backoff_s, stream=stream)
        self.extra_body = dict(extra_body or {})
        self.tool_choice = tool_choice
        self.template = None
        if mode == "text":
            from evalpipe.backends.templates import ChatTemplate

            self.template = ChatTemplate.from_spec(chat_template, stop=stop)
        self.stop = list(stop) if stop is not None else (self.template.stop if self.template
                                                         else [])

    # -- contract ----------------------------------------------------------------------------
    @property
    def template_supports_tools(self) -> bool:
        return self.template.supports_tools if self.template is not None else True

    def describe(self) -> dict[str, Any]:
        facts: dict[str, Any] = {"model_id": self.model_id, "backend": "openai", "base_url": self.base_url,
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
                      circuit: Circuit) -> Generation:
        try:
            body = self._body(json.loads(prompt), settings)
            path = "/chat/completions" if body.pop("_mode") == "chat" else "/completions"
            reply = self.client.post(path, body, circuit)
        except RequestFailed as exc:
            return Generation("", finish_reason="error", error=self.client.clean(str(exc)))
        except Exception as exc:  # noqa: BLE001 - an odd reply fails this prompt, not the batch
            return Generation("", finish_reason="error",
                              error=self.client.clean(f"openai backend: {type(exc).__name__}: {exc}"))
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
        self.openai = backend  # typed: the base class knows it only as a Backend
        self.circuit = Circuit()
        self.pool: ThreadPoolExecutor | None = None
        self.futures: dict[Future, Any] = {}

    @property
    def pending(self) -> int:
        return len(self.futures)

    def submit(self, key, prompt: str, group=None) -> None:
        if self.pool is None:
            self.pool = ThreadPoolExecutor(max_workers=self.openai.concurrency,
                                           thread_name_prefix="openai")
        future = self.pool.submit(self.openai._generate_one, prompt, self.settings, self.circuit)
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
