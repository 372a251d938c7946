"""Local models through transformers: continuous batching, greedy by default.

Generation runs through `evalpipe.backends.local.batching.BatchGenerator` (a manual
decode loop: rows leave the batch at their own end token and waiting prompts
take their place; the prompts' shared prefix is prefilled once and reused).
Models whose cache it does not handle (sliding-window or linear attention)
use `model.generate` on length-sorted, left-padded batches instead; so does
`generation="hf"`, kept as the reference the loop is tested against.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

from evalpipe.backends.base import (
    PLAIN_TEMPLATE,
    Backend,
    GenerationSession,
    GenerationSettings,
    cut_plain_turn,
)
from evalpipe.backends.local import allocator, batching, native, packed_linear
from evalpipe.backends.local.cpu import AUTO, resolve_dtype
from evalpipe.backends.local.cpu import DTYPES as DTYPE_NAMES
from evalpipe.backends.models import ALIASES, quiet_loading, resolve_model
from evalpipe.backends.weights import folder_digest
from evalpipe.errors import InputError, ModelUnavailableError
from evalpipe.records import Generation

DTYPES = {name: getattr(torch, name) for name in DTYPE_NAMES}

# Models without a chat template (base models) get this plain, documented one.
# Base models such as Gemma need their BOS token: without it they emit garbage, and
# prompts are tokenized without special tokens, so the template must carry it.
FALLBACK_TEMPLATE = "{{ bos_token if bos_token else '' }}" + PLAIN_TEMPLATE


def load_tokenizer(path, **kwargs: str) -> tuple[Any, bool]:
    """The model's tokenizer, given the plain template where it has no chat template;
    and whether it got it. No weights are read (`evalpipe plan` renders with this;
    `gguf_file=` reads it from a GGUF file's header)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
    plain = not tokenizer.chat_template
    if plain:
        tokenizer.chat_template = FALLBACK_TEMPLATE
    return tokenizer, plain


def render_chat(tokenizer, messages, tools) -> str:
    """The exact prompt text of a conversation, as the model is sent it."""
    return tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True,
                                         tokenize=False)


def engine_line(model_id: str, engine: dict[str, Any]) -> str:
    """One line for the run's log: the path a model takes and why, the weights' dtype and
    the model's resident size, and on the batching loop its fused layers and kernels
    (the same facts the manifest records)."""
    line = f"{model_id}: {engine['path']} ({engine['why']})"
    if "fused_layers" in engine:
        line += f"; fused layers {engine['fused_layers']}" + "".join(
            f" ({n}: {why})" for why, n in engine["unfused"].items())
        line += f"; linears {engine['linear']}"
        if "bf16_products" in engine:
            line += f" (bfloat16 products {engine['bf16_products']})"
    elif "linear_why" in engine:
        line += f"; linears stock, no fused layers ({engine['linear_why']})"
    if "dtype" in engine:
        line += f"; weights {engine['dtype']}"
        if engine.get("activations", engine["dtype"]) != engine["dtype"]:
            line += f" computing in {engine['activations']}"
        line += f", resident {_size(engine['resident_bytes'])}"
    kernels = engine.get("kernels", {})
    built = {k["march"] + ", " + k["compiler"] for k in kernels.values() if k["built"]}
    if kernels:
        line += "; kernels " + ", ".join(
            f"{name} {k['lanes']} lanes" if k["built"] else f"{name} not built ({k['why_not']})"
            for name, k in kernels.items())
        line += "".join(f" (-march={b})" for b in sorted(built))
    return line


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**30:.2f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:.1f} MiB"


def _resident_bytes(model) -> int:
    """Bytes of the model's tensors (parameters and buffers, each storage once)."""
    seen: dict[int, int] = {}
    for t in [*model.parameters(), *model.buffers()]:
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


class _FirstTokenClock:
    """A logits processor that notes when the first new token is being chosen:
    everything before it is prefill (time to first token)."""

    def __init__(self):
        self.first: float | None = None

    def __call__(self, input_ids, scores):
        if self.first is None:
            self.first = time.perf_counter()
        return scores


class TransformersBackend(Backend):
    def __init__(self, model_id: str, dtype: str = AUTO, device: str = "cpu", *,
                 generation: str = "auto", prefix_reuse: bool = True):
        """`generation`: "auto" (the batching loop where the model allows it, else
        `model.generate`), "loop" or "hf". `prefix_reuse`: prefill the prompts'
        shared prefix once and keep it for later calls."""
        from transformers import AutoModelForCausalLM

        threads = os.environ.get("EVALPIPE_TORCH_THREADS")
        if threads:  # on a shared or oversubscribed machine, 1 thread can be several times faster
            torch.set_num_threads(max(1, int(threads)))
        if dtype != AUTO and dtype not in DTYPES:
            raise InputError(f"unknown dtype {dtype!r}", field="dtype",
                             expected=" | ".join((AUTO, *DTYPES)))
        dtype, warning = resolve_dtype(dtype, device, panels=generation != "hf" and
                                       packed_linear.kernel_for(torch.bfloat16) == "panel")
        if warning:  # explicit bfloat16 on a CPU that emulates it: say why it will be slow
            print(warning, file=sys.stderr)
        self.model_id, self.dtype, self.device = model_id, dtype, device
        self.path = resolve_model(model_id, dtype)
        try:
            with quiet_loading():
                self.tokenizer, self.plain_template = load_tokenizer(self.path)
                self.model = AutoModelForCausalLM.from_pretrained(self.path, dtype=DTYPES[dtype])
        except OSError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ModelUnavailableError(
                f"cannot load model '{model_id}' (not a known alias, a local folder or a .gguf "
                f"file, and the model hub is not reachable): {first}") from None
        # The weights' identity, in describe(): a folder changed in place is a new model.
        self.weights = folder_digest(self.path) if isinstance(self.path, Path) \
            and self.path.is_dir() else None
        self.model.to(device).eval()
        # Counted before the engine packs the linears (their weights then live as panels).
        self.parameters = sum(p.numel() for p in self.model.parameters())
        if device == "cpu":
            allocator.keep_freed_memory()
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.eos_ids = self._eos_ids()
        if generation not in ("auto", "loop", "hf"):
            raise InputError(f"unknown generation mode {generation!r}", field="generation",
                             expected="auto | loop | hf")
        why_not_loop = batching.unsupported(self.model)
        if generation == "loop" and why_not_loop:
            raise InputError(f"model '{model_id}' cannot run in the batching loop: {why_not_loop}",
                             field="generation", expected="auto | hf")
        self.generation = "loop" if generation == "auto" and not why_not_loop else generation
        if self.generation == "auto":
            self.generation = "hf"
        self.path_why = (why_not_loop or "") if generation == "auto" else \
            f"generation={generation!r} was asked for"
        self.prefix_reuse = prefix_reuse
        self.prefix_store = batching.PrefixStore()
        self.batcher = batching.BatchGenerator(self.model, self.eos_ids,
                                               self.tokenizer.pad_token_id, self.prefix_store,
                                               pack=self.generation == "loop")
        self.engine = self._engine_facts()

    def _eos_ids(self) -> list[int]:
        ids = self.model.generation_config.eos_token_id
        ids = [ids] if isinstance(ids, int) else list(ids or [])
        if self.tokenizer.eos_token_id is not None:
            ids.append(self.tokenizer.eos_token_id)
        return sorted(set(ids))

    def _engine_facts(self) -> dict[str, Any]:
        """How this machine runs the model: the engine's batching loop or `model.generate`
        and why, the weights' dtype and what the model computes in, its resident size, and
        on the loop the fused layers and every kernel's state."""
        import transformers

        packed = self.batcher.packed
        facts: dict[str, Any] = {
            "transformers": transformers.__version__, "dtype": self.dtype,
            "activations": str(self.batcher.dtype).removeprefix("torch."),
            "resident_bytes": _resident_bytes(self.model) + (packed.nbytes if packed else 0)}
        if self.generation == "hf":
            return {"path": "model.generate", "why": self.path_why, **facts}
        facts = {"path": "batching loop", "why": self.path_why or
                 "every attention layer keeps a full cache", **facts}
        if packed is not None:
            layers = packed.fused + sum(packed.unfused.values())
            facts.update(linear=packed.kernel, fused_layers=f"{packed.fused} of {layers}",
                         unfused=packed.unfused)
            if packed.kernel == "panel" and packed.dtype == torch.bfloat16:
                facts["bf16_products"] = packed_linear.bf16_path()
        else:  # stock linears, so no fused layers either
            facts.update(linear="stock", linear_why=self.batcher.unpacked_why)
        if self.device == "cpu":
            facts["kernels"] = native.states()
        return facts

    @property
    def template_supports_tools(self) -> bool:
        return "tools" in (self.tokenizer.chat_template or "")

    def log_line(self) -> str:
        return engine_line(self.model_id, self.engine)

    def describe(self) -> dict[str, Any]:
        config = self.model.config
        return {
            "model_id": self.model_id,
            "backend": "transformers",
            "dtype": self.dtype,
            # What the model computes in where that is not its weights' dtype (float32
            # around bfloat16 panels): other arithmetic, other replies.
            **({"activations": self.engine["activations"]}
               if self.engine["activations"] != self.dtype else {}),
            "parameters": self.parameters,
            "alias": ALIASES[self.model_id].wheels[0] if self.model_id in ALIASES else None,
            "config_hash": hashlib.sha256(
                json.dumps(config.to_dict(), sort_keys=True, default=str).encode()
            ).hexdigest()[:16],
            "chat_template_hash": hashlib.sha256(
                (self.tokenizer.chat_template or "").encode()).hexdigest()[:16],
            "weights": self.weights,  # sha256 of the folder's files (backends/weights.py)
            "path": str(self.path) if isinstance(self.path, Path) else self.path,
            # How this machine multiplies (not part of the model's identity: see cache.py).
            "linear_kernel": self.batcher.packed.kernel if self.generation == "loop"
                             and self.batcher.packed is not None else "stock",
            "engine": self.engine,  # likewise: the path taken and the kernels' states
        }

    def render(self, messages, tools):
        return render_chat(self.tokenizer, messages, tools)

    def generate(self, prompts, settings: GenerationSettings, progress=None):
        if not prompts:
            return []
        if self.generation == "hf":
            return [self._cut(gen) for gen in self._generate_hf(prompts, settings, progress)]
        rows = self.batcher.generate(
            [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts],
            max_new_tokens=settings.max_new_tokens, batch_size=settings.batch_size,
            temperature=settings.temperature, top_p=settings.top_p, seed=settings.seed,
            prefix_reuse=self.prefix_reuse, progress=progress)
        return [self._generation(row) for row in rows]

    def session(self, settings: GenerationSettings) -> GenerationSession:
        if self.generation == "hf":
            return super().session(settings)
        return _LoopSession(self, settings)

    def probe_session(self, settings: GenerationSettings) -> GenerationSession:
        if self.generation == "hf":
            return super().session(settings)
        return _LoopSession(self, settings, prefix_reuse=False)  # every prompt prefilled whole

    def _cut(self, gen: Generation) -> Generation:
        """A base model on the plain template writes the next turns itself: keep its own."""
        if self.plain_template:
            text = cut_plain_turn(gen.text)
            if text != gen.text:
                gen.text, gen.finish_reason = text, "stop"
        return gen

    def _generation(self, row: batching.RowResult) -> Generation:
        if row.error:
            return Generation("", prompt_tokens=row.prompt_tokens, finish_reason="error",
                              error=row.error)
        return self._cut(Generation(
            text=self.tokenizer.decode(row.tokens, skip_special_tokens=True),
            prompt_tokens=row.prompt_tokens,
            completion_tokens=len(row.tokens) + row.stopped,
            prefill_ms=row.prefill_ms, decode_ms=row.decode_ms,
            prefix_tokens=row.prefix_tokens, prefill_compute_ms=row.prefill_compute_ms,
            finish_reason="stop" if row.stopped else "length"))

    @torch.inference_mode()
    def _generate_hf(self, prompts, settings: GenerationSettings, progress=None):
        """`model.generate` on length-sorted, left-padded batches: every row of a batch
        gets the batch's prefill and decode time."""
        # Similar lengths batch together, so little compute goes to padding.
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        out: list[Generation | None] = [None] * len(prompts)
        longest = len(self.tokenizer(prompts[order[-1]], add_special_tokens=False)["input_ids"])
        size = self.batcher.pick_batch_size(settings.batch_size, longest, settings.max_new_tokens)
        for lo in range(0, len(order), size):  # as many rows as the memory holds
            idx = order[lo: lo + size]
            for i, gen in zip(idx, self._generate_batch([prompts[i] for i in idx], settings)):
                out[i] = gen
            if progress is not None:
                progress(len(idx))
        return out

    def _generate_batch(self, prompts: list[str], settings: GenerationSettings) -> list[Generation]:
        enc = self.tokenizer(prompts, return_tensors="pt", padding=True,
                             add_special_tokens=False).to(self.device)
        clock = _FirstTokenClock()
        sampling = settings.temperature > 0
        if sampling:
            torch.manual_seed(settings.seed)
        start = time.perf_counter()
        try:
            output = self.model.generate(
                **enc, max_new_tokens=settings.max_new_tokens, do_sample=sampling,
                temperature=settings.temperature if sampling else None,
                top_p=settings.top_p if sampling else None, top_k=None,
                eos_token_id=self.eos_ids, pad_token_id=self.tokenizer.pad_token_id,
                logits_processor=[clock])
        except (RuntimeError, ValueError) as exc:  # out of memory: these rows fail, not the run
            return [Generation("", finish_reason="error", error=f"{type(exc).__name__}: {exc}")
                    for _ in prompts]
        end = time.perf_counter()
        first = clock.first or end
        new = output[:, enc["input_ids"].shape[1]:]
        real = enc["attention_mask"].sum(dim=1).tolist()  # the batch's prefill, shared by tokens
        gens = []
        for row, mask in zip(new, enc["attention_mask"]):
            tokens = row.tolist()
            stop = next((j for j, t in enumerate(tokens) if t in self.eos_ids), None)
            kept = tokens if stop is None else tokens[:stop]
            gens.append(Generation(
                text=self.tokenizer.decode(kept, skip_special_tokens=True),
                prompt_tokens=int(mask.sum()),
                completion_tokens=len(kept) + (stop is not None),
                prefill_ms=(first - start) * 1000,
                decode_ms=(end - first) * 1000,
                prefill_compute_ms=(first - start) * 1000 * int(mask.sum()) / max(1, sum(real)),
                finish_reason="length" if stop is None else "stop",
            ))
        return gens


class _LoopSession(GenerationSession):
    """Prompts join the running batch of the decode loop as they are submitted."""

    backend: TransformersBackend

    def __init__(self, backend: TransformersBackend, settings: GenerationSettings,
                 prefix_reuse: bool | None = None):
        super().__init__(backend, settings)
        self.decoder = backend.batcher.session(
            max_new_tokens=settings.max_new_tokens, batch_size=settings.batch_size,
            temperature=settings.temperature, top_p=settings.top_p, seed=settings.seed,
            prefix_reuse=backend.prefix_reuse if prefix_reuse is None else prefix_reuse)

    @property
    def pending(self) -> int:
        return self.decoder.pending

    def submit(self, key, prompt: str, group=None) -> None:
        ids = self.backend.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        self.decoder.submit(key, ids, group)

    def poll(self):
        while self.decoder.pending:
            if self.should_stop():  # between decode steps: what is unfinished is dropped
                self.decoder.cancel()
                break
            done = self.decoder.step()
            if done:
                return [(key, self.backend._generation(row)) for key, row in done]
        return []
