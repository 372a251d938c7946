"""The cells of a model share one generation session: a decode step serves the rows of
every cell, each row attending to its own cell's prefix, and the replies, records,
verdicts, cache and resume are those of the cells run one after another."""

from __future__ import annotations

import itertools
import json
import random
import re
from pathlib import Path

import helpers
import pytest
from helpers import greedy_reference as reference
from test_runs import make_config, strip_timings
from test_turn_reuse import converse

from evalpipe.backends.local.batching import BatchGenerator, PrefixStore
from evalpipe.config import load_config
from evalpipe.engine import Engine
from evalpipe.runner import execute_run

pytestmark = pytest.mark.usefixtures("one_torch_thread")

EOS = 2


@pytest.fixture(scope="module")
def tiny_llama():
    return helpers.tiny_llama(max_positions=1024, eos=EOS)

@pytest.fixture(scope="module")
def engine_llama():
    """The same weights for the engine, which packs the model it runs (the references
    run on `tiny_llama`, never packed)."""
    return helpers.tiny_llama(max_positions=1024, eos=EOS)


def two_cells(n: int = 6) -> dict[tuple[int, int], list[int]]:
    """Prompts of two cells: each cell's on its own 40-token system prompt, the two alike
    for their first 20 tokens (one system prompt, then tools in one cell only)."""
    rng = random.Random(7)
    common = [rng.randrange(3, 96) for _ in range(20)]
    heads = [common + [rng.randrange(3, 96) for _ in range(20)] for _ in range(2)]
    return {(cell, i): heads[cell] + [rng.randrange(3, 96) for _ in range(rng.randrange(1, 25))]
            for cell in (0, 1) for i in range(n)}


def decode_steps_by_prefixes(gen: BatchGenerator) -> list[set[int]]:
    """Spy on `gen`: for each decode step, the prefix ids its rows attend to."""
    seen: list[set[int]] = []
    forward = gen._forward

    def spy(layers, ids, mask, pos, state=None):
        if ids.shape[1] == 1 and state is not None:
            seen.append(set(state.prefix.tolist()) - {-1})
        return forward(layers, ids, mask, pos, state)

    gen._forward = spy
    return seen


@pytest.mark.parametrize("kernels", ["on", "off"])
def test_cells_decode_together_each_on_its_own_prefix(tiny_llama, engine_llama, kernels,
                                                       monkeypatch):
    if kernels == "off":
        monkeypatch.setenv("EVALPIPE_NATIVE_KERNELS", "0")
    prompts = two_cells()
    gen = BatchGenerator(engine_llama, [EOS], 0, PrefixStore())
    steps = decode_steps_by_prefixes(gen)
    session = gen.session(max_new_tokens=12, batch_size=16)
    for (cell, i), prompt in prompts.items():
        session.submit((cell, i), prompt, group=cell)
    got = {}
    while session.pending:
        got.update(session.step())
    for key, prompt in prompts.items():
        assert got[key].tokens == reference(tiny_llama, prompt, 12, EOS), key
    # Each cell got its own 40-token prefix (not the 20 tokens the two share), prefilled
    # once, and the decode steps served both cells' rows.
    assert [e.tokens for e in session.prefixes.entries] == [prompts[(0, 0)][:40],
                                                            prompts[(1, 0)][:40]]
    assert all(got[key].prefix_tokens == 40 for key in prompts)
    assert {0, 1} in steps


def test_a_cells_later_turns_reuse_their_cache_beside_other_cells(tiny_llama, engine_llama):
    """Conversations of two cells (groups) in one session: every turn's reply is
    generate's, and later turns still prefill only what is new."""
    gen = BatchGenerator(engine_llama, [EOS], 0, PrefixStore())
    session_of = gen.session

    def grouped(**kwargs):  # converse() submits by key; conversation k is in cell k % 2
        session = session_of(**kwargs)
        submit = session.submit
        session.submit = lambda key, prompt: submit(key, prompt, group=key % 2)
        return session

    gen.session = grouped
    asked = converse(gen, EOS, batch_size=4)
    assert len(asked) == 18
    for prompt, reply in asked:
        assert reply == reference(tiny_llama, prompt, 12, EOS)
    assert gen.stats["turn_reused_tokens"] > 0


def counting(opened: list, fail_at_poll: int | None = None):
    """A session opener that counts the sessions and can interrupt one mid-run."""

    def open_session(backend, settings):
        session = backend.session(settings)
        opened.append(session)
        polls, poll = itertools.count(), session.poll

        def interrupting_poll():
            if next(polls) == fail_at_poll:
                raise KeyboardInterrupt
            return poll()

        session.poll = interrupting_poll
        return session

    return open_session


def run_dir_of(out: Path) -> Path:
    (run,) = [p for p in out.iterdir() if p.name != "latest"]
    return run


def samples_of(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]


def scores_of(run: Path) -> dict:
    return strip_timings(json.loads((run / "scores.json").read_text()))


@pytest.fixture
def grid_path(tmp_path, tiny_model_dir) -> Path:
    """Three cells of the tiny model (no tools; hermes and json with the calculator)."""
    return make_config(tmp_path, tiny_model_dir, n=12, toolsets=["none", "calculator"],
                       formats=["hermes", "json"],
                       generation={"max_new_tokens": 12, "batch_size": 4})


@pytest.fixture
def grid(grid_path):
    config = load_config(grid_path)
    assert len(config.cells()) == 3
    return config


def test_a_grid_run_in_one_session_equals_its_cells_one_after_another(grid, tmp_path,
                                                                      monkeypatch):
    monkeypatch.setenv("EVALPIPE_GENERATION_CACHE", str(tmp_path / "gen.sqlite"))
    alone = execute_run(grid, tmp_path / "alone", use_cache=False, echo=lambda line: None,
                        engine=Engine(shared=False))
    opened = []
    together = execute_run(grid, tmp_path / "together", use_cache=False,
                           echo=lambda line: None, engine=Engine(counting(opened)))
    assert len(opened) == 1  # one session served the three cells
    a, b = samples_of(alone), samples_of(together)
    assert len(a) == 36
    assert [strip_timings(s) for s in b] == [strip_timings(s) for s in a]  # in grid order
    assert scores_of(together) == scores_of(alone)
    assert json.loads((together / "manifest.json").read_text())["cells"].keys() == \
        json.loads((alone / "manifest.json").read_text())["cells"].keys()


def test_a_grid_run_interrupted_mid_run_resumes_to_the_same_records(grid, tmp_path,
                                                                   monkeypatch):
    monkeypatch.setenv("EVALPIPE_GENERATION_CACHE", str(tmp_path / "gen.sqlite"))
    alone = execute_run(grid, tmp_path / "alone", use_cache=False, echo=lambda line: None,
                        engine=Engine(shared=False))
    out = tmp_path / "together"
    with pytest.raises(KeyboardInterrupt):
        execute_run(grid, out, use_cache=False, echo=lambda line: None,
                    engine=Engine(counting([], fail_at_poll=6)))
    run = run_dir_of(out)
    written = samples_of(run)
    assert 0 < len(written) < 36
    assert len({s["cell_id"] for s in written}) > 1  # the cells ran together
    execute_run(grid, out, resume=run, use_cache=False, echo=lambda line: None,
                engine=Engine(counting([])))
    assert [strip_timings(s) for s in samples_of(run)] == \
        [strip_timings(s) for s in samples_of(alone)]
    assert scores_of(run) == scores_of(alone)


def test_a_grid_rerun_from_the_cache_writes_the_same_file(grid, tmp_path, monkeypatch):
    monkeypatch.setenv("EVALPIPE_GENERATION_CACHE", str(tmp_path / "gen.sqlite"))
    first = execute_run(grid, tmp_path / "a", echo=lambda line: None)
    second = execute_run(grid, tmp_path / "b", echo=lambda line: None)
    assert all(t["cached"] for s in samples_of(second) for t in s["turns"])
    assert [strip_timings(s) for s in samples_of(second)] == \
        [strip_timings(s) for s in samples_of(first)]


def test_cells_with_other_generation_settings_do_not_share_a_session():
    from evalpipe.backends.base import GenerationSettings

    class _Cell:
        def __init__(self, backend, seed):
            self.backend, self.generation = backend, GenerationSettings(seed=seed)

    backend = object()
    with pytest.raises(ValueError, match="same generation settings"):
        list(Engine().run_cells([(_Cell(backend, 0), []), (_Cell(backend, 1), [])], "r"))


def test_bench_overhead_times_the_shared_session_and_the_cells_apart_alike(
        tmp_path, tiny_model_dir, monkeypatch, capsys):
    """bench/bench_overhead.py's two modes on the tiny model: the same replies, and the
    shared session in fewer decode steps (what the benchmark's speed-up comes from: with
    rows to spare in a step, one step serves several cells)."""
    grid_path = make_config(tmp_path, tiny_model_dir, n=12, toolsets=["none", "calculator"],
                            formats=["hermes", "json"],
                            generation={"max_new_tokens": 12, "batch_size": 64})
    monkeypatch.syspath_prepend(str(helpers.REPO / "bench"))
    import bench_overhead
    import machine

    from evalpipe.backends import transformers_backend as tb

    runs = {}
    for mode in ("together", "apart"):
        with monkeypatch.context() as m:  # the benchmark wraps these methods for its timings
            m.setattr(tb.TransformersBackend, "__init__", tb.TransformersBackend.__init__)
            m.setattr(tb._LoopSession, "submit", tb._LoopSession.submit)
            m.setattr(tb._LoopSession, "poll", tb._LoopSession.poll)
            m.setattr(machine, "matmul_rate", lambda: 1e11)  # the floor's probe, not tested
            m.chdir(tmp_path)
            args = ["--config", str(grid_path), "--keep", str(tmp_path / mode)]
            assert bench_overhead.main(args + (["--cells-apart"] if mode == "apart" else [])) == 0
        printed = capsys.readouterr().out
        assert ("one session per model" if mode == "together" else "each in its own session") \
            in printed
        steps = int(re.search(r"; (\d+) decode steps", printed).group(1))
        runs[mode] = [strip_timings(s) for s in samples_of(run_dir_of(tmp_path / mode))], steps
    (together, shared_steps), (apart, apart_steps) = runs["together"], runs["apart"]
    assert len(together) == 36 and together == apart
    assert 0 < shared_steps < apart_steps
