"""Where evalpipe keeps things between runs."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """The user cache: $EVALPIPE_CACHE, else ~/.cache/evalpipe (not created here)."""
    return Path(os.environ.get("EVALPIPE_CACHE") or Path.home() / ".cache" / "evalpipe")


def cache_dir(*parts: str) -> Path:
    """A folder under the user cache ($EVALPIPE_CACHE, else ~/.cache/evalpipe), created."""
    path = cache_root().joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path
