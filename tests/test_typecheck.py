"""mypy over evalpipe/ with the settings in pyproject.toml ([tool.mypy]): a type
error in a checked module fails the suite, so CI runs the checker."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_evalpipe_type_checks():
    pytest.importorskip("mypy", reason="mypy comes with the test extras: pip install -e .[test]")
    out = subprocess.run([sys.executable, "-m", "mypy"],
                         cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Success" in out.stdout
