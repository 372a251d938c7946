"""Chat templates rendered the way transformers renders them, without a tokenizer.

Used wherever a backend has to turn messages into a prompt string itself: the
llama.cpp backend (the GGUF's own template) and the OpenAI-compatible backend's
text mode. Built-in templates: `chatml` and `plain` (the transformers backend's
template for models that ship none).
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from pathlib import Path
from typing import Any

from evalpipe.backends.base import PLAIN_TEMPLATE
from evalpipe.backends.models import ALIASES, gguf_path
from evalpipe.errors import InputError

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
        gguf = gguf_path(spec) if spec.endswith(".gguf") or spec in ALIASES else None
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
