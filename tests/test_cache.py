"""The generation cache: hits are identical, errors are never stored."""

from __future__ import annotations

from helpers import ScriptedBackend

from evalpipe.backends.base import GenerationSettings
from evalpipe.cache import GenerationCache
from evalpipe.records import Generation


def test_second_request_is_served_from_the_cache(tmp_path):
    backend = ScriptedBackend(lambda p: p.upper())
    cache = GenerationCache(tmp_path / "c.sqlite")
    gen = GenerationSettings()
    first = cache.generate(backend, ["a", "b"], gen)
    again = GenerationCache(tmp_path / "c.sqlite").generate(backend, ["b", "a", "c"], gen)
    assert backend.calls == 3  # a, b, then only c
    assert [g.text for g in again] == ["B", "A", "C"]
    assert [g.cached for g in again] == [True, True, False] and not any(g.cached for g in first)
    assert again[1].prompt_tokens == first[0].prompt_tokens


def test_settings_that_change_outputs_change_the_key(tmp_path):
    backend = ScriptedBackend(lambda p: "x")
    cache = GenerationCache(tmp_path / "c.sqlite")
    cache.generate(backend, ["a"], GenerationSettings(max_new_tokens=8))
    cache.generate(backend, ["a"], GenerationSettings(max_new_tokens=8, batch_size=2))
    assert backend.calls == 1  # batch size only changes speed
    cache.generate(backend, ["a"], GenerationSettings(max_new_tokens=9))
    assert backend.calls == 2
    cache.generate(ScriptedBackend(lambda p: "x", model_id="other"), ["a"],
                   GenerationSettings(max_new_tokens=8))
    assert cache.misses == 3


def test_errors_are_not_cached(tmp_path):
    failing = ScriptedBackend(lambda p: Generation("", finish_reason="error", error="down"))
    cache = GenerationCache(tmp_path / "c.sqlite")
    cache.generate(failing, ["a"], GenerationSettings())
    cache.generate(failing, ["a"], GenerationSettings())
    assert failing.calls == 2


_WRITER = """
import sys
from evalpipe.cache import GenerationCache
from evalpipe.records import Generation

cache = GenerationCache(sys.argv[1])
for i in range(int(sys.argv[3])):
    cache._put_many([(f"{sys.argv[2]}-{i}", Generation(f"reply {i}"))])
    assert cache._get_many([f"{sys.argv[2]}-{i}"])
cache.close()
"""


def test_two_processes_share_the_cache_without_lock_errors_or_lost_entries(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "shared.sqlite"
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(path), name, "300"],
                              stderr=subprocess.PIPE, text=True) for name in ("a", "b")]
    errors = [p.communicate()[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors
    cache = GenerationCache(path)
    keys = [f"{n}-{i}" for n in ("a", "b") for i in range(300)]
    assert len(cache._get_many(keys)) == 600
    cache.close()
