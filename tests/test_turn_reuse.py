"""A conversation's cache is kept between its turns: a later turn, submitted under
the same key, prefills only its new tokens, and its greedy float32 reply is still
token for token `model.generate`'s on the whole prompt."""

from __future__ import annotations

import random

import helpers
import pytest
from helpers import greedy_reference as reference

from evalpipe.backends.local.batching import BatchGenerator, PrefixStore, TurnStore, _Turn

EOS = 2


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tiny_llama():
    return helpers.tiny_llama(max_positions=1024, eos=EOS)

@pytest.fixture(scope="module")
def engine_llama():
    """The same weights for the engine, which packs the model it runs (the references
    run on `tiny_llama`, never packed)."""
    return helpers.tiny_llama(max_positions=1024, eos=EOS)


def converse(gen: BatchGenerator, eos: int, batch_size: int, turns: int = 3, n: int = 6,
             new: int = 12):
    """n conversations of `turns` turns run through one session, each next turn
    submitted (under the conversation's key) as soon as its reply is back: the earlier
    prompt, the reply, an end token and a 'tool result' of its own tokens. One
    conversation re-tokenises its reply's last token differently, as a BPE merge can."""
    rng = random.Random(3)
    shared = [rng.randrange(3, 96) for _ in range(30)]
    prompts = {k: shared + [rng.randrange(3, 96) for _ in range(rng.randrange(2, 20))]
               for k in range(n)}
    session = gen.session(max_new_tokens=new, batch_size=batch_size)
    for k, p in prompts.items():
        session.submit(k, p)
    asked: list[tuple[list[int], list[int]]] = []  # (prompt, reply) of every turn
    turn = dict.fromkeys(prompts, 0)
    while session.pending:
        for k, row in session.step():
            asked.append((prompts[k], row.tokens))
            turn[k] += 1
            if turn[k] < turns:
                reply = row.tokens if k != 1 else row.tokens[:-1] + [7, 8]
                own = random.Random(f"{k}/{turn[k]}")  # the same tool result in any order
                tool = [own.randrange(3, 96) for _ in range(own.randrange(3, 15))]
                prompts[k] = prompts[k] + reply + [eos] + tool
                session.submit(k, prompts[k])
    return asked


@pytest.fixture(scope="module")
def eos(tiny_llama):
    """An end token the model produces now and then, so replies end at different steps."""
    from collections import Counter

    rng = random.Random(3)
    probes = [[rng.randrange(3, 96) for _ in range(30)] for _ in range(6)]
    counts = Counter(t for p in probes for t in reference(tiny_llama, p, 12, eos=-1))
    return counts.most_common(4)[3][0]


@pytest.mark.parametrize("batch_size,chunk", [(1, 4096), (3, 4096), (16, 4096), (3, 5),
                                              (16, 20)])
def test_later_turns_prefill_only_what_is_new_and_equal_generate(tiny_llama, engine_llama, eos,
                                                                 batch_size, chunk):
    """`chunk`: tokens a prefill forward takes at most (small: each turn's new tokens
    are prefilled in several forwards on top of the kept cache)."""
    gen = BatchGenerator(engine_llama, [eos], 0, PrefixStore())
    gen.prefill_tokens = chunk
    asked = converse(gen, eos, batch_size)
    assert len(asked) == 18
    for prompt, reply in asked:
        assert reply == reference(tiny_llama, prompt, 12, eos)
    assert gen.stats["turn_reused_tokens"] > 0
    # Without the kept caches every later turn prefills its earlier turns again.
    off = BatchGenerator(engine_llama, [eos], 0, PrefixStore())
    off.turn_memory_fraction = 0
    assert sorted(converse(off, eos, batch_size)) == sorted(asked)
    assert off.stats["turn_reused_tokens"] == 0
    saved = off.stats["prefilled_tokens"] - gen.stats["prefilled_tokens"]
    assert saved == gen.stats["turn_reused_tokens"]


def test_kept_caches_with_the_prefix_copied_per_row(tiny_llama, engine_llama, eos):
    """Where the prefix is copied under every row, caches are not kept, and replies are
    unchanged."""
    gen = BatchGenerator(engine_llama, [eos], 0, PrefixStore())
    gen.shared_attention = False
    for prompt, reply in converse(gen, eos, 4, turns=2, n=3):
        assert reply == reference(tiny_llama, prompt, 12, eos)
    assert gen.stats["turn_reused_tokens"] == 0


def test_turn_store_is_bounded_and_evicts_oldest_first():
    store = TurnStore(budget_bytes=250)
    for key in range(4):
        store.put(key, _Turn([1, 2, 3], 0, [], 100))
    assert list(store.entries) == [2, 3] and store.bytes == 200 and store.evicted == 2
    assert store.take(2) is not None and store.take(2) is None and store.bytes == 100
    store.put("huge", _Turn([1], 0, [], 1000))  # larger than the whole budget: not kept
    assert "huge" not in store.entries and store.bytes == 100
    counted = TurnStore(budget_bytes=10_000, max_entries=2)
    for key in range(3):
        counted.put(key, _Turn([1], 0, [], 10))
    assert list(counted.entries) == [1, 2]


@pytest.mark.slow
def test_default_model_later_turns_equal_generate(default_backend):
    """The embedded model on hermes prompts: a second turn carrying a forced calculator
    call and its real result, prefilled on the first turn's kept cache, gives the greedy
    reply `model.generate` gives on the whole prompt."""
    from evalpipe.backends.base import GenerationSettings
    from evalpipe.engine import DEFAULT_SYSTEM_PROMPT
    from evalpipe.formats import get_format
    from evalpipe.records import ToolCall
    from evalpipe.tools import build_toolset

    fmt, tools = get_format("hermes"), build_toolset("calculator")
    b = default_backend
    questions = [("What is 12 + 30?", ToolCall("add", {"a": 12, "b": 30}, id="c0")),
                 ("What is 7 times 8?", ToolCall("multiply", {"a": 7, "b": 8}, id="c0"))]

    def prompt(messages):
        wire, template_tools = fmt.prepare(messages, tools.schemas(), b.template_supports_tools)
        return b.render(wire, template_tools)

    settings = GenerationSettings(max_new_tokens=24, batch_size=4)
    before = (b.generation, b.prefix_reuse, b.batcher.stats["turn_reused_tokens"])
    try:
        b.generation, b.prefix_reuse = "loop", True
        session = b.session(settings)
        convs = {k: [{"role": "system", "content": DEFAULT_SYSTEM_PROMPT},
                     {"role": "user", "content": q}] for k, (q, _) in enumerate(questions)}
        for k, messages in convs.items():
            session.submit(k, prompt(messages))
        second, asked = {}, {}
        while session.pending:
            for k, gen in session.poll():
                if k in asked:
                    second[k] = gen.text
                    continue
                call = questions[k][1]
                (event,) = tools.execute([call])
                convs[k] += [{"role": "assistant", "content": gen.text, "tool_calls": [
                    {"id": call.id, "type": "function",
                     "function": {"name": call.name, "arguments": call.arguments}}]},
                    {"role": "tool", "tool_call_id": call.id, "name": call.name,
                     "content": str(event.result)}]
                asked[k] = prompt(convs[k])
                session.submit(k, asked[k])
        reused = b.batcher.stats["turn_reused_tokens"] - before[2]
    finally:
        b.generation, b.prefix_reuse = before[:2]
    from evalpipe.backends.transformers_backend import TransformersBackend

    stock = TransformersBackend("smollm2-135m", "float32", generation="hf")  # never packed
    single = {k: stock.generate([p], settings)[0].text for k, p in asked.items()}
    assert second == single
    assert reused > 0
