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
finish_reason "error" (stop reason infra_error), never an exception. A reply
that does not fit the wire shape (backends/openai_reply.py) becomes one with
finish_reason "malformed" (stop reason and category malformed_reply).

The API key is read from the environment variable named by `api_key_env` at
each request and never stored on the backend, in describe() or in errors.

Three parts: the wire shape (formats/openai.py), the retrying HTTP client
(backends/http_client.py) and this backend, which builds requests from prompts
and keeps `concurrency` of them in flight.
"""

from __future__ import annotations

import hashlib
import json
import queue
import threading
from typing import Any, Literal

from pydantic import Field, ValidationError

from evalpipe.backends.base import (
    Backend,
    GenerationSession,
    GenerationSettings,
    ModelEntry,
    run_dry,
)
from evalpipe.backends.http_client import Circuit, HttpClient, RequestFailed
from evalpipe.backends.openai_reply import MalformedReply, check_values
from evalpipe.errors import InputError
from evalpipe.formats.openai import wire_messages, wire_tools
from evalpipe.records import Generation
from evalpipe.schema import Section, input_error

# The probe of served_identity(): any fixed request whose greedy reply a model change alters.
PROBE = "Count from 1 to 10 in words, then name the capital of France."


class OpenAIOptions(Section):
    """What a `backend: openai` model entry sets besides its id and base_url: the one
    home of these options, their defaults and ranges (the config's model entry is this
    section; docs/backends.md says what each does)."""

    api_key_env: str | None = None  # the key itself never goes into a config
    concurrency: int = Field(4, ge=1)  # requests in flight
    timeout_s: float = Field(120.0, gt=0)
    max_retries: int = Field(4, ge=0)
    mode: Literal["chat", "text"] = "chat"
    model: str | None = None  # the name the server knows the model by; default: the id
    stream: Literal["auto", "on", "off"] | bool = "auto"
    backoff_s: float = Field(0.5, ge=0)
    max_backoff_s: float = Field(30.0, ge=0)
    chat_template: str | None = None  # mode text
    stop: list[str] | None = None
    extra_body: dict[str, Any] | None = None
    tool_choice: Any = None


class OpenAIBackend(Backend):
    def __init__(self, model_id: str, base_url: str, **options: Any):
        """`options`: the fields of OpenAIOptions."""
        try:
            o = OpenAIOptions.model_validate(options)
        except ValidationError as exc:
            raise input_error(exc, OpenAIOptions, prefix="models") from None
        if not base_url:
            raise InputError(f"model {model_id!r} has no base_url", field="models.base_url",
                             expected="the server's URL, e.g. http://127.0.0.1:8000/v1")
        stream = o.stream if isinstance(o.stream, str) else ("on" if o.stream else "off")
        self.model_id, self.mode = model_id, o.mode
        self.served_model = o.model or model_id
        self.base_url = base_url.rstrip("/")
        if not self.base_url.endswith("/v1"):
            self.base_url += "/v1"
        self.concurrency = o.concurrency
        self.client = HttpClient(self.base_url, api_key_env=o.api_key_env,
                                 timeout_s=o.timeout_s, max_retries=o.max_retries,
                                 backoff_s=o.backoff_s, max_backoff_s=o.max_backoff_s,
                                 stream=stream)
        self.extra_body = dict(o.extra_body or {})
        self.tool_choice = o.tool_choice
        self.template = None
        if o.mode == "text":
            from evalpipe.backends.templates import ChatTemplate

            self.template = ChatTemplate.from_spec(o.chat_template, stop=o.stop)
        self.stop = list(o.stop) if o.stop is not None else (self.template.stop if self.template
                                                             else [])
        self._served: dict[str, Any] | None = None  # served_identity(), once observed

    # -- contract ----------------------------------------------------------------------------
    @property
    def template_supports_tools(self) -> bool:
        return self.template.supports_tools if self.template is not None else True

    def describe(self) -> dict[str, Any]:
        facts: dict[str, Any] = {"model_id": self.model_id, "backend": "openai",
                                 "base_url": self.base_url, "mode": self.mode,
                                 "served_model": self.served_model}
        if self.template is not None:
            facts["chat_template_hash"] = self.template.hash
        if self.stop:
            facts["stop"] = self.stop
        if self.extra_body:
            facts["extra_body"] = self.extra_body
        if self.tool_choice is not None:
            facts["tool_choice"] = self.tool_choice
        return facts

    def served_identity(self) -> dict[str, Any]:
        """What answers behind `served_model`, asked once per backend: the server's
        /models entry for it (without `created`, which some servers set to the time of
        the request), and a fixed greedy probe's reply: the `model` the reply names and
        a hash of its text and calls. A model swapped behind the same name changes the
        probe's reply even where the server reports nothing new. {"unknown": why} when
        the probe got no reply (the server is down)."""
        if self._served is None:
            self._served = self._observe()
        return self._served

    def _observe(self) -> dict[str, Any]:
        listing = self.client.get_json("/models")
        entries = listing.get("data") if isinstance(listing, dict) else None
        listed = next((e for e in entries if isinstance(e, dict)
                       and e.get("id") == self.served_model), None) \
            if isinstance(entries, list) else None
        try:  # it goes into the manifest: text a file can hold, nested a little
            check_values(listed, "the /models entry", 8)
        except MalformedReply:
            listed = {"id": self.served_model, "unreadable": True}
        prompt = self.render([{"role": "user", "content": PROBE}], None)
        body = self._body(json.loads(prompt), GenerationSettings(max_new_tokens=24))
        path = "/chat/completions" if body.pop("_mode") == "chat" else "/completions"
        circuit = Circuit()
        circuit.trip()  # one attempt: a dead server is not waited for twice
        try:
            reply = self.client.post(path, body, circuit)
        except (RequestFailed, MalformedReply) as exc:
            return {"unknown": self.client.clean(str(exc))[:300]}
        calls = [c.to_dict() for c in reply.tool_calls or ()]
        probe = hashlib.sha256(json.dumps([reply.text, calls], sort_keys=True,
                                          ensure_ascii=False).encode()).hexdigest()[:16]
        return {"listed": {k: v for k, v in listed.items() if k != "created"} if listed else None,
                "model": reply.model, "probe": probe}

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
            return self.client.post(path, body, circuit)
        except RequestFailed as exc:
            return Generation("", finish_reason="error", error=self.client.clean(str(exc)))
        except MalformedReply as exc:  # a verdict on the endpoint: recorded, not retried
            return Generation(self.client.clean(exc.excerpt), finish_reason="malformed",
                              error=self.client.clean(exc.reason))
        except Exception as exc:  # noqa: BLE001 - an odd reply fails this prompt, not the batch
            return Generation("", finish_reason="error",
                              error=self.client.clean(
                                  f"openai backend: {type(exc).__name__}: {exc}"))

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

class OpenAIModel(ModelEntry, OpenAIOptions):
    """A `backend: openai` entry: any OpenAI-compatible server (docs/backends.md). An API
    key has no key here: `api_key_env` names the variable that holds it."""

    base_url: str

    def load(self) -> Backend:
        return OpenAIBackend(self.id, self.base_url,
                             **self.model_dump(exclude={"id", "backend", "base_url"}))


class _InFlightSession(GenerationSession):
    """Each submitted prompt goes out at once (up to `concurrency` in flight); `poll`
    returns the replies that have arrived, so a conversation's next turn is sent while
    other requests are still running and the server's batch stays full.

    The requests run in daemon threads: a process stopped at once (a second SIGTERM)
    exits without waiting for a server that holds its requests open (pool threads
    would be joined at exit, for as long as each request takes)."""

    def __init__(self, backend: OpenAIBackend, settings: GenerationSettings):
        super().__init__(backend, settings)
        self.openai = backend  # typed: the base class knows it only as a Backend
        self.circuit = Circuit()
        self.jobs: queue.Queue[tuple[Any, str] | None] = queue.Queue()
        self.replies: queue.Queue[tuple[Any, Generation]] = queue.Queue()
        self.in_flight = 0
        self.workers = 0  # threads started and not yet told to stop

    @property
    def pending(self) -> int:
        return self.in_flight

    def submit(self, key, prompt: str, group=None) -> None:
        self.in_flight += 1
        self.jobs.put((key, prompt))
        if self.workers < min(self.openai.concurrency, self.in_flight):
            self.workers += 1
            threading.Thread(target=self._work, name="openai", daemon=True).start()

    def _work(self) -> None:
        while (job := self.jobs.get()) is not None:
            key, prompt = job
            self.replies.put((key, self.openai._generate_one(prompt, self.settings,
                                                             self.circuit)))

    def poll(self):
        if not self.in_flight:
            return []
        out = [self.replies.get()]  # _generate_one never raises
        while True:
            try:
                out.append(self.replies.get_nowait())
            except queue.Empty:
                break
        self.in_flight -= len(out)
        if not self.in_flight:  # idle: let the threads go until the next submit
            for _ in range(self.workers):
                self.jobs.put(None)
            self.workers = 0
        return out
