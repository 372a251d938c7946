"""Model backends: local transformers models, recorded replies, HTTP servers."""

from __future__ import annotations

from typing import Any

from evalpipe.backends.base import Backend, GenerationSettings
from evalpipe.errors import InputError

BACKENDS = ("transformers", "replay", "openai", "llamacpp")


def load_backend(model: dict[str, Any]) -> Backend:
    """A backend for one `models:` entry of the config."""
    kind = model.get("backend", "transformers")
    if kind == "transformers":
        from evalpipe.backends.transformers_backend import TransformersBackend

        return TransformersBackend(model["id"], dtype=model.get("dtype", "auto"))
    if kind == "replay":
        from evalpipe.backends.replay import ReplayBackend

        return ReplayBackend(model["id"], model.get("recording", ""))
    if kind == "openai":
        from evalpipe.backends.openai_backend import from_config

        return from_config(model)
    if kind == "llamacpp":
        from evalpipe.backends.llamacpp_backend import LlamaCppBackend

        return LlamaCppBackend(model["id"], n_ctx=model.get("n_ctx", 4096),
                               n_threads=model.get("n_threads"), seed=model.get("seed", 0),
                               n_batch=model.get("n_batch", 512))
    raise InputError(f"unknown backend {kind!r}", field="models.backend",
                     expected=" | ".join(BACKENDS))


__all__ = ["Backend", "GenerationSettings", "load_backend"]
