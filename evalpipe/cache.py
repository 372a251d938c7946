"""A persistent generation cache (SQLite), so no run pays twice for a reply.

The key is the model's identity (its describe() facts), the exact prompt and
the generation settings that change outputs; batch size is left out because
it only changes speed. Failed generations are never stored.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from dataclasses import asdict
from pathlib import Path

from evalpipe.backends.base import Backend, GenerationSession, GenerationSettings, run_dry
from evalpipe.paths import cache_dir
from evalpipe.records import Generation, ToolCall

# describe() facts that are not the model's identity: where it sits, how this machine runs it
MACHINE_FACTS = ("path", "linear_kernel", "engine")

BUSY_TIMEOUT_S = 60.0
_SCHEMA = """CREATE TABLE IF NOT EXISTS generations (
    key TEXT PRIMARY KEY, value TEXT NOT NULL, created REAL DEFAULT (julianday('now')))"""


class GenerationCache:
    def __init__(self, path: str | Path | None = None):
        default = os.environ.get("EVALPIPE_GENERATION_CACHE") or cache_dir() / "generations.sqlite"
        self.path = Path(path or default)
        # Several runs may share one cache: WAL lets readers and one writer work at
        # once, and the busy timeout makes a writer wait its turn instead of failing.
        self._db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, check_same_thread=False)
        self._db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        _switch_to_wal(self._db)
        self._db.execute(_SCHEMA)
        self._db.commit()
        self._lock = threading.Lock()
        self._model_keys: dict[int, str] = {}
        self.hits = self.misses = 0

    def _model_key(self, backend: Backend) -> str:
        if id(backend) not in self._model_keys:
            self._model_keys[id(backend)] = self.model_key(backend.describe())
        return self._model_keys[id(backend)]

    @staticmethod
    def model_key(facts: dict) -> str:
        """The model part of a key, from backend.describe() facts (as a manifest records
        them), so a reply can be looked up without loading the model. Where the model
        sits and which kernel multiplies on this machine are left out: like the batch
        size, they move logits by rounding only."""
        return json.dumps({k: v for k, v in facts.items() if k not in MACHINE_FACTS},
                          sort_keys=True, default=str)

    def lookup(self, model_key: str, prompt: str, settings: GenerationSettings
               ) -> Generation | None:
        """The stored reply to `prompt`, or None; counts as neither hit nor miss."""
        key = self.key(model_key, prompt, settings)
        return self._get_many([key]).get(key)

    @staticmethod
    def key(model_key: str, prompt: str, settings: GenerationSettings) -> str:
        gen = {k: v for k, v in settings.to_dict().items() if k != "batch_size"}
        blob = json.dumps([model_key, prompt, gen], sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode()).hexdigest()

    def generate(self, backend: Backend, prompts: list[str],
                 settings: GenerationSettings) -> list[Generation]:
        """Serve what the cache holds; generate the rest and store it."""
        return run_dry(self.session(backend, settings), prompts)

    def session(self, backend: Backend, settings: GenerationSettings) -> GenerationSession:
        """A backend session with this cache in front of it."""
        return _CachedSession(self, backend, settings)

    def _get_many(self, keys: list[str]) -> dict[str, Generation]:
        found: dict[str, Generation] = {}
        with self._lock:
            for lo in range(0, len(keys), 500):
                part = keys[lo: lo + 500]
                rows = self._db.execute(
                    f"SELECT key, value FROM generations WHERE key IN ({','.join('?' * len(part))})",
                    part).fetchall()
                for key, value in rows:
                    data = json.loads(value)
                    calls = data.pop("tool_calls", None)
                    gen = Generation(**data)
                    gen.tool_calls = [ToolCall(**c) for c in calls] if calls is not None else None
                    gen.cached = True
                    found[key] = gen
        return found

    def _put_many(self, items: list[tuple[str, Generation]]) -> None:
        rows = []
        for key, gen in items:
            data = asdict(gen)
            data.pop("cached")
            rows.append((key, json.dumps(data, ensure_ascii=False)))
        with self._lock:
            self._db.executemany("INSERT OR REPLACE INTO generations (key, value) VALUES (?, ?)",
                                 rows)
            self._db.commit()

    def close(self) -> None:
        self._db.close()


def _switch_to_wal(db: sqlite3.Connection) -> None:
    """Put the database in WAL mode. The switch needs the database to itself and,
    unlike other statements, fails at once instead of waiting when another
    process holds it (two runs opening a new cache together), so it is retried
    here for as long as the busy timeout would have waited."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


class _CachedSession(GenerationSession):
    """Cached replies come back at the next poll without touching the model; the
    rest go to the backend's own session and are stored as they come back."""

    def __init__(self, cache: GenerationCache, backend: Backend, settings: GenerationSettings):
        super().__init__(backend, settings)
        self.cache, self.inner = cache, backend.session(settings)
        self.model_key = cache._model_key(backend)
        self.ready: list[tuple[object, Generation]] = []
        self.keys: dict[object, str] = {}

    @property
    def pending(self) -> int:
        return len(self.ready) + self.inner.pending

    def submit(self, key, prompt: str, group=None) -> None:
        cache_key = self.cache.key(self.model_key, prompt, self.settings)
        found = self.cache._get_many([cache_key])
        if cache_key in found:
            self.cache.hits += 1
            self.ready.append((key, found[cache_key]))
        else:
            self.cache.misses += 1
            self.keys[key] = cache_key
            self.inner.submit(key, prompt, group=group)

    def poll(self):
        if self.ready:
            out, self.ready = self.ready, []
            return out
        out = self.inner.poll()
        fresh = [(self.keys.pop(key), gen) for key, gen in out]
        self.cache._put_many([(k, gen) for k, gen in fresh if gen.finish_reason != "error"])
        return out
