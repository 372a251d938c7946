"""Per-sample cost in units batching does not change: prefill compute attributed to
rows by the tokens they brought, prompt tokens served from the shared prefix, and the
scorer's cost field."""

from __future__ import annotations

import random

import helpers
import pytest

from evalpipe.backends.local import batching
from evalpipe.backends.local.batching import BatchGenerator, PrefixStore, common_prefix
from evalpipe.scoring.cost import decode_rate, probe_summary, sample_cost


@pytest.fixture(scope="module")
def tiny_llama():
    return helpers.tiny_llama()


def _prompt(rng, n):
    return [rng.randrange(3, 96) for _ in range(n)]


def test_one_batched_prefill_is_shared_by_the_tokens_each_row_brought(tiny_llama):
    rng = random.Random(1)
    # 40 and 48 tokens: close enough in length to be prefilled in one forward.
    prompts = [_prompt(rng, 40), _prompt(rng, 48)]
    gen = BatchGenerator(tiny_llama, [-1], 0, PrefixStore())
    rows = gen.generate(prompts, max_new_tokens=2, batch_size=2, prefix_reuse=False)
    a, b = (r.prefill_compute_ms for r in rows)
    # One measured forward shared by tokens: the ratio holds however long it took.
    assert a > 0 and b > 0
    assert a / b == pytest.approx(40 / 48)
    assert [r.prefix_tokens for r in rows] == [0, 0]


def test_rows_on_the_shared_prefix_count_its_tokens_and_share_its_prefill(tiny_llama,
                                                                         monkeypatch):
    # Every clock reading advances 1 ms: each forward measures the same, so what a row is
    # charged depends on the forwards it shared, never on how loaded the machine is.
    monkeypatch.setattr(batching, "time", helpers.FakeClock(tick=0.001))
    rng = random.Random(2)
    shared = _prompt(rng, 32)
    prompts = [shared + _prompt(rng, 8), shared + _prompt(rng, 9)]
    store = PrefixStore()
    gen = BatchGenerator(tiny_llama, [-1], 0, store)
    rows = gen.generate(prompts, max_new_tokens=2, batch_size=2, prefix_reuse=True)
    prefix = len(common_prefix(prompts))
    assert prefix >= len(shared)
    assert [r.prefix_tokens for r in rows] == [prefix, prefix]
    assert all(r.prompt_tokens == len(p) for r, p in zip(rows, prompts))
    first_prefill = gen.stats["prefilled_tokens"]
    assert first_prefill == sum(len(p) for p in prompts) - prefix  # the prefix once
    # The second session finds the prefix stored: only the rows' own tokens are computed,
    # so each row is charged less than when the prefix was prefilled for it.
    again = gen.generate(prompts, max_new_tokens=2, batch_size=2, prefix_reuse=True)
    assert store.hits >= 1
    assert [r.prefix_tokens for r in again] == [prefix, prefix]
    assert gen.stats["prefilled_tokens"] - first_prefill == sum(len(p) for p in prompts) \
        - 2 * prefix
    charged, charged_again = (sum(r.prefill_compute_ms for r in x) for x in (rows, again))
    assert charged_again == pytest.approx(1.0)  # the suffixes' one forward
    assert charged == pytest.approx(2.0)  # and, the first time, the prefix's own


def test_backend_generation_carries_the_attributed_cost(tiny_model_dir):
    from evalpipe.backends.base import GenerationSettings
    from evalpipe.backends.transformers_backend import TransformersBackend

    for mode in ("loop", "hf"):
        backend = TransformersBackend(str(tiny_model_dir), generation=mode, prefix_reuse=False)
        prompts = ["What is 12 times 7?" * 3, "What is 12 times 7? The answer" * 3]
        gens = backend.generate(prompts, GenerationSettings(max_new_tokens=2, batch_size=2))
        tokens = [g.prompt_tokens for g in gens]
        shares = [g.prefill_compute_ms for g in gens]
        assert all(s and s > 0 for s in shares), mode
        if mode == "hf":  # one padded prefill for both rows
            assert shares[0] / shares[1] == pytest.approx(tokens[0] / tokens[1])


def _turn(**kw):
    base = {"prompt_tokens": 100, "completion_tokens": 11, "prefill_ms": 50.0,
            "decode_ms": 100.0, "prefix_tokens": 60, "prefill_compute_ms": 5.0}
    return {**base, **kw}


def test_sample_cost_sums_turns_and_keeps_unknown_compute_unknown():
    cost = sample_cost({"turns": [_turn(), _turn(prompt_tokens=150, prefill_ms=10.0)],
                        "wall_ms": 400.0})
    assert cost["prompt_tokens"] == 250
    assert cost["prefix_tokens"] == 120
    assert cost["completion_tokens"] == 22
    assert cost["turns"] == 2
    assert cost["prefill_compute_ms"] == 10.0
    assert cost["ttft_ms"] == 50.0  # the first turn's, under load
    assert cost["wall_ms"] == 400.0
    # An HTTP backend cannot attribute compute: the field says unknown, not zero.
    http = sample_cost({"turns": [_turn(prefill_compute_ms=None)]})
    assert http["prefill_compute_ms"] is None


def test_probe_summary_per_cell():
    records = [
        {"cell_id": "a", "stop_reason": "answered",
         "turns": [_turn(prefill_ms=20.0, completion_tokens=11, decode_ms=100.0)]},
        {"cell_id": "a", "stop_reason": "answered",
         "turns": [_turn(prefill_ms=40.0, completion_tokens=21, decode_ms=100.0)]},
        {"cell_id": "a", "stop_reason": "infra_error", "turns": [_turn(prefill_ms=999.0)]},
        {"cell_id": "b", "stop_reason": "answered", "turns": [_turn(prefill_ms=7.0)]},
    ]
    summary = probe_summary(records)
    assert summary["a"]["n"] == 2  # the failed probe is left out
    assert summary["a"]["ttft_ms"]["mean"] == 30.0
    assert summary["a"]["decode_tps"]["mean"] == pytest.approx((100 + 200) / 2)
    assert summary["b"]["ttft_ms"]["mean"] == 7.0
    assert decode_rate([_turn(completion_tokens=1, decode_ms=0.0)]) is None


def test_a_cached_reply_has_no_times():
    """A reply from the generation cache: its wall time measured a cache look-up (0.5-3.9
    ms, below the time to first token of the same row) and its turn times another batch;
    every time is left out, tokens still count."""
    cost = sample_cost({"turns": [_turn(cached=True), _turn()], "wall_ms": 1.2})
    assert cost["cached_turns"] == 1
    assert cost["prompt_tokens"] == 200 and cost["turns"] == 2
    assert all(cost[f] is None for f in ("wall_ms", "ttft_ms", "prefill_ms", "decode_ms",
                                         "prefill_compute_ms"))
    assert sample_cost({"turns": [_turn()], "wall_ms": 400.0})["cached_turns"] == 0


def test_cached_samples_stay_out_of_the_cost_table_and_are_noted(tmp_path):
    from report_fixtures import BASE, samples_a, write_run

    from evalpipe._report.build import build_report
    from evalpipe._report.load import load_run
    from evalpipe._report.render import render_markdown

    samples = samples_a()
    for s in samples[:3]:  # three baseline samples served from the cache, "timed" at 2 ms
        assert s["cell_id"] == BASE
        s["wall_ms"] = 2.0
        for t in s["turns"]:
            t["cached"] = True
    data = build_report(load_run(write_run(tmp_path / "r", samples)))
    base = next(r for r in data["cost"] if r["cell_id"] == BASE)
    assert base["cached"] == 3
    assert base["fields"]["wall_ms"]["mean"] == 100.0 and base["fields"]["wall_ms"]["n"] == 3
    assert base["fields"]["prompt_tokens"]["n"] == 6
    assert f"`{BASE}` 3 of 6" in render_markdown(data)
