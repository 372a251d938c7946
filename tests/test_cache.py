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
import sys, time
from evalpipe.cache import GenerationCache
from evalpipe.records import Generation

folder, name, start = sys.argv[1], sys.argv[2], float(sys.argv[3])
for db in range(10):
    # Every writer opens each new cache at one instant, to provoke the race: if the clock
    # misses it the writers merely do not collide, so the clock never decides pass or fail.
    time.sleep(max(0.0, start + 0.3 * db - time.time()))
    cache = GenerationCache(f"{folder}/shared{db}.sqlite")
    for i in range(20):
        cache._put_many([(f"{name}-{i}", Generation(f"reply {i}"))])
        assert cache._get_many([f"{name}-{i}"])
    cache.close()
"""


def test_processes_share_a_new_cache_without_lock_errors_or_lost_entries(tmp_path):
    """Runs that open one new cache at the same instant all work: switching it to
    WAL mode does not wait on its own, which once failed a run with 'database is
    locked'."""
    import subprocess
    import sys
    import time

    names = ("a", "b", "c", "d", "e", "f")
    start = time.time() + 3.0  # past every writer's imports (to collide, never to decide)
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path), name, str(start)],
                              stderr=subprocess.PIPE, text=True) for name in names]
    errors = [p.communicate()[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * len(names), errors
    keys = [f"{n}-{i}" for n in names for i in range(20)]
    for db in range(10):
        cache = GenerationCache(tmp_path / f"shared{db}.sqlite")
        assert len(cache._get_many(keys)) == len(keys)
        cache.close()
