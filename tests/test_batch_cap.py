"""The batch cap comes from the measured decode step time and the rows the memory
holds, within generation.batch_size, and the run's log says which bound decided."""

from __future__ import annotations

import random

import helpers
import pytest

from evalpipe.backends.local import batching
from evalpipe.backends.local.batching import BatchGenerator, PrefixStore


@pytest.fixture(scope="module")
def tiny_llama():
    return helpers.tiny_llama(hidden_size=32, intermediate_size=64, heads=2)


def test_cap_follows_the_step_rate_memory_and_batch_size(tiny_llama, monkeypatch):
    gen = BatchGenerator(tiny_llama, [2], 0, PrefixStore())
    gen.step_cost = (0.010, 0.010)  # compute-bound early: 95% of peak at 19 rows
    assert gen.rate_cap(256, 100, 50) == 19 and "(the step rate)" in gen.cap_note
    gen.step_cost = (0.050, 0.0001)  # weight reads dominate: more rows keep paying
    assert gen.rate_cap(256, 100, 50) == 256 and "configured batch_size" in gen.cap_note
    gen.step_cost = (0.280, batching.ROW_COST_FLOOR)  # more rows timed no slower: no rate
    assert gen.rate_cap(256, 100, 50) == 256 and "no cost per row measurable" in gen.cap_note
    assert "tokens/s" not in gen.cap_note
    per_row = gen.kv_bytes_per_token() * 150
    monkeypatch.setattr(batching, "available_memory", lambda device: 40 * per_row * 8)
    cap = gen.rate_cap(256, 100, 50)
    assert 1 <= cap < 40 and "(the key/value memory)" in gen.cap_note


def test_measured_step_cost_grows_with_rows(tiny_llama):
    gen = BatchGenerator(tiny_llama, [2], 0, PrefixStore())
    a, c = gen.measure_step(64)
    assert a >= 0 and c > 0 and gen.measure_step(999) == (a, c)  # measured once


def test_session_decodes_at_most_the_chosen_cap_and_logs_it(tiny_llama):
    gen = BatchGenerator(tiny_llama, [2], 0, PrefixStore())
    gen.step_cost = (0.001, 0.001)  # -> 19 rows
    lines = []
    gen.log = lines.append
    rows_per_step = []
    forward = gen._forward

    def counted(layers, ids, mask, pos, state=None):
        if ids.shape[1] == 1:
            rows_per_step.append(ids.shape[0])
        return forward(layers, ids, mask, pos, state)

    gen._forward = counted
    rng = random.Random(0)
    prompts = [[rng.randrange(3, 96) for _ in range(rng.randrange(2, 12))] for _ in range(80)]
    rows = gen.generate(prompts, max_new_tokens=6, batch_size=256)
    assert len(rows) == 80 and all(r.error is None for r in rows)
    assert max(rows_per_step) == 19
    assert len(lines) == 1 and lines[0].startswith("batch cap 19 rows (the step rate)")
    # Few prompts: nothing is measured, the memory bound alone decides.
    lines.clear()
    gen.generate(prompts[:10], max_new_tokens=4, batch_size=256)
    assert lines == []
