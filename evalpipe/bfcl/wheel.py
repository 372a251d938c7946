"""BFCL's data, read out of the `bfcl-eval` wheel.

The wheel is fetched alone (`pip download --no-deps`, pinned version) into
evalpipe's cache like the model wheels (evalpipe/wheels.py): the package itself is never
installed or imported, since it depends on every model vendor's SDK. Its data
files are JSON lines inside the zip.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path
from typing import Any, Self

from evalpipe.errors import EvalpipeError, InputError
from evalpipe.paths import cache_dir
from evalpipe.wheels import WheelError, download_wheel, find_wheel, locked

PACKAGE = "bfcl-eval"
VERSION = "2026.3.23"  # pinned: verdicts and item ids are those of this release
WHEEL_NAME = f"bfcl_eval-{VERSION}-py3-none-any.whl"
DATA = "bfcl_eval/data"


def wheel_path(explicit: str | Path | None = None) -> Path:
    """The wheel: an explicit file ($EVALPIPE_BFCL_WHEEL or an argument), else the
    cached copy, downloaded once from the package index."""
    chosen = explicit or os.environ.get("EVALPIPE_BFCL_WHEEL")
    if chosen:
        path = Path(chosen)
        if not path.is_file():
            raise InputError("BFCL wheel not found", file=str(path),
                             expected=f"a {PACKAGE} wheel file such as {WHEEL_NAME}")
        return path
    folder, requirement = cache_dir("bfcl"), f"{PACKAGE}=={VERSION}"
    try:
        found = find_wheel(requirement, folder)
        if found is not None:
            return found
        with locked(folder):
            return download_wheel(requirement, folder)
    except WheelError as exc:
        raise EvalpipeError(f"{exc}; set EVALPIPE_BFCL_WHEEL to a local copy of the "
                            "wheel") from None


class BfclData:
    """Read access to the data files of one wheel."""

    def __init__(self, wheel: str | Path | None = None):
        self.path = wheel_path(wheel)
        try:
            self._zip = zipfile.ZipFile(self.path)
        except (zipfile.BadZipFile, OSError) as exc:
            raise InputError(f"not a readable wheel ({exc})", file=str(self.path),
                             expected=f"a {PACKAGE} wheel (a zip file)") from None
        self.names = set(self._zip.namelist())

    def read_text(self, member: str) -> str:
        if member not in self.names:
            raise InputError(f"the wheel has no {member}", file=str(self.path),
                             expected=f"a {PACKAGE}=={VERSION} wheel")
        return self._zip.read(member).decode("utf-8")

    def records(self, member: str) -> list[dict[str, Any]]:
        """A JSON-lines data file; a bad line names the member and its line."""
        where = f"{self.path}!{member}"
        out = []
        for number, line in enumerate(self.read_text(member).splitlines(), start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"not valid JSON ({exc.msg})", file=where, line=number,
                                 expected="one JSON object per line") from None
            if not isinstance(record, dict) or not isinstance(record.get("id"), str):
                raise InputError("record without a string id", file=where, line=number,
                                 field="id", expected='{"id": ..., ...}')
            out.append(record)
        return out

    def questions(self, category: str) -> list[dict[str, Any]]:
        return self.records(f"{DATA}/BFCL_v4_{category}.json")

    def answers(self, category: str) -> dict[str, dict[str, Any]]:
        return {r["id"]: r for r in self.records(f"{DATA}/possible_answer/BFCL_v4_{category}.json")}

    def close(self) -> None:
        self._zip.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
