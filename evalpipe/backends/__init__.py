"""Model backends: local transformers models, recorded replies, HTTP servers.

A backend is one line of BACKENDS: its name and its model entry, a `ModelEntry`
section that declares what a `models:` entry of that backend may set (checked when
the config is read) and whose `load` makes the backend. An entry without `backend`
is the default backend's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import ValidationError

from evalpipe.backends.base import Backend, GenerationSettings, ModelEntry
from evalpipe.backends.local.cpu import AUTO, DTYPES, resolve_dtype
from evalpipe.registry import Registry
from evalpipe.schema import input_error, one_of

DEFAULT_BACKEND = "transformers"


class TransformersModel(ModelEntry):
    """The default backend's entry: a model id (an alias, a folder or a hub id) and its
    weights dtype. It lives here, apart from transformers_backend.py, because that
    module loads torch and reading a config must not."""

    backend: str = DEFAULT_BACKEND
    dtype: Annotated[str, one_of((AUTO, *DTYPES), "dtype")] = AUTO

    def record(self) -> dict[str, Any]:
        """A dtype only where it is not what auto gives."""
        dtype = resolve_dtype(self.dtype)[0]
        return {"id": self.id, "backend": self.backend,
                **({"dtype": dtype} if dtype != resolve_dtype(AUTO)[0] else {})}

    def load(self) -> Backend:
        from evalpipe.backends.transformers_backend import TransformersBackend

        return TransformersBackend(self.id, dtype=self.dtype)


BACKENDS: Registry[type[ModelEntry]] = Registry("backend", "models.backend")
BACKENDS.add(DEFAULT_BACKEND, TransformersModel)
BACKENDS.add("replay", "evalpipe.backends.replay:ReplayModel")
BACKENDS.add("openai", "evalpipe.backends.openai_backend:OpenAIModel")
BACKENDS.add("llamacpp", "evalpipe.backends.llamacpp_backend:LlamaCppModel")

# A config field holding a model entry: checked as the section of the entry's backend.
AnyModelEntry = Annotated[ModelEntry, BACKENDS.section_by("backend", DEFAULT_BACKEND)]


def model_entry(model: ModelEntry | Mapping[str, Any]) -> ModelEntry:
    """A model entry as a config or a manifest spells it (a cell's recorded model),
    checked by its backend's section."""
    if isinstance(model, ModelEntry):
        return model
    given = {"backend": DEFAULT_BACKEND, **model}
    section = BACKENDS[given["backend"]]
    try:
        return section.model_validate(given)
    except ValidationError as exc:
        raise input_error(exc, section, prefix="models") from None


def load_backend(model: ModelEntry | Mapping[str, Any]) -> Backend:
    """The backend of one model entry, with its model loaded (or its server reached)."""
    return model_entry(model).load()


__all__ = ["BACKENDS", "DEFAULT_BACKEND", "AnyModelEntry", "Backend", "GenerationSettings",
           "ModelEntry", "TransformersModel", "load_backend", "model_entry"]
