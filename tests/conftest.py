"""Shared test fixtures: tiny models built from a config and the embedded
default model (loaded once per session). Helpers live in tests/helpers.py."""

from __future__ import annotations

from pathlib import Path

import pytest

# tests import these from helpers; the names stay here for older imports
from helpers import CHATML, REPO, VECTOR_WIDTHS, ScriptedBackend, last_user, write_jsonl  # noqa: F401
from hypothesis import settings

# Hypothesis fails an example slower than 200 ms by default: on a loaded machine that is
# the clock deciding, so no example has a deadline (tests/test_suite_rules.py).
settings.register_profile("evalpipe", deadline=None)
settings.load_profile("evalpipe")


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models gain nothing from threads, and on a shared machine they cost a lot."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(params=list(VECTOR_WIDTHS))
def vector_width(request, monkeypatch) -> str:
    """The engine's kernels built for each target in turn (EVALPIPE_KERNEL_MARCH), each
    checked to have built at the width the target stands for; a target this CPU cannot
    run is skipped with the flags it lacks (tests/test_native.py still compiles it)."""
    from evalpipe.backends.local import native

    if native.compiler() is None:
        pytest.skip("no C compiler on this machine: the kernels are not built")
    missing = native.missing_flags(request.param)
    if missing:
        pytest.skip(f"this CPU cannot run -march={request.param} (no {', '.join(missing)})")
    monkeypatch.setenv(native.MARCH_ENV, request.param)
    for source in native.sources():
        kernel = native.state(source)
        assert kernel.lib is not None, f"{source.name} for -march={request.param}: " \
            f"{kernel.why_not}"
        if VECTOR_WIDTHS[request.param] is not None:
            assert kernel.lib.simd_lanes() == VECTOR_WIDTHS[request.param]
    return request.param


@pytest.fixture
def scripted():
    return ScriptedBackend


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A 2-layer Llama with a small BPE tokenizer, built here: no download."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out = tmp_path_factory.mktemp("tiny-model")
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = ["What is 12 times 7? The answer is 84.", ("<tool_call>{\"name\": \"add\", "
              "\"arguments\": {\"a\": 1, \"b\": 2}}</tool_call>"), "Bao nhiêu? Tính 3 cộng 4."] * 20
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=400, special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", bos_token=None)
    fast.chat_template = CHATML
    fast.save_pretrained(out)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(fast), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                         max_position_embeddings=2048, eos_token_id=fast.eos_token_id,
                         pad_token_id=fast.pad_token_id, tie_word_embeddings=True)
    LlamaForCausalLM(config).save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def default_backend():
    """The embedded default model (fetched and converted on first use, then cached)."""
    from evalpipe.backends import load_backend

    return load_backend({"id": "smollm2-135m", "dtype": "float32"})
