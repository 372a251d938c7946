"""Which path each model takes (the engine's batching loop or `model.generate`) and why,
and every kernel's state: said in the run's log and recorded in its manifest, never
silent; machine facts that change no reply leave fingerprints and cache keys alone."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from helpers import needs_compiler, tiny_arithmetic_config

from evalpipe.backends.transformers_backend import TransformersBackend, engine_line

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tiny_gemma3_dir(tiny_model_dir, tmp_path_factory):
    """A 2-layer Gemma 3 (sliding-window layers) with the tiny model's tokenizer."""
    import torch
    from transformers import AutoTokenizer, Gemma3ForCausalLM, Gemma3TextConfig

    out = tmp_path_factory.mktemp("tiny-gemma3")
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    tok.save_pretrained(out)
    torch.manual_seed(0)
    config = Gemma3TextConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128,
                              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                              head_dim=16, sliding_window=8, eos_token_id=tok.eos_token_id,
                              pad_token_id=tok.pad_token_id)
    Gemma3ForCausalLM(config).save_pretrained(out)
    return out


def test_a_llama_model_takes_the_loop_and_the_log_says_so(tiny_model_dir, capfd):
    backend = TransformersBackend(str(tiny_model_dir))
    assert capfd.readouterr() == ("", "")  # the caller's log says it (Backend.log_line)
    engine = backend.describe()["engine"]
    assert engine["path"] == "batching loop"
    assert engine["why"] == "every attention layer keeps a full cache"
    assert engine["fused_layers"] == "2 of 2" and engine["unfused"] == {}
    assert engine["dtype"] == engine["activations"] == "float32"
    assert engine["resident_bytes"] > 0
    assert set(engine["kernels"]) == {"own_attention", "panel_linear", "rotary"}
    assert engine["transformers"]
    log = backend.log_line()
    assert log == engine_line(str(tiny_model_dir), engine)
    assert f"{tiny_model_dir}: batching loop (every attention layer keeps a full cache); " \
           "fused layers 2 of 2" in log
    if shutil.which("cc") or shutil.which("gcc"):
        assert all(k["built"] for k in engine["kernels"].values()), engine["kernels"]
        assert "panel_linear" in log and "lanes" in log and "-march=native" in log


def test_gemma3_takes_generate_and_the_log_says_why(tiny_gemma3_dir):
    backend = TransformersBackend(str(tiny_gemma3_dir))
    assert backend.generation == "hf"
    engine = backend.describe()["engine"]
    assert engine["path"] == "model.generate"
    assert "sliding_attention" in engine["why"] and "kernels" not in engine
    assert backend.log_line().startswith(
        f"{tiny_gemma3_dir}: model.generate (its cache has sliding_attention layers; the "
        "batching loop keeps full-attention caches only); weights float32, resident ")
    tensors = [*backend.model.parameters(), *backend.model.buffers()]  # nothing packed
    assert engine["dtype"] == "float32" and engine["resident_bytes"] == sum(
        t.numel() * t.element_size() for t in tensors)


def test_an_asked_for_path_says_it_was_asked_for(tiny_model_dir, capsys):
    backend = TransformersBackend(str(tiny_model_dir), generation="hf")
    assert backend.describe()["engine"]["why"] == "generation='hf' was asked for"


def test_a_layer_that_is_not_fused_is_counted_with_its_reason():
    engine = {"path": "batching loop", "why": "w", "linear": "panel", "fused_layers": "0 of 2",
              "unfused": {"its MLP's gate and up projections have biases": 2},
              "kernels": {"rotary": {"built": False, "why_not": "no C compiler found"}}}
    assert engine_line("m", engine) == (
        "m: batching loop (w); fused layers 0 of 2 (2: its MLP's gate and up projections have "
        "biases); linears panel; kernels rotary not built (no C compiler found)")


@needs_compiler
def test_the_manifest_records_each_models_path_and_kernels(tmp_path, tiny_model_dir):
    path = tiny_arithmetic_config(tmp_path, tiny_model_dir)
    env = dict(os.environ, EVALPIPE_GENERATION_CACHE=str(tmp_path / "gen.sqlite"))
    ran = subprocess.run([sys.executable, "-m", "evalpipe", "run", "--config", str(path),
                          "--out", str(tmp_path / "o")], check=False, capture_output=True,
                         text=True, env=env)
    assert ran.returncode == 0, ran.stderr
    assert f"{tiny_model_dir}: batching loop" in ran.stdout  # the run's log
    (run_dir,) = [p for p in (tmp_path / "o").iterdir() if p.name != "latest"]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    for cell in manifest["cells"].values():
        engine = cell["model"]["engine"]
        assert engine["path"] == "batching loop"
        assert {name: k["built"] for name, k in engine["kernels"].items()} == {
            "own_attention": True, "panel_linear": True, "rotary": True}


def test_engine_facts_change_no_fingerprint_and_no_cache_key():
    """A run resumed, or a reply looked up, on a machine whose kernels differ is the same
    cell: how a machine runs the model decides no reply (beyond rounding, like the batch
    size)."""
    from evalpipe.cache import GenerationCache
    from evalpipe.config import parse_config
    from evalpipe.runplan import RunPlan

    config = parse_config({"name": "t", "questions": ["q.jsonl"], "models": [{"id": "m"}]})
    plan = RunPlan(config, [], config.cells(), None)
    cell = plan.cells[0]
    facts = {"model_id": "m", "path": "/models/m", "linear_kernel": "panel",
             "engine": {"path": "batching loop", "kernels": {}}}
    # the panel kernel did not build (in time) in this process, the folder was moved
    other = {"model_id": "m", "path": "/elsewhere/m", "linear_kernel": "onednn-packed",
             "engine": {"path": "model.generate"}}
    assert plan.fingerprint(cell, facts, []) == plan.fingerprint(cell, other, [])
    assert plan.fingerprint(cell, facts, []) != \
        plan.fingerprint(cell, {**facts, "model_id": "n"}, [])
    assert GenerationCache.model_key(facts) == GenerationCache.model_key(other)


def test_a_dtype_that_is_not_text_is_recorded_as_text():
    """A backend's facts may hold a dtype object (torch's, say): the cell's settings
    record it as the manifest writes it, as text, and the manifest's type reads it."""
    from helpers import ScriptedBackend

    from evalpipe.config import parse_config
    from evalpipe.records import CellSettings
    from evalpipe.runplan import RunPlan

    class Dtype:
        def __str__(self) -> str:
            return "float8"

    config = parse_config({"name": "t", "questions": ["q.jsonl"], "models": [{"id": "m"}]})
    plan = RunPlan(config, [], config.cells(), None)
    backend = ScriptedBackend(lambda prompt: "4")
    for facts, recorded in (({"dtype": Dtype()}, "float8"), ({}, None)):
        settings = plan.runtime(plan.cells[0], backend, facts).settings
        assert settings["dtype"] == recorded
        assert CellSettings.model_validate(settings).dtype == recorded
