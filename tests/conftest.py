"""Shared test fixtures: scripted backends, tiny models built from a config,
and the embedded default model (loaded once per session)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalpipe.backends.base import Backend, GenerationSettings
from evalpipe.records import Generation

REPO = Path(__file__).resolve().parents[1]

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


class ScriptedBackend(Backend):
    """Replies chosen by a function of the rendered prompt: recorded model
    behaviour without a model. The prompt is the plain chat rendering."""

    def __init__(self, reply, model_id: str = "scripted"):
        self.model_id = model_id
        self.reply = reply
        self.calls = 0

    def describe(self):
        return {"model_id": self.model_id, "backend": "scripted"}

    def render(self, messages, tools):
        return "\n".join(f"<{m['role']}>{m['content']}" for m in messages) + "\n<assistant>"

    def generate(self, prompts, settings: GenerationSettings, progress=None):
        self.calls += len(prompts)
        out = []
        for p in prompts:
            text = self.reply(p)
            if isinstance(text, Generation):
                out.append(text)
            else:
                out.append(Generation(text, prompt_tokens=len(p) // 4,
                                      completion_tokens=max(1, len(text) // 4),
                                      prefill_ms=1.0, decode_ms=2.0))
        return out


def last_user(prompt: str) -> str:
    """The question of a ScriptedBackend prompt."""
    return prompt.split("<user>")[1].split("\n<")[0]


@pytest.fixture
def scripted():
    return ScriptedBackend


def write_jsonl(path: Path, records) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records),
                    encoding="utf-8")
    return path


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
    corpus = ["What is 12 times 7? The answer is 84.", "<tool_call>{\"name\": \"add\", "
              "\"arguments\": {\"a\": 1, \"b\": 2}}</tool_call>", "Bao nhiêu? Tính 3 cộng 4."] * 20
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
