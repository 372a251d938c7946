"""The identity of a local model's files: a sha256 over them, computed once per change.

A model folder's digest covers every regular file directly in it, name and content
(weights, config, tokenizer: what `from_pretrained` reads; subfolders such as
training checkpoints are neither read nor hashed). It enters the model's describe()
facts, so a folder whose weights change in place gets a new cell fingerprint and
new generation-cache keys: the cache never answers for the old weights.

Hashing takes a while (0.68 s for smollm2-135m's 517 MB folder on a 2-core AMD EPYC,
the files in the page cache), so each file's sha256 is remembered in the user
cache (weight-digests/) under a key of its real path, size, modification time (ns)
and inode: a later run only stats the files. A file rewritten in place (a new
mtime) or replaced by another (a new inode) is hashed again.
"""

from __future__ import annotations

import contextlib
import hashlib
from pathlib import Path

from evalpipe.paths import cache_dir

BLOCK = 1 << 20


def _hash_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(BLOCK):
            digest.update(block)
    return digest.hexdigest()


def file_digest(path: str | Path) -> str:
    """sha256 (hex) of a file, remembered by (real path, size, mtime, inode)."""
    path = Path(path).resolve()
    stat = path.stat()
    key = f"{path}:{stat.st_size}:{stat.st_mtime_ns}:{stat.st_ino}"
    marker = None
    with contextlib.suppress(OSError):  # no cache folder: hash every time
        marker = cache_dir("weight-digests") / hashlib.sha256(key.encode()).hexdigest()[:32]
        value = marker.read_text().strip()
        if len(value) == 64:
            return value
    value = _hash_file(path)
    if marker is not None:
        with contextlib.suppress(OSError):
            marker.write_text(value)
    return value


def folder_digest(path: str | Path) -> str:
    """16 hex of a sha256 over the names and digests of the files directly in `path`."""
    digest = hashlib.sha256()
    for file in sorted(p for p in Path(path).iterdir() if p.is_file()):
        digest.update(f"{file.name}\0{file_digest(file)}\n".encode())
    return digest.hexdigest()[:16]
