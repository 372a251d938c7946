"""ruff over the repository with the rules pinned in pyproject.toml ([tool.ruff.lint]):
a finding fails the suite, so CI runs the linter."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    pytest.importorskip("ruff", reason="ruff comes with the test extras: pip install -e .[test]")
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "evalpipe",
                          "tests", "bench"], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
