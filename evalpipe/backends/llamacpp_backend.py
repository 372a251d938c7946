"""GGUF models in process through llama-cpp-python, for CPU users.

Text in, text out: render() applies the model's own chat template (the GGUF's
`tokenizer.chat_template`, rendered with jinja2 the way transformers does), so
the prompt formats (hermes, json, xml, native) work as with the transformers
backend. Greedy by default, seed fixed, one prompt at a time (llama.cpp runs a
single sequence here; its speed comes from quantised kernels, not batching).

The module imports llama_cpp lazily: `ChatTemplate` is also used by the
OpenAI-compatible backend's text mode, which needs no llama.cpp.
"""

from __future__ import annotations

import hashlib
import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from evalpipe.backends.base import PLAIN_TEMPLATE, Backend, GenerationSettings
from evalpipe.errors import InputError, ModelUnavailableError
from evalpipe.records import Generation

DEFAULT_N_CTX = 4096

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
PLAIN = PLAIN_TEMPLATE  # the transformers backend's template for models without one
BUILTIN_TEMPLATES = {"chatml": CHATML, "plain": PLAIN}
# Where a reply ends for the built-in templates (text completion has no chat turn to close).
BUILTIN_STOPS = {"chatml": ["<|im_end|>"], "plain": ["\nUser:"]}


def gguf_metadata(path: str | Path) -> dict[str, Any]:
    """String and scalar metadata of a GGUF file (chat template, special token ids),
    read with the gguf package; no weights are loaded."""
    from gguf import GGUFReader

    reader = GGUFReader(str(path))
    out: dict[str, Any] = {}
    for key in ("tokenizer.chat_template", "tokenizer.ggml.bos_token_id",
                "tokenizer.ggml.eos_token_id", "general.name"):
        field = reader.fields.get(key)
        if field is None:
            continue
        value = field.parts[field.data[0]]
        out[key] = bytes(value).decode("utf-8") if key in (
            "tokenizer.chat_template", "general.name") else int(value[0])
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    if tokens is not None:
        for name in ("bos", "eos"):
            token_id = out.get(f"tokenizer.ggml.{name}_token_id")
            if token_id is not None and token_id < len(tokens.data):
                out[f"{name}_token"] = bytes(tokens.parts[tokens.data[token_id]]).decode(
                    "utf-8", errors="replace")
    return out


class ChatTemplate:
    """A chat template rendered with jinja2 like transformers' apply_chat_template
    (sandboxed, trim_blocks, lstrip_blocks, `raise_exception`, `tojson`)."""

    def __init__(self, source: str, bos_token: str = "", eos_token: str = "",
                 stop: list[str] | None = None, name: str = ""):
        from jinja2.exceptions import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message):
            raise TemplateError(message)

        def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
            return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent,
                              separators=separators, sort_keys=sort_keys)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=["jinja2.ext.loopcontrols"])
        env.filters["tojson"] = tojson
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        self.source, self.name = source, name
        self.template = env.from_string(source)
        self.bos_token, self.eos_token = bos_token, eos_token
        self.stop = list(stop if stop is not None else ([eos_token] if eos_token else []))

    @property
    def supports_tools(self) -> bool:
        return "tools" in self.source

    @property
    def hash(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()[:16]

    def render(self, messages: list[dict[str, Any]], tools: list[dict] | None = None) -> str:
        return self.template.render(messages=messages, tools=tools, add_generation_prompt=True,
                                    bos_token=self.bos_token, eos_token=self.eos_token)

    @classmethod
    def from_gguf(cls, path: str | Path) -> ChatTemplate:
        meta = gguf_metadata(path)
        source = meta.get("tokenizer.chat_template")
        if not source:  # a base model: the documented plain template
            return cls(PLAIN, stop=BUILTIN_STOPS["plain"], name="plain")
        return cls(source, meta.get("bos_token", ""), meta.get("eos_token", ""),
                   name=Path(path).name)

    @classmethod
    def from_spec(cls, spec: str | None, stop: list[str] | None = None) -> ChatTemplate:
        """`chatml` (the default), `plain`, a model alias or .gguf file (its template),
        a .jinja file, or the template text itself."""
        spec = spec or "chatml"
        if spec in BUILTIN_TEMPLATES:
            return cls(BUILTIN_TEMPLATES[spec], stop=stop or BUILTIN_STOPS[spec], name=spec)
        if "{%" in spec or "{{" in spec:
            return cls(spec, stop=stop or [], name="inline")
        gguf = gguf_path(spec) if spec.endswith(".gguf") or _is_alias(spec) else None
        if gguf is not None:
            template = cls.from_gguf(gguf)
            if stop is not None:
                template.stop = list(stop)
            return template
        path = Path(spec).expanduser()
        if path.is_file():
            return cls(path.read_text(encoding="utf-8"), stop=stop or [], name=path.name)
        raise InputError(f"unknown chat template {spec!r}", field="models.chat_template",
                         expected="chatml | plain | a model alias | a .gguf or .jinja file | "
                         "jinja text")


def _is_alias(model_id: str) -> bool:
    from evalpipe.backends.models import ALIASES

    return model_id in ALIASES


def gguf_path(model_id: str) -> Path:
    """The GGUF file of an alias (fetched into the cache) or a .gguf path."""
    from evalpipe.backends.models import ALIASES, _fetch_gguf

    if model_id in ALIASES:
        return _fetch_gguf(ALIASES[model_id])
    path = Path(model_id).expanduser()
    if path.suffix == ".gguf" and path.is_file():
        return path.resolve()
    raise ModelUnavailableError(
        f"the llamacpp backend needs a GGUF model: '{model_id}' is neither a known alias nor "
        "a .gguf file")


class LlamaCppBackend(Backend):
    """A GGUF model in process (llama-cpp-python); greedy, fixed seed, n_ctx 4096."""

    def __init__(self, model_id: str, n_ctx: int = DEFAULT_N_CTX, n_threads: int | None = None,
                 seed: int = 0, n_batch: int = 512):
        try:
            from llama_cpp import Llama
        except ImportError:
            raise ModelUnavailableError(
                "the llamacpp backend needs llama-cpp-python: pip install llama-cpp-python "
                "(or run .ci/setup-llamacpp.sh)") from None
        self.model_id, self.n_ctx, self.seed = model_id, int(n_ctx), int(seed)
        self.n_batch = int(n_batch)
        self.path = gguf_path(model_id)
        self.llm = Llama(model_path=str(self.path), n_ctx=self.n_ctx, seed=self.seed,
                         n_threads=n_threads, n_batch=self.n_batch, n_ubatch=self.n_batch,
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
    """sha256 of a model file, remembered in the cache by path, size and mtime."""
    from evalpipe.paths import cache_dir

    stat = path.stat()
    key = hashlib.sha256(f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    marker = cache_dir("gguf-digests") / key.hexdigest()[:32]
    try:
        return marker.read_text().strip()
    except OSError:
        pass
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    value = digest.hexdigest()[:16]
    try:
        marker.write_text(value)
    except OSError:
        pass
    return value
