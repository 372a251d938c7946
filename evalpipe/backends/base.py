"""The backend contract: render a conversation to a prompt, generate replies.

A prompt is an opaque string the backend understands (chat-template text for
local models, canonical JSON for HTTP APIs); it is also the generation cache
key, so it must hold everything that decides the reply.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable
from dataclasses import asdict, dataclass
from typing import Any

from evalpipe.records import Generation

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


@dataclass(frozen=True)
class GenerationSettings:
    max_new_tokens: int = 256
    temperature: float = 0.0  # 0 means greedy
    top_p: float = 1.0
    seed: int = 0
    batch_size: int = 256  # rows decoded together at most (the measured cap may be fewer)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
        """Facts for the manifest and the cell fingerprint."""
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
