"""Small file systems for full-disk tests: a tmpfs of a given size, mounted for the test
and unmounted after it. Mounting needs root (or CAP_SYS_ADMIN); where it is not
permitted the test is skipped with that reason."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def _mount(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["mount", *args], capture_output=True, text=True, check=False)


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """`path` as a tmpfs of `size` (e.g. "64k") for the duration of the block."""
    path.mkdir(parents=True, exist_ok=True)
    try:
        res = _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path))
    except OSError as exc:
        pytest.skip(f"cannot mount a tmpfs here ({exc}): full-disk tests need root")
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({res.stderr.strip()}): full-disk tests need "
                    "root or CAP_SYS_ADMIN")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def remount(path: Path, options: str) -> None:
    """Change a mounted tmpfs: a new size ("size=1m") or read-only ("ro")."""
    res = _mount("-o", f"remount,{options}", str(path))
    assert res.returncode == 0, res.stderr
