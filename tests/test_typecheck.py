"""mypy over evalpipe/ with the settings in pyproject.toml ([tool.mypy]): a type
error in a checked module fails the suite, so CI runs the checker. The modules still
excused (the override with ignore_errors) must each still have an error: one that
checks clean comes off the list."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ERROR = re.compile(r"^(?P<path>[^:\n]+\.py):\d+: error:", re.MULTILINE)


def mypy(*args: str) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("mypy", reason="mypy comes with the test extras: pip install -e .[test]")
    return subprocess.run([sys.executable, "-m", "mypy", *args],
                          cwd=REPO, capture_output=True, text=True)


def test_evalpipe_type_checks():
    out = mypy()
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Success" in out.stdout


def _ini_value(value: object) -> str:
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, list):
        return ", ".join(map(str, value))
    return str(value)


def config_without_excuses(settings: dict) -> tuple[str, list[str]]:
    """pyproject's mypy settings as a mypy.ini without the ignore_errors override, and
    the modules that override excused."""
    lines = ["[mypy]"] + [f"{key} = {_ini_value(value)}" for key, value in settings.items()
                          if key != "overrides"]
    excused: list[str] = []
    for override in settings.get("overrides", []):
        modules = override["module"]
        if override.get("ignore_errors"):
            excused += modules
            continue
        options = {k: v for k, v in override.items() if k != "module"}
        lines += [f"[mypy-{','.join(modules)}]"] + [f"{k} = {_ini_value(v)}"
                                                     for k, v in options.items()]
    return "\n".join(lines) + "\n", excused


def module_path(module: str) -> str:
    base = REPO / Path(*module.split("."))
    path = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
    assert path.is_file(), f"{module} is on mypy's ignore list but does not exist"
    return path.relative_to(REPO).as_posix()


def test_every_module_on_the_ignore_list_still_has_a_type_error(tmp_path):
    settings = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
    text, excused = config_without_excuses(settings)
    config = tmp_path / "mypy.ini"
    config.write_text(text)
    # a cache of its own: the options differ from the plain run's
    out = mypy("--config-file", str(config), "--cache-dir", str(REPO / ".mypy_cache" / "strict"))
    with_errors = {m["path"] for m in ERROR.finditer(out.stdout)}
    clean = [m for m in excused if module_path(m) not in with_errors]
    assert not clean, (f"{clean} type-check clean: take them off the ignore list in "
                       "pyproject.toml ([[tool.mypy.overrides]] with ignore_errors)")
