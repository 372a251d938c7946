"""GGUF models in process through llama-cpp-python, for CPU users.

Text in, text out: render() applies the model's own chat template (the GGUF's
`tokenizer.chat_template`, rendered with jinja2 the way transformers does), so
the prompt formats (hermes, json, xml, native) work as with the transformers
backend. Greedy by default, seed fixed, one prompt at a time (llama.cpp runs a
single sequence here; its speed comes from quantised kernels, not batching).

The module imports llama_cpp lazily. Chat templates live in
`evalpipe.backends.templates` (the OpenAI-compatible backend's text mode uses
them too).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError

from evalpipe.backends.base import Backend, GenerationSettings, ModelEntry
from evalpipe.backends.models import gguf_path
from evalpipe.backends.templates import ChatTemplate
from evalpipe.backends.weights import file_digest
from evalpipe.errors import ModelUnavailableError
from evalpipe.records import Generation
from evalpipe.schema import Section, input_error


class LlamaCppOptions(Section):
    """What a `backend: llamacpp` model entry sets besides its id: the one home of these
    options and their defaults (the config's model entry is this section)."""

    n_ctx: int = Field(4096, ge=1)  # context window, prompt and reply together
    n_threads: int | None = Field(None, ge=1)  # None: llama.cpp's own choice
    seed: int = 0
    n_batch: int = Field(512, ge=1)


class LlamaCppModel(ModelEntry, LlamaCppOptions):
    """A `backend: llamacpp` entry: a GGUF model id or alias and its options."""

    def load(self) -> Backend:
        return LlamaCppBackend(self.id, **self.model_dump(exclude={"id", "backend"}))


class LlamaCppBackend(Backend):
    """A GGUF model in process (llama-cpp-python); greedy, fixed seed."""

    def __init__(self, model_id: str, **options: Any):
        """`options`: the fields of LlamaCppOptions."""
        try:
            o = LlamaCppOptions.model_validate(options)
        except ValidationError as exc:
            raise input_error(exc, LlamaCppOptions, prefix="models") from None
        try:
            from llama_cpp import Llama
        except ImportError:
            raise ModelUnavailableError(
                "the llamacpp backend needs llama-cpp-python: pip install llama-cpp-python "
                "(or run .ci/setup-llamacpp.sh)") from None
        self.model_id, self.n_ctx, self.seed, self.n_batch = model_id, o.n_ctx, o.seed, o.n_batch
        self.path = gguf_path(model_id)
        self.llm = Llama(model_path=str(self.path), n_ctx=self.n_ctx, seed=self.seed,
                         n_threads=o.n_threads, n_batch=self.n_batch, n_ubatch=self.n_batch,
                         logits_all=False, verbose=False)
        self.template = ChatTemplate.from_gguf(self.path)
        # Use the runtime's own token texts (they decide what the prompt tokenises to).
        if self.template.name != "plain":
            self.template.bos_token = self._token_text(self.llm.token_bos())
            self.template.eos_token = self._token_text(self.llm.token_eos())
        self._file_hash = _file_digest(self.path)

    def _token_text(self, token: int) -> str:
        if token is None or token < 0:
            return ""
        return self.llm.detokenize([token], special=True).decode("utf-8", errors="replace")

    @property
    def template_supports_tools(self) -> bool:
        return self.template.supports_tools

    def describe(self) -> dict[str, Any]:
        import llama_cpp

        return {"model_id": self.model_id, "backend": "llamacpp", "gguf_sha256": self._file_hash,
                "n_ctx": self.n_ctx, "n_batch": self.n_batch, "seed": self.seed,
                "llama_cpp": llama_cpp.__version__,
                "chat_template_hash": self.template.hash, "path": str(self.path)}

    def render(self, messages, tools):
        return self.template.render(messages, tools)

    def generate(self, prompts, settings: GenerationSettings, progress=None):
        out = []
        for prompt in prompts:
            try:
                out.append(self._generate_one(prompt, settings))
            except Exception as exc:  # noqa: BLE001 - one failed prompt never takes the batch down
                out.append(Generation("", finish_reason="error",
                                      error=f"llamacpp: {type(exc).__name__}: {exc}"))
            if progress is not None:
                progress(1)
        return out

    def _generate_one(self, prompt: str, settings: GenerationSettings) -> Generation:
        import llama_cpp

        tokens = self.llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
        room = self.n_ctx - len(tokens)
        if room <= 0:
            return Generation("", prompt_tokens=len(tokens), finish_reason="error",
                              error=f"llamacpp: prompt of {len(tokens)} tokens does not fit "
                              f"n_ctx {self.n_ctx}")
        limit = min(settings.max_new_tokens, room)
        sampling = settings.temperature > 0
        # No prefix reuse between prompts: every prompt is evaluated from scratch, so a
        # reply never depends on which prompt came before it.
        self.llm.reset()
        self.llm.set_seed(settings.seed if sampling else self.seed)
        vocab = self.llm._model.vocab
        out: list[int] = []
        start = time.perf_counter()
        first = None
        stopped = False
        for token in self.llm.generate(
                tokens, temp=settings.temperature if sampling else 0.0,
                top_p=settings.top_p if sampling else 1.0, top_k=0 if sampling else 1,
                min_p=0.0, repeat_penalty=1.0, reset=True):
            if first is None:
                first = time.perf_counter()
            if llama_cpp.llama_vocab_is_eog(vocab, token):
                stopped = True
                break
            out.append(token)
            if len(out) >= limit:
                break
        end = time.perf_counter()
        first = first or end
        text = self.llm.detokenize(out).decode("utf-8", errors="replace")
        return Generation(
            text=text, prompt_tokens=len(tokens), completion_tokens=len(out) + stopped,
            prefill_ms=(first - start) * 1000, decode_ms=(end - first) * 1000,
            finish_reason="stop" if stopped else "length")


def _file_digest(path: Path) -> str:
    """16 hex of the GGUF's sha256, remembered between runs (backends/weights.py)."""
    return file_digest(path)[:16]
