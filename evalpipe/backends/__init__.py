"""Model backends: local transformers models, recorded replies, HTTP servers."""

from __future__ import annotations

from typing import Any

from evalpipe.backends.base import Backend, GenerationSettings
from evalpipe.errors import InputError

BACKENDS = ("transformers", "replay", "openai", "llamacpp")


def load_backend(model: dict[str, Any]) -> Backend:
    """A backend for one `models:` entry of the config (the keys given; each backend
    holds its own defaults)."""
    kind = model.get("backend", "transformers")
    options = {k: v for k, v in model.items() if k not in ("id", "backend")}
    if kind == "transformers":
        from evalpipe.backends.transformers_backend import TransformersBackend

        return TransformersBackend(model["id"], **options)
    if kind == "replay":
        from evalpipe.backends.replay import ReplayBackend

        return ReplayBackend(model["id"], model.get("recording", ""))
    if kind == "openai":
        from evalpipe.backends.openai_backend import from_config

        return from_config(model)
    if kind == "llamacpp":
        from evalpipe.backends.llamacpp_backend import LlamaCppBackend

        return LlamaCppBackend(model["id"], **options)
    raise InputError(f"unknown backend {kind!r}", field="models.backend",
                     expected=" | ".join(BACKENDS))


__all__ = ["Backend", "GenerationSettings", "load_backend"]
