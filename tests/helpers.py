"""Helpers tests import (conftest.py keeps only fixtures): scripted backends that
stand in for a model, and small file writers."""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from evalpipe.backends.base import Backend, GenerationSettings
from evalpipe.records import Generation

REPO = Path(__file__).resolve().parents[1]

# The engine's C kernels are built wherever a compiler is; tests of them need one.
needs_compiler = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                                    reason="no C compiler on this machine: the kernel is not built")

# Every vector width simd.h has: x86-64-v2 builds its 4-lane path (SSE), v3 its 8-lane
# one (AVX2), v4 its 16-lane one (AVX-512); native is the default build.
VECTOR_WIDTHS = {"native": None, "x86-64-v2": 4, "x86-64-v3": 8, "x86-64-v4": 16}

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


class FakeClock:
    """A stand-in for the `time` module of the code under test (monkeypatch the module's
    `time` name): its clocks move only by `tick` at each reading and by what `sleep` is
    asked to wait, so what the code measures and how long it waits are the same on a
    loaded machine as on an idle one. `on_sleep` runs at each sleep (to make the awaited
    thing happen); the other `time` functions are the real ones."""

    def __init__(self, tick: float = 0.0, on_sleep: Callable[[float], None] | None = None):
        self.elapsed, self.tick, self.on_sleep = 0.0, tick, on_sleep
        self.wall = time.time()  # time() starts here, so stamps compare with real file times
        self.sleeps: list[float] = []
        self._lock = threading.Lock()

    def _advance(self, seconds: float) -> float:
        with self._lock:
            self.elapsed += seconds
            return self.elapsed

    def perf_counter(self) -> float:
        return self._advance(self.tick)

    def monotonic(self) -> float:
        return self._advance(self.tick)

    def time(self) -> float:
        return self.wall + self._advance(self.tick)

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.sleeps.append(seconds)
        self._advance(max(0.0, seconds))
        if self.on_sleep is not None:
            self.on_sleep(seconds)

    def __getattr__(self, name: str):
        return getattr(time, name)


def last_user(prompt: str) -> str:
    """The question of a ScriptedBackend prompt."""
    return prompt.split("<user>")[1].split("\n<")[0]


def write_jsonl(path: Path, records) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records),
                    encoding="utf-8")
    return path


def tiny_llama(*, hidden_size: int = 64, intermediate_size: int = 128, heads: int = 4,
               kv_heads: int = 2, max_positions: int = 512, eos: int = 2):
    """A 2-layer Llama with random weights (seed 0) and a 96-token vocabulary: the engine's
    batching is checked against model.generate on it, no download needed."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=96, hidden_size=hidden_size,
                         intermediate_size=intermediate_size, num_hidden_layers=2,
                         num_attention_heads=heads, num_key_value_heads=kv_heads,
                         max_position_embeddings=max_positions, bos_token_id=1,
                         eos_token_id=eos, pad_token_id=0)
    return LlamaForCausalLM(config).eval()


def tiny_qwen2(*, tied: bool = True, heads: int = 7, kv_heads: int = 1, head_dim: int = 64,
               eos: int = 2):
    """A 2-layer Qwen2 with random weights (seed 0), q/k/v biases and a 96-token
    vocabulary: seven query heads per key head as in Qwen2.5-0.5B, a head size the rotary
    kernel takes, and its output layer tied to the embedding or not (the 0.5B's is not)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=96, hidden_size=heads * head_dim, intermediate_size=256,
                         num_hidden_layers=2, num_attention_heads=heads,
                         num_key_value_heads=kv_heads, max_position_embeddings=1024,
                         bos_token_id=1, eos_token_id=eos, pad_token_id=0,
                         tie_word_embeddings=tied)
    model = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():  # biases large enough that a product without them shows
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0.0, 0.5)
    return model


def two_prefixes(rows: int, kv_heads: int, dim: int, p_len: int):
    """Two prefixes stored one after another, as a batch holding the rows of two cells
    keeps them: the first `p_len` positions, the second (shorter) from the next multiple
    of 32, zeros between; row i on the first (i % 3 == 0), on none (1) or on the second
    (2). ((keys, values) [1, kv_heads, width, dim], starts, lengths), or (None, zeros,
    zeros) for p_len 0."""
    import torch

    zeros = torch.zeros(rows, dtype=torch.int64)
    if not p_len:
        return None, zeros, zeros
    second, start = p_len // 2 + 5, -(-p_len // 32) * 32
    keys, values = (torch.randn(1, kv_heads, start + second, dim) for _ in "kv")
    for t in (keys, values):
        t[:, :, p_len:start] = 0.0
    kind = torch.arange(rows) % 3
    starts = torch.where(kind == 2, start, 0)
    lengths = torch.where(kind == 0, p_len, torch.where(kind == 2, second, 0))
    return (keys, values), starts, lengths


def prefix_columns(starts, lengths, width: int):
    """[rows, width] bool: the prefix positions each row attends to."""
    import torch

    cols = torch.arange(width)[None]
    return (cols >= starts[:, None]) & (cols < (starts + lengths)[:, None])


def greedy_reference(model, prompt: list[int], n: int, eos: int) -> list[int]:
    """Greedy `model.generate` on one unpadded prompt: the ground truth the engine's
    batching must reproduce token for token (on a model the engine never packed)."""
    import torch

    from evalpipe.backends.local.packing import is_packed

    assert not is_packed(model), "the reference must be a model the engine did not pack"

    with torch.inference_mode():
        out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt),
                             dtype=torch.long), max_new_tokens=n, do_sample=False,
                             eos_token_id=[eos], pad_token_id=0)
    tokens = out[0, len(prompt):].tolist()
    return tokens[: tokens.index(eos)] if eos in tokens else tokens


def tiny_arithmetic_config(tmp_path: Path, model_dir: Path, **extra) -> Path:
    """A config of six arithmetic questions on the tiny model, with and without the
    calculator: the smallest grid that runs the whole pipeline."""
    import yaml

    questions = [{"id": f"q{i}", "suite": "arithmetic", "lang": "en",
                  "question": f"What is {i} times {i + 7}?", "answer": i * (i + 7)}
                 for i in range(6)]
    write_jsonl(tmp_path / "q.jsonl", questions)
    config = {"name": "tiny", "questions": [str(tmp_path / "q.jsonl")],
              "models": [{"id": str(model_dir)}], "formats": ["hermes"],
              "toolsets": ["none", "calculator"], "retrieval": ["none"], "max_turns": 2,
              "generation": {"max_new_tokens": 6, "batch_size": 4}, **extra}
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


# Debian's chromium, driven by Playwright (.ci/setup-browser.sh); never `playwright install`.
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


def playwright_or_skip():
    """Playwright's sync_playwright, or a skip that says what is missing."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} not installed: run .ci/setup-browser.sh "
                    "(apt-get install -y chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ModuleNotFoundError:
        pytest.skip("the playwright package is not installed (pip install playwright)")
    return sync_playwright
