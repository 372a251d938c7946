"""A persistent generation cache (SQLite), so no run pays twice for a reply.

The key is the model's identity (its describe() facts, with a local model's weights
digest, and what a server says it runs: Backend.served_identity), the exact prompt
and the generation settings that change outputs; batch size is left out because
it only changes speed. Failed generations and malformed replies are never stored.

The cache is an optimisation, never a reason for a run to fail: a cache that
cannot be opened, read or written (a corrupt file, a read-only or full disk, a
lock another process holds for longer than the busy timeout) is given up for
the rest of the process with one DataWarning, and every reply is generated.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from evalpipe.backends.base import (
    Backend,
    GenerationSession,
    GenerationSettings,
    model_identity,
    run_dry,
)
from evalpipe.errors import DataWarning
from evalpipe.paths import cache_root
from evalpipe.records import Generation, ToolCall

# How long a write waits for another process's write to end. Writes take milliseconds;
# a cache locked for longer than this is held by something else, and is given up.
BUSY_TIMEOUT_S = float(os.environ.get("EVALPIPE_CACHE_BUSY_S") or 10.0)
_SCHEMA = """CREATE TABLE IF NOT EXISTS generations (
    key TEXT PRIMARY KEY, value TEXT NOT NULL, created REAL DEFAULT (julianday('now')))"""
# What a broken cache raises: SQLite's errors, the file system's, and values that do
# not decode into a Generation.
_BROKEN = (sqlite3.Error, OSError, ValueError, TypeError, KeyError)


class GenerationCache:
    def __init__(self, path: str | Path | None = None):
        self.problem: str | None = None  # why the cache was given up; None while it works
        self._lock = threading.Lock()
        self._model_keys: dict[int, str | None] = {}
        self.hits = self.misses = 0
        self._db: sqlite3.Connection | None = None
        self.path = Path(path or os.environ.get("EVALPIPE_GENERATION_CACHE")
                         or cache_root() / "generations.sqlite")
        with self._guard("open"):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Several runs may share one cache: WAL lets readers and one writer work at
            # once, and the busy timeout makes a writer wait its turn instead of failing.
            self._db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S,
                                       check_same_thread=False)
            self._db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            _switch_to_wal(self._db)
            self._db.execute(_SCHEMA)
            self._db.commit()

    @contextlib.contextmanager
    def _guard(self, what: str) -> Iterator[None]:
        """Run one cache operation; if the cache is broken, give it up (one warning)."""
        try:
            yield
        except _BROKEN as exc:
            self.give_up(f"cannot {what} it ({type(exc).__name__}: {str(exc)[:200]})")

    def give_up(self, why: str) -> None:
        """Stop using the cache for the rest of this process, saying so once."""
        if self.problem is None:
            self.problem = why
            warnings.warn(DataWarning(f"generation cache {self.path}: {why}; going on without "
                                      "it: every reply is generated"), stacklevel=3)
        db, self._db = self._db, None
        if db is not None:
            with contextlib.suppress(sqlite3.Error):
                db.close()

    def _model_key(self, backend: Backend) -> str | None:
        """The model part of `backend`'s keys; None when what answers behind it cannot
        be identified (its server did not answer the probe): then nothing is read from or
        written to the cache for it."""
        if id(backend) not in self._model_keys:
            served = backend.served_identity()
            if served is not None and "unknown" in served:
                warnings.warn(DataWarning(
                    f"generation cache: not used for model {backend.model_id!r}: the model "
                    f"its server runs could not be identified ({served['unknown']})"),
                    stacklevel=3)
                self._model_keys[id(backend)] = None
            else:
                self._model_keys[id(backend)] = self.model_key(backend.describe(), served)
        return self._model_keys[id(backend)]

    @staticmethod
    def model_key(facts: dict, served: dict | None = None) -> str:
        """The model part of a key, from backend.describe() facts (as a manifest records
        them), so a reply can be looked up without loading the model, and what the
        server says it runs (Backend.served_identity, recorded as cells[...]["served"]).
        Where the model sits and which kernel multiplies on this machine are left out:
        like the batch size, they move logits by rounding only."""
        key = model_identity(facts)
        if served is not None:
            key["served"] = served
        return json.dumps(key, sort_keys=True, default=str)

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
        with self._lock, self._guard("read"):
            for lo in range(0, len(keys), 500):
                if self._db is None:
                    break
                part = keys[lo: lo + 500]
                marks = ",".join("?" * len(part))
                rows = self._db.execute(
                    f"SELECT key, value FROM generations WHERE key IN ({marks})", part).fetchall()
                for key, value in rows:
                    found[key] = _generation(json.loads(value))
        return found

    def _put_many(self, items: list[tuple[str, Generation]]) -> None:
        rows = []
        for key, gen in items:
            data = asdict(gen)
            data.pop("cached")
            rows.append((key, json.dumps(data, ensure_ascii=False)))
        with self._lock, self._guard("write"):
            if self._db is not None and rows:
                self._db.executemany(
                    "INSERT OR REPLACE INTO generations (key, value) VALUES (?, ?)", rows)
                self._db.commit()

    def close(self) -> None:
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
            self._db = None


def _generation(data: dict[str, Any]) -> Generation:
    """A stored reply back as a Generation (TypeError/KeyError when it is not one)."""
    calls = data.pop("tool_calls", None)
    gen = Generation(**data)
    gen.tool_calls = [ToolCall(**c) for c in calls] if calls is not None else None
    gen.cached = True
    return gen


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
        if self.model_key is None:  # not identified: the backend answers, nothing is kept
            self.cache.misses += 1
            self.inner.submit(key, prompt, group=group)
            return
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
        self.inner.should_stop = self.should_stop  # the backend's session is the one that stops
        out = self.inner.poll()
        fresh = [(self.keys.pop(key), gen) for key, gen in out if key in self.keys]
        self.cache._put_many([(k, gen) for k, gen in fresh
                              if gen.finish_reason not in ("error", "malformed")])
        return out
