"""The backend contract: render a conversation to a prompt, generate replies.

A prompt is an opaque string the backend understands (chat-template text for
local models, canonical JSON for HTTP APIs); it is also the generation cache
key, so it must hold everything that decides the reply.

A `models:` entry of the config is a `ModelEntry`: a model id, the backend that runs
it, and that backend's options, checked by the entry's section (each backend
declares its own and registers it in evalpipe.backends.BACKENDS); `load` makes the
backend. The generation settings are a section too: the config's `generation:` is
this `GenerationSettings`, with its defaults and ranges.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable
from typing import Any

from pydantic import ConfigDict, Field

from evalpipe.records import Generation
from evalpipe.schema import Section

# Models without a chat template (base models) get this plain, documented one.
PLAIN_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] == 'system' %}{{ m['content'] }}\n\n"
    "{% elif m['role'] == 'user' %}User: {{ m['content'] }}\n\n"
    "{% elif m['role'] == 'assistant' %}Assistant: {{ m['content'] }}\n\n"
    "{% else %}Tool: {{ m['content'] }}\n\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}"
)
_PLAIN_NEXT_TURN = re.compile(r"\n+(?:User|Tool|Assistant):")


def cut_plain_turn(text: str) -> str:
    """A base model on the plain template writes the next turns itself: keep its own."""
    match = _PLAIN_NEXT_TURN.search(text)
    return text[: match.start()] if match else text


class GenerationSettings(Section):
    """How replies are sampled: the config's `generation:` section, and what every
    backend and the cache key read (frozen: a repeat gets a copy with its own seed)."""

    model_config = ConfigDict(frozen=True)

    max_new_tokens: int = Field(256, ge=1)
    temperature: float = Field(0.0, ge=0)  # 0 means greedy
    top_p: float = Field(1.0, gt=0, le=1)
    seed: int = 0
    batch_size: int = Field(256, ge=1)  # rows decoded together at most (the cap may be fewer)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump()


class GenerationSession:
    """Replies to prompts submitted over time, for an agent loop that submits a
    conversation's next turn as soon as the last one is handled.

    `poll` returns at least one (key, Generation) while anything is pending. This
    default sends everything submitted since the last poll through one
    `backend.generate` call; a backend that can add prompts to a running batch
    overrides `Backend.session`. `submit`'s `group` names prompts that share a
    prefix (the cells of a model that share a session submit one group each); a
    session that reuses prefixes keeps one per group, the others ignore it.
    """

    def __init__(self, backend: Backend, settings: GenerationSettings):
        self.backend, self.settings = backend, settings
        self.queue: list[tuple[Hashable, str]] = []
        # Asked between units of work (a decode step): True means stop now and drop what
        # is unfinished; the caller runs it again later (a run's first SIGTERM).
        self.should_stop: Callable[[], bool] = _never

    @property
    def pending(self) -> int:
        return len(self.queue)

    def submit(self, key: Hashable, prompt: str, group: Hashable = None) -> None:
        self.queue.append((key, prompt))

    def poll(self) -> list[tuple[Hashable, Generation]]:
        batch, self.queue = self.queue, []
        if not batch:
            return []
        gens = self.backend.generate([prompt for _, prompt in batch], self.settings)
        return [(key, gen) for (key, _), gen in zip(batch, gens)]


def _never() -> bool:
    return False


def run_dry(session: GenerationSession, prompts: list[str], progress=None) -> list[Generation]:
    """Submit every prompt, poll until all are answered: the replies in prompt order."""
    for i, prompt in enumerate(prompts):
        session.submit(i, prompt)
    replies: dict[Hashable, Generation] = {}
    while session.pending:
        for key, gen in session.poll():
            replies[key] = gen
            if progress is not None:
                progress(1)
    return [replies[i] for i in range(len(prompts))]


class Backend(ABC):
    model_id: str = ""

    @property
    def template_supports_tools(self) -> bool:
        return False

    @abstractmethod
    def render(self, messages: list[dict[str, Any]], tools: list[dict] | None) -> str:
        """The exact prompt for one conversation."""

    @abstractmethod
    def generate(self, prompts: list[str], settings: GenerationSettings,
                 progress=None) -> list[Generation]:
        """One reply per prompt, in order. Failures come back as Generations with
        finish_reason 'error', never as exceptions for the whole batch."""

    def session(self, settings: GenerationSettings) -> GenerationSession:
        """A session that prompts can be submitted to one at a time."""
        return GenerationSession(self, settings)

    def probe_session(self, settings: GenerationSettings) -> GenerationSession:
        """A session for timing requests one at a time as a single user would see them:
        nothing is reused from earlier requests (a backend that keeps prompt prefixes
        overrides this to start cold)."""
        return self.session(settings)

    def describe(self) -> dict[str, Any]:
        """Facts for the manifest; those that are not `MACHINE_FACTS` are the model's
        identity (`model_identity`): the cell fingerprint and the cache key."""
        return {"model_id": self.model_id}

    def log_line(self) -> str | None:
        """One line for the run's log on how this backend runs its model (which path, and
        why); None: nothing to say."""
        return None

    def served_identity(self) -> dict[str, Any] | None:
        """What the model that answers says it is, observed at run time, for a backend
        whose describe() cannot know it (a server may swap the model behind a name):
        part of the generation-cache key and recorded in the manifest, not in the
        fingerprint. None: describe() identifies the model fully. A dict with
        "unknown" (why): it could not be observed, so no cached reply may be used."""
        return None


# describe() facts about this machine, not the model: where the model sits and how this
# process multiplies (a C kernel that did not build in time on a loaded machine falls back
# to torch's products). They move logits by rounding only, like the batch size, so they
# decide neither a cell's fingerprint (a resume, a comparison) nor a cached reply.
MACHINE_FACTS = ("path", "linear_kernel", "engine")


def model_identity(facts: dict[str, Any]) -> dict[str, Any]:
    """The describe() facts that identify the model: all but `MACHINE_FACTS`."""
    return {k: v for k, v in facts.items() if k not in MACHINE_FACTS}


class ModelEntry(Section):
    """A `models:` entry: a model id, its backend, and the options that backend declares
    in its own entry (a subclass, registered in evalpipe.backends.BACKENDS)."""

    id: str
    backend: str

    def record(self) -> dict[str, Any]:
        """The entry as recorded with each cell and hashed: id and backend, and every
        option that is not its default (spelling a default out changes nothing)."""
        return {"id": self.id, "backend": self.backend,
                **self.model_dump(exclude_defaults=True, exclude_none=True)}

    def load(self) -> Backend:
        """The backend, with this model loaded (or reached)."""
        raise NotImplementedError(f"backend {self.backend!r} declares no load()")

