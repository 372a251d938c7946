"""A cache never hides a changed model. A server's model is identified by what it says
it runs (its /models entry, each reply's `model`) and by its reply to a fixed probe;
a local model by a digest of its files. Changed behind the same name or in place,
it is generated afresh and `compare --strict` says it changed."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fake_openai import Endpoint, FakeOpenAI, write_config


def evalpipe(*args, env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evalpipe", *map(str, args)],
                          capture_output=True, text=True, env=env, check=False)


def reused(res: subprocess.CompletedProcess) -> tuple[int, int]:
    """(replies reused, replies generated) from `evalpipe run`'s cache line."""
    found = re.search(r"generation cache: (\d+) replies reused, (\d+) generated", res.stdout)
    assert found, res.stdout + res.stderr
    return int(found.group(1)), int(found.group(2))


@pytest.fixture
def served(tmp_path):
    model = Endpoint()
    with FakeOpenAI(respond=model) as server:
        env = dict(os.environ, EVALPIPE_GENERATION_CACHE=str(tmp_path / "gen.sqlite"))
        config = write_config(tmp_path, server.url, n=20, toolsets=("none",))
        yield model, config, env, tmp_path / "o"


def latest(out: Path) -> Path:
    return (out / "latest").resolve()


def test_a_model_changed_behind_the_same_name_is_not_answered_from_the_cache(served):
    model, config, env, out = served
    first = evalpipe("run", "--config", config, "--out", out, env=env)
    assert first.returncode == 0 and reused(first) == (0, 20), first.stderr
    run_a = latest(out)
    again = evalpipe("run", "--config", config, "--out", out, env=env)
    assert reused(again) == (20, 0)  # the same model: the cache serves it

    model.version = 2  # swapped behind the same name; the server reports nothing new
    swapped = evalpipe("run", "--config", config, "--out", out, env=env)
    assert swapped.returncode == 0 and reused(swapped) == (0, 20)
    run_c = latest(out)
    answers = {json.loads(line)["final_answer"] for line in
               (run_c / "samples.jsonl").read_text().splitlines()}
    assert answers == {"The answer is 0."}  # tonight's model answered
    a, c = (json.loads((r / "manifest.json").read_text())["cells"] for r in (run_a, run_c))
    (cell,) = a
    assert a[cell]["served"]["probe"] != c[cell]["served"]["probe"]
    assert a[cell]["served"]["listed"] == c[cell]["served"]["listed"] == {
        "id": "fake", "object": "model", "owned_by": "tests"}

    gate = evalpipe("compare", run_a, run_c, "--fail-on-regression", env=env)
    assert gate.returncode == 3, gate.stdout  # the new model's answers are judged
    assert "the served model changed (the reply to the probe differs)" in gate.stdout
    strict = evalpipe("compare", run_a, run_c, "--strict", env=env)
    assert strict.returncode == 2
    assert "--strict: cells are not the same experiment: cell 'fake/-/none/no-rag': " \
           "the served model changed (the reply to the probe differs)" in strict.stderr


def test_a_server_that_names_another_model_in_its_replies(served):
    model, config, env, out = served
    assert evalpipe("run", "--config", config, "--out", out, env=env).returncode == 0
    run_a = latest(out)
    model_reply = model.__call__

    def renamed(path, body):
        reply = model_reply(path, body)
        reply.data["model"] = "fake-2025-06-01"
        return reply

    model.__class__ = type("Renamed", (Endpoint,), {"__call__": lambda self, p, b: renamed(p, b)})
    res = evalpipe("run", "--config", config, "--out", out, env=env)
    assert reused(res) == (0, 20)
    strict = evalpipe("compare", run_a, latest(out), "--strict", env=env)
    assert strict.returncode == 2 and "model: 'fake' -> 'fake-2025-06-01'" in strict.stderr


def test_a_server_that_cannot_be_identified_is_never_answered_from_the_cache(served):
    """Down all night with a full cache: not one cached reply stands in for it."""
    model, config, env, out = served
    assert evalpipe("run", "--config", config, "--out", out, env=env).returncode == 0
    model.down = True
    res = evalpipe("run", "--config", config, "--out", out, env=env)
    assert res.returncode == 0 and reused(res) == (0, 20)
    notes = [line[line.index("warning:"):] for line in res.stderr.splitlines()
             if "warning:" in line]  # (after the progress bar's partial line)
    assert notes == [("warning: generation cache: not used for model 'fake': the model its "
                      f"server runs could not be identified (openai backend: POST "
                      f"{model_url(config)}/chat/completions failed after 1 attempt: HTTP 500: "
                      "upstream down)")]
    samples = (latest(out) / "samples.jsonl").read_text().splitlines()
    assert {json.loads(line)["stop_reason"] for line in samples} == {"infra_error"}


def model_url(config: Path) -> str:
    import yaml

    return yaml.safe_load(config.read_text())["models"][0]["base_url"]


# -- local models: the weights' digest -----------------------------------------------------

def test_a_folder_is_hashed_once_per_change(tmp_path, monkeypatch):
    from evalpipe.backends import weights

    monkeypatch.setenv("EVALPIPE_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"\1" * 1000)
    (folder / "config.json").write_text("{}")
    (folder / "checkpoint-5").mkdir()  # not read by from_pretrained, not hashed
    (folder / "checkpoint-5" / "model.safetensors").write_bytes(b"\2" * 10)
    hashed = []
    real = weights._hash_file
    monkeypatch.setattr(weights, "_hash_file", lambda p: hashed.append(p.name) or real(p))
    first = weights.folder_digest(folder)
    assert sorted(hashed) == ["config.json", "model.safetensors"]
    assert weights.folder_digest(folder) == first and len(hashed) == 2  # stat only
    with open(folder / "model.safetensors", "r+b") as f:  # changed in place
        f.write(b"\3")
    changed = weights.folder_digest(folder)
    assert changed != first and hashed[2:] == ["model.safetensors"]
    (folder / "model.safetensors").unlink()  # replaced by another file of the same bytes
    (folder / "model.safetensors").write_bytes(b"\3" + b"\1" * 999)
    assert weights.folder_digest(folder) == changed and len(hashed) == 4


def test_a_local_model_changed_in_place_is_not_answered_from_the_cache(tmp_path,
                                                                     tiny_model_dir):
    from helpers import tiny_arithmetic_config

    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    config = tiny_arithmetic_config(tmp_path, model)
    env = dict(os.environ, EVALPIPE_GENERATION_CACHE=str(tmp_path / "gen.sqlite"),
               EVALPIPE_CACHE=str(tmp_path / "cache"))
    out = tmp_path / "o"
    assert reused(evalpipe("run", "--config", config, "--out", out, env=env))[0] == 0
    run_a = latest(out)
    assert reused(evalpipe("run", "--config", config, "--out", out, env=env))[1] == 0

    import torch
    from safetensors.torch import load_file, save_file

    path = model / "model.safetensors"
    tensors = load_file(path)
    name = next(n for n in tensors if "embed" in n)
    tensors[name] = tensors[name] * -1.0  # new weights, written over the old file
    save_file(tensors, path, metadata={"format": "pt"})
    assert torch.is_tensor(tensors[name])
    res = evalpipe("run", "--config", config, "--out", out, env=env)
    assert res.returncode == 0 and reused(res)[0] == 0, res.stdout
    facts = [json.loads((r / "manifest.json").read_text())["cells"] for r in (run_a, latest(out))]
    cell = next(iter(facts[0]))
    assert facts[0][cell]["model"]["weights"] != facts[1][cell]["model"]["weights"]
    assert facts[0][cell]["fingerprint"] != facts[1][cell]["fingerprint"]
