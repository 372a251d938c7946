"""The transformers backend's batching loop: greedy outputs equal `model.generate`'s,
with and without shared-prefix reuse, at any batch size; per-row timings."""

from __future__ import annotations

import random
from collections import Counter

import helpers
import pytest
from helpers import greedy_reference as reference

from evalpipe.backends.base import GenerationSettings
from evalpipe.backends.local import batching
from evalpipe.backends.local.batching import BatchGenerator, PrefixStore, common_prefix, supported

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tiny_llama():
    return helpers.tiny_llama()


@pytest.fixture(scope="module")
def engine_llama():
    """The same weights for the engine: it packs the model it runs (the references run on
    `tiny_llama`, never packed)."""
    return helpers.tiny_llama()


@pytest.fixture(scope="module")
def prompts_and_eos(tiny_llama):
    rng = random.Random(0)
    shared = [rng.randrange(3, 96) for _ in range(40)]
    prompts = [shared + [rng.randrange(3, 96) for _ in range(rng.randrange(1, 30))]
               for _ in range(12)]
    # An end token the model often produces, so rows stop at different steps.
    counts = Counter(t for p in prompts for t in reference(tiny_llama, p, 20, eos=-1))
    eos = counts.most_common(3)[2][0]
    refs = [reference(tiny_llama, p, 20, eos) for p in prompts]
    assert len({len(r) for r in refs}) > 3, "rows should end at different steps"
    return prompts, eos, refs


def test_tiny_model_is_supported(tiny_llama):
    assert supported(tiny_llama)


@pytest.mark.parametrize("batch_size", [1, 3, 5, 16])
@pytest.mark.parametrize("reuse", [False, True])
def test_loop_equals_generate(tiny_llama, engine_llama, prompts_and_eos, batch_size, reuse):
    prompts, eos, refs = prompts_and_eos
    gen = BatchGenerator(engine_llama, [eos], 0, PrefixStore())
    rows = gen.generate(prompts, max_new_tokens=20, batch_size=batch_size, prefix_reuse=reuse)
    assert [r.tokens for r in rows] == refs
    assert [r.stopped for r in rows] == [len(r) < 20 for r in refs]
    assert all(r.prompt_tokens == len(p) for r, p in zip(rows, prompts))
    if reuse:
        assert gen.shared_attention  # the prefix was attended in place, not copied per row
        assert gen.stats["reused_tokens"] > 0
        assert gen.stats["prefilled_tokens"] < sum(len(p) for p in prompts)
    else:
        assert gen.stats["reused_tokens"] == 0


@pytest.mark.parametrize("reuse", [False, True])
def test_attended_columns_count_every_computed_token(tiny_llama, engine_llama, prompts_and_eos,
                                                     reuse):
    """`attended` sums, over the tokens the model computed, the key columns each one sees
    (its position + 1): prompt tokens past the reused prefix, then one per decoded token
    (the last chosen token of a row is never fed)."""
    prompts, eos, _refs = prompts_and_eos
    gen = BatchGenerator(engine_llama, [eos], 0, PrefixStore())
    rows = gen.generate(prompts, max_new_tokens=20, batch_size=5, prefix_reuse=reuse)
    shared = len(common_prefix(prompts)) if reuse else 0
    expected = sum(range(1, shared + 1))  # the shared prefix, prefilled once
    for p, r in zip(prompts, rows):
        computed = list(range(shared, len(p)))  # prompt positions prefilled for this row
        fed = len(r.tokens) if not r.stopped else len(r.tokens) + 1  # chosen tokens fed back
        computed += list(range(len(p), len(p) + fed - 1))
        expected += sum(pos + 1 for pos in computed)
    assert gen.stats["attended"] == expected
    assert gen.stats["prefilled_tokens"] + gen.stats["decoded_tokens"] == \
        shared + sum(len(p) - shared for p in prompts) + sum(
            len(r.tokens) + r.stopped - 1 for r in rows)


@pytest.mark.parametrize("chunk", [1, 7, 40])
@pytest.mark.parametrize("reuse", [False, True])
def test_chunked_prefill_equals_generate(tiny_llama, engine_llama, prompts_and_eos, chunk, reuse):
    """Prefill in forwards of at most `chunk` tokens (a column of every row at 1, with
    rows that are all padding within a chunk): the same tokens as one prefill."""
    prompts, eos, refs = prompts_and_eos
    gen = BatchGenerator(engine_llama, [eos], 0, PrefixStore())
    gen.prefill_tokens = chunk
    calls = []
    forward = gen._forward
    gen._forward = lambda layers, ids, *a: calls.append(ids.shape) or forward(layers, ids, *a)
    rows = gen.generate(prompts, max_new_tokens=20, batch_size=12, prefix_reuse=reuse)
    assert [r.tokens for r in rows] == refs
    assert all(rows * cols <= max(chunk, rows) for rows, cols in calls)
    whole = BatchGenerator(engine_llama, [eos], 0, PrefixStore())
    whole_calls = []
    whole_forward = whole._forward
    whole._forward = lambda layers, ids, *a: whole_calls.append(ids.shape) or \
        whole_forward(layers, ids, *a)
    assert [r.tokens for r in whole.generate(prompts, max_new_tokens=20, batch_size=12,
                                             prefix_reuse=reuse)] == refs
    # The chunks here are narrower than the prompts: more prefill forwards than unchunked.
    assert len(calls) - gen.stats["decode_steps"] > \
        len(whole_calls) - whole.stats["decode_steps"]


@pytest.mark.parametrize("first_ends", [False, True])
def test_a_wave_of_several_runs_is_prefilled_into_one_buffer(tiny_llama, engine_llama,
                                                             prompts_and_eos,
                                                             first_ends):
    """The runs of similar lengths a wave is cut into write their caches into one buffer,
    so they join without a merge (a copy of every row's cache); a row that ends on its
    first token is dropped by a merge instead. Either way the tokens are generate's."""
    prompts, eos, refs = prompts_and_eos
    if first_ends:  # the end token is the first reply token of prompt 2
        eos = reference(tiny_llama, prompts[2], 1, eos=-1)[0]
        refs = [reference(tiny_llama, p, 20, eos) for p in prompts]
        assert refs[2] == []
    gen = BatchGenerator(engine_llama, [eos], 0, PrefixStore())
    counts = Counter()
    for name in ("_prefill", "_merge"):
        method = getattr(gen, name)
        setattr(gen, name, lambda *a, _m=method, _n=name: counts.update([_n]) or _m(*a))
    rows = gen.generate(prompts, max_new_tokens=20, batch_size=12)
    assert [r.tokens for r in rows] == refs
    assert counts["_prefill"] > 1  # several runs in the one wave
    assert counts["_merge"] == (1 if first_ends else 0)


@pytest.mark.parametrize("batch_size", [2, 4, 16])
def test_prompts_joining_a_running_batch_equal_generate(tiny_llama, engine_llama, prompts_and_eos,
                                                        batch_size):
    """An agent loop submits a turn while other rows are mid-reply: the late rows
    (some sharing the session's prefix, some not) still get exactly generate's tokens."""
    prompts, eos, refs = prompts_and_eos
    rng = random.Random(1)
    stranger = [rng.randrange(3, 96) for _ in range(25)]  # no shared prefix
    late = [prompts[0] + refs[0] + [5, 6, 7], stranger, prompts[3] + [9]]
    late_refs = [reference(tiny_llama, p, 20, eos) for p in late]
    gen = BatchGenerator(engine_llama, [eos], 0, PrefixStore())
    session = gen.session(max_new_tokens=20, batch_size=batch_size)
    for i, prompt in enumerate(prompts[:6]):
        session.submit(i, prompt)
    results, steps = {}, 0
    while session.pending:
        for key, row in session.step():
            results[key] = row
        steps += 1
        if steps in (2, 5, 9):  # while the first rows are still decoding
            key = 100 + (2, 5, 9).index(steps)
            session.submit(key, late[key - 100])
    assert [results[i].tokens for i in range(6)] == refs[:6]
    assert [results[100 + j].tokens for j in range(3)] == late_refs
    assert gen.stats["reused_tokens"] > 0


def test_session_step_returns_rows_as_they_end(tiny_llama, engine_llama, prompts_and_eos):
    prompts, eos, refs = prompts_and_eos
    session = BatchGenerator(engine_llama, [eos], 0, PrefixStore()).session(
        max_new_tokens=20, batch_size=16)
    for i, prompt in enumerate(prompts):
        session.submit(i, prompt)
    order = []
    while session.pending:
        order += [key for key, _ in session.step()]
    assert sorted(order) == list(range(len(prompts)))
    lengths = [len(refs[i]) for i in order]
    assert lengths == sorted(lengths)  # shorter replies come back first, not at the end


def test_prefix_store_is_reused_and_extended(tiny_llama, engine_llama, prompts_and_eos):
    prompts, eos, _refs = prompts_and_eos
    store = PrefixStore()
    gen = BatchGenerator(engine_llama, [eos], 0, store)
    gen.generate(prompts[:6], max_new_tokens=20, batch_size=4)
    assert store.misses == 1 and store.hits == 0
    gen.generate(prompts[:6], max_new_tokens=20, batch_size=4)
    assert store.hits == 1
    # A subset with a longer common prefix extends the stored one.
    sub = [prompts[0] + [7, 8, 9] + p[-3:] for p in prompts[:3]]
    rows = gen.generate(sub, max_new_tokens=20, batch_size=4)
    assert [r.tokens for r in rows] == [reference(tiny_llama, p, 20, eos) for p in sub]
    assert len(store.entries) == 2


def test_mixed_prompts_without_common_prefix(tiny_llama, engine_llama):
    rng = random.Random(1)
    prompts = [[rng.randrange(3, 96) for _ in range(rng.randrange(2, 40))] for _ in range(7)]
    assert len(common_prefix(prompts)) == 0
    gen = BatchGenerator(engine_llama, [5], 0, PrefixStore())
    rows = gen.generate(prompts, max_new_tokens=12, batch_size=3)
    assert [r.tokens for r in rows] == [reference(tiny_llama, p, 12, 5) for p in prompts]


def test_sampling_depends_on_seed_not_batch(tiny_llama, engine_llama, prompts_and_eos):
    prompts, eos, _ = prompts_and_eos
    gen = BatchGenerator(engine_llama, [eos], 0, PrefixStore())
    kw = {"max_new_tokens": 10, "temperature": 0.9, "top_p": 0.9}
    a = gen.generate(prompts, batch_size=16, seed=3, **kw)
    b = gen.generate(prompts, batch_size=2, seed=3, **kw)
    c = gen.generate(prompts, batch_size=16, seed=4, **kw)
    assert [r.tokens for r in a] == [r.tokens for r in b]
    assert [r.tokens for r in a] != [r.tokens for r in c]


def test_batch_size_is_capped(tiny_llama, engine_llama):
    gen = BatchGenerator(engine_llama, [2], 0, None)
    assert gen.pick_batch_size(7, 100, 50) == 7
    gen.memory_fraction = 1e-12  # no memory to spare: one row at a time
    assert gen.pick_batch_size(7, 100, 50) == 1


def test_per_row_timings(tiny_llama, engine_llama, prompts_and_eos, monkeypatch):
    # Each clock reading advances 1 ms: the timings count the loop's own steps, whatever
    # else the machine is doing.
    monkeypatch.setattr(batching, "time", helpers.FakeClock(tick=0.001))
    prompts, eos, refs = prompts_and_eos
    gen = BatchGenerator(engine_llama, [eos], 0, PrefixStore())
    rows = gen.generate(prompts, max_new_tokens=20, batch_size=4)
    assert all(r.prefill_ms > 0 for r in rows)
    assert all(r.decode_ms >= 0 for r in rows)
    # With refill, rows admitted later do not carry the first wave's decode time.
    longest = max(range(len(rows)), key=lambda i: len(refs[i]))
    assert rows[longest].decode_ms > min(r.decode_ms for r in rows)


def test_backend_loop_equals_hf(tiny_model_dir):
    from evalpipe.backends.transformers_backend import TransformersBackend

    backend = TransformersBackend(str(tiny_model_dir))
    assert backend.generation == "loop"
    system = "You are a calculator. " * 4
    prompts = [backend.render([{"role": "system", "content": system},
                               {"role": "user", "content": q}], None)
               for q in ["What is 12 times 7?", "Tính 3 cộng 4.", "What?", "Bao nhiêu?"]]
    settings = GenerationSettings(max_new_tokens=12, batch_size=3)
    loop = backend.generate(prompts, settings)
    stock = TransformersBackend(str(tiny_model_dir), generation="hf")  # never packed
    single = [stock.generate([p], settings)[0] for p in prompts]
    assert [g.text for g in loop] == [g.text for g in single]
    assert [g.completion_tokens for g in loop] == [g.completion_tokens for g in single]
    assert [g.prompt_tokens for g in loop] == [g.prompt_tokens for g in single]
    assert all(g.finish_reason in ("stop", "length") for g in loop)
    assert backend.prefix_store.misses == 1


def test_backend_rejects_unknown_mode(tiny_model_dir):
    from evalpipe.backends.transformers_backend import TransformersBackend
    from evalpipe.errors import InputError

    with pytest.raises(InputError):
        TransformersBackend(str(tiny_model_dir), generation="fast")


@pytest.mark.slow
def test_default_model_loop_equals_generate(default_backend):
    """The real default model on hermes prompts with the calculator tools: the batching
    loop (with prefix reuse) gives the same greedy replies as `model.generate`, one prompt
    at a time."""
    from evalpipe.engine import DEFAULT_SYSTEM_PROMPT
    from evalpipe.formats import get_format
    from evalpipe.tools import build_toolset

    fmt, tools = get_format("hermes"), build_toolset("calculator").schemas()
    questions = ["What is 12 + 30?", "What is 7 times 8?", "Compute 144 divided by 12.",
                 "What is the capital of France?"]
    prompts = []
    for q in questions:
        wire, template_tools = fmt.prepare(
            [{"role": "system", "content": DEFAULT_SYSTEM_PROMPT}, {"role": "user", "content": q}],
            tools, default_backend.template_supports_tools)
        prompts.append(default_backend.render(wire, template_tools))
    from evalpipe.backends.transformers_backend import TransformersBackend

    settings = GenerationSettings(max_new_tokens=48, batch_size=3)
    assert default_backend.generation == "loop" and default_backend.prefix_reuse
    loop = default_backend.generate(prompts, settings)
    stock = TransformersBackend("smollm2-135m", "float32", generation="hf")  # never packed
    single = [stock.generate([p], settings)[0] for p in prompts]
    assert [g.text for g in loop] == [g.text for g in single]
    assert [g.completion_tokens for g in loop] == [g.completion_tokens for g in single]


def test_fallback_template_starts_with_the_bos_token(tiny_model_dir, tmp_path):
    """Base models without a chat template get the plain template, BOS first."""
    import shutil

    from transformers import AutoTokenizer

    from evalpipe.backends.transformers_backend import TransformersBackend

    model_dir = tmp_path / "base"
    shutil.copytree(tiny_model_dir, model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.chat_template = None
    tok.bos_token = "<|endoftext|>"
    tok.save_pretrained(model_dir)
    (model_dir / "chat_template.jinja").unlink(missing_ok=True)
    backend = TransformersBackend(str(model_dir))
    prompt = backend.render([{"role": "user", "content": "Hi"}], None)
    assert prompt == "<|endoftext|>User: Hi\n\nAssistant:"


def test_plain_template_replies_end_where_the_model_starts_the_next_turn():
    from evalpipe.backends.base import cut_plain_turn

    assert cut_plain_turn(" 2 + 2 = 4\n\nUser: What is 2 +") == " 2 + 2 = 4"
    assert cut_plain_turn("Paris.\nAssistant: Paris") == "Paris."
    assert cut_plain_turn("The User: field stays") == "The User: field stays"
