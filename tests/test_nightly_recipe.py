"""The nightly recipe of docs/runs.md, run as written (the README carries the same
script) against a fake OpenAI-compatible server: it exits 0 only when it compared
tonight's run with the baseline and found no regression, and non-zero when the
server was down all night, when nothing could be compared, and when the model
behind the endpoint changed. Every night leaves the comparison's report (the reason
first), a JUnit XML file and a Markdown summary, whatever the verdict."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from fake_openai import Endpoint, FakeOpenAI, write_config
from helpers import REPO


def recipe(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    scripts = re.findall(r"```bash\n(#!/usr/bin/env bash\n# nightly\.sh.*?)```", text, re.DOTALL)
    assert len(scripts) == 1, f"{path}: one nightly.sh expected"
    return scripts[0]


def test_the_readme_script_is_the_documented_recipe():
    assert recipe(REPO / "README.md") == recipe(REPO / "docs" / "runs.md")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A home with configs/nightly.yaml and a baseline made while the server was well."""
    endpoint = Endpoint()
    home = tmp_path_factory.mktemp("home")
    with FakeOpenAI(respond=endpoint) as server:
        config = write_config(home, server.url, n=20, toolsets=("none",))
        (home / "configs").mkdir()
        shutil.move(config, home / "configs" / "nightly.yaml")
        bin_dir = home / "bin"
        bin_dir.mkdir()
        shim = bin_dir / "evalpipe"
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m evalpipe "$@"\n')
        shim.chmod(0o755)
        env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
                   PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
                   EVALPIPE_CACHE=str(home / "cache"))
        res = subprocess.run(["evalpipe", "run", "--config", "configs/nightly.yaml", "--out",
                              "outputs"], cwd=home, env=env, capture_output=True, text=True,
                             check=False)
        assert res.returncode == 0, res.stderr
        shutil.copytree((home / "outputs" / "latest").resolve(), home / "baseline")
        shutil.rmtree(home / "outputs")
        yield endpoint, home, env


def reports(tmp_path) -> tuple[str, list[tuple[str, str]], str]:
    """Tonight's comparison: the Markdown report, each JUnit test (its status and the
    reason), and the step summary."""
    [report] = (tmp_path / "site" / "reports").glob("*-vs-baseline.md")
    cases = []
    for case in ET.parse(report.with_suffix(".xml")).getroot().iter("testcase"):
        found = [c for c in case if c.tag in ("failure", "error", "skipped")]
        cases.append((found[0].tag, found[0].get("message")) if found else ("passed", ""))
    summary = report.with_name(report.stem + "-summary.md").read_text()
    return report.read_text(), cases, summary


def nightly(site, tmp_path, *, config_change=None) -> subprocess.CompletedProcess:
    _, home, env = site
    here = tmp_path / "site"
    shutil.copytree(home, here, ignore=shutil.ignore_patterns("cache"))
    if config_change:
        path = here / "configs" / "nightly.yaml"
        path.write_text(yaml.safe_dump(config_change(yaml.safe_load(path.read_text()))))
    script = tmp_path / "nightly.sh"
    script.write_text(recipe(REPO / "docs" / "runs.md"))
    return subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False,
                          env=dict(env, EVALPIPE_HOME=str(here),
                                   BASELINE=str(here / "baseline")))


@pytest.fixture
def endpoint(site):
    endpoint = site[0]
    yield endpoint
    endpoint.__init__()


def test_a_healthy_night_passes(site, endpoint, tmp_path):
    res = nightly(site, tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "no regression against" in res.stdout
    report, cases, summary = reports(tmp_path)
    assert "no significant regression" in report.splitlines()[2]
    assert len(cases) == 4 and {status for status, _ in cases} <= {"passed", "skipped"}
    assert ("passed", "") in cases and "| fake/-/none/no-rag | exact | 20 | 100.0 |" in summary


def test_a_server_down_all_night_fails_the_night(site, endpoint, tmp_path):
    endpoint.down = True
    res = nightly(site, tmp_path)
    assert res.returncode == 4, res.stdout + res.stderr
    assert "NOT COMPARED" in res.stdout
    assert "20 of 20 samples of B in the matched cells are infrastructure errors" in res.stderr
    assert "20 samples are infra errors" in res.stdout  # each once: one cell, one suite
    report, cases, _ = reports(tmp_path)
    assert report.splitlines()[2].startswith(":warning: **NOT COMPARED: 20 of 20 samples")
    assert {status for status, _ in cases} == {"skipped"}
    assert all("infrastructure errors" in reason for _, reason in cases)


def test_a_model_swapped_behind_the_same_name_fails_the_night(site, endpoint, tmp_path):
    endpoint.version = 2
    res = nightly(site, tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "the served model changed (the reply to the probe differs)" in res.stderr
    assert "not the same experiment" in res.stdout
    # the night a new model was deployed still has its table of what changed
    report, cases, summary = reports(tmp_path)
    assert report.splitlines()[2].startswith(":warning: **REFUSED (--strict): not the same "
                                             "experiment: cell")
    assert "| exact | 20 | 100.0 | 0.0 | -100.0 |" in report
    assert {status for status, _ in cases} == {"error"}
    assert all("the served model changed" in reason for _, reason in cases)
    assert "REFUSED" in summary


def test_a_grid_that_no_longer_matches_is_not_compared(site, endpoint, tmp_path):
    def add_a_cell(config):
        config["toolsets"] = ["none", "calculator"]
        return config

    res = nightly(site, tmp_path, config_change=add_a_cell)
    assert res.returncode == 4, res.stdout + res.stderr
    assert "the grids differ (cells only in B: fake/openai/calculator/no-rag)" in res.stderr
    report, cases, _ = reports(tmp_path)
    assert "NOT COMPARED: the grids differ" in report.splitlines()[2]
    assert "| exact | 20 | 100.0 | 100.0 | +0.0 |" in report  # the cell it could compare
    assert {status for status, _ in cases} == {"skipped"}
