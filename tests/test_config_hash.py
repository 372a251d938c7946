"""A config's hash is a run's identity: the run id carries it, a resume and data
parallelism check it, and each cell's fingerprint includes parts of the config. The
hashes below were taken from the configs as shipped (and from one config that sets
every section) when they were pinned; a change to how the config is read or
normalised must leave every one of them as it was.

The texts are frozen copies, so a later edit of a shipped config (a new limit, say)
does not move this test; the shipped files themselves are checked to round-trip.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from evalpipe.config import load_config, parse_config

ROOT = Path(__file__).resolve().parent.parent

DEFAULT = """\
name: default
questions:
  - datasets/sample/arithmetic.jsonl
  - datasets/sample/plan.jsonl
  - datasets/sample/site_rag.jsonl
  - datasets/sample/control.jsonl
corpus: datasets/site
limit: 4
models:
  - id: smollm2-135m
    backend: transformers
    dtype: float32
  - id: qwen2.5-coder-0.5b
    backend: transformers
    dtype: float32
formats: [hermes]
toolsets: [none, calculator]
retrieval:
  - mode: none
  - mode: prepend
    method: bm25
    k: 3
k: 3
max_turns: 3
generation:
  max_new_tokens: 96
  temperature: 0
  seed: 0
  batch_size: 256
"""

BFCL = """\
name: bfcl
questions:
  - bfcl:simple_python
  - bfcl:multiple
  - bfcl:parallel
  - bfcl:parallel_multiple
  - bfcl:irrelevance
limit: 5
models:
  - id: smollm2-135m
    dtype: float32
formats: [native, hermes, json, xml]
toolsets: [question]
retrieval: [none]
schema_tools:
  mode: call_only
match: bfcl
max_turns: 1
generation:
  max_new_tokens: 160
  temperature: 0
  seed: 0
  batch_size: 256
"""

SEED = """\
name: seed
questions:
  - datasets/seed.jsonl
  - datasets/sample/arithmetic.jsonl
  - datasets/sample/plan.jsonl
  - datasets/sample/site_rag.jsonl
  - datasets/sample/control.jsonl
corpus: datasets/site
limit: 4
models:
  - id: qwen2.5-coder-0.5b
    dtype: float32
formats: [hermes]
toolsets: [none, calculator]
retrieval:
  - mode: none
  - mode: prepend
    method: bm25
    k: 3
max_turns: 5
latency_probe: 3
generation:
  max_new_tokens: 96
  batch_size: 256
"""

SIZES = """\
name: sizes
questions:
  - datasets/sample/arithmetic.jsonl
  - datasets/sample/plan.jsonl
  - datasets/sample/site_rag.jsonl
  - datasets/sample/control.jsonl
corpus: datasets/site
limit: 4
models:
  - id: smollm2-135m
    dtype: float32
  - id: qwen2.5-coder-0.5b
    dtype: float32
  - id: qwen2.5-coder-1.5b
    dtype: float32
formats: [hermes]
toolsets: [none, calculator]
retrieval:
  - mode: none
  - mode: prepend
    method: bm25
    k: 3
max_turns: 4
generation:
  max_new_tokens: 96
  batch_size: 256
"""

# Every section and every kind of entry, defaults spelt out beside values that are not.
EVERY_SECTION = """\
name: every-section
questions:
  - datasets/sample/arithmetic.jsonl
  - path: datasets/sample/plan.jsonl
    fields: {question: question}
    values: {lang: en}
corpus: datasets/site
limit: 2
suites: [arithmetic, plan]
models:
  - smollm2-135m
  - {id: qwen2.5-coder-0.5b, backend: transformers, dtype: bfloat16}
  - {id: rec, backend: replay, recording: /runs/earlier/samples.jsonl}
  - {id: gguf, backend: llamacpp, n_ctx: 2048, seed: 0}
  - id: served
    backend: openai
    base_url: http://127.0.0.1:8000/v1
    concurrency: 8
    stream: off
    api_key_env: SERVED_KEY
formats: [hermes, json, xml, native, openai]
toolsets: [none, calculator, math]
custom_tools: ['mytools:double']
retrieval:
  - none
  - {mode: prepend, method: bm25, bm25: {variant: robertson, k1: 1.2}, bigrams: false}
  - {mode: prepend, method: hybrid_weighted, weight: 0.3, k: 5, name: fused}
  - {mode: tool, method: dense, model: minilm, depth: 50}
generation: {max_new_tokens: 64, temperature: 0.7, top_p: 0.9, seed: 3, batch_size: 8}
max_turns: 4
system_prompt: You are terse.
final_answer_line: true
repeats: 3
latency_probe: 2
include: [{model: [smollm2-135m, served, rec, gguf, qwen2.5-coder-0.5b]}]
exclude: [{format: xml, toolset: math}, {retrieval: tool, method: dense, model: rec}]
chunking: {size: 600, overlap: 50}
tool_limits: {timeout_s: 5, max_result_chars: 3000}
schema_tools: {mode: stub, result: {ok: true}}
match: bfcl
k: 4
judge:
  model: {id: judge-model, backend: openai, base_url: http://127.0.0.1:9000/v1}
  use: all
  max_new_tokens: 32
  agreement: true
  labels: /labels/grading.jsonl
"""

PINNED = {
    "default": (DEFAULT, "8f885d976448"),
    "bfcl": (BFCL, "c957ea8ecccf"),
    "seed": (SEED, "5d3630cd9338"),
    "sizes": (SIZES, "637a328fc60b"),
    "every-section": (EVERY_SECTION, "db4b0e86e38a"),
}


@pytest.fixture
def at_root(monkeypatch, tmp_path):
    # Relative paths resolve against the working folder when they exist there.
    monkeypatch.chdir(ROOT)
    (tmp_path / "mytools.py").write_text("def double(x: int) -> int:\n    return 2 * x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("mytools", None)  # other tests import a module of that name too
    yield tmp_path
    sys.modules.pop("mytools", None)


@pytest.mark.parametrize("name", sorted(PINNED))
def test_a_config_hashes_as_it_did_when_pinned(at_root, name):
    text, pinned = PINNED[name]
    path = at_root / f"{name}.yaml"
    path.write_text(text, encoding="utf-8")
    config = load_config(path)
    assert config.hash() == pinned
    # a resume reads the config back from the manifest: the same hash again
    again = parse_config(config.to_dict(), source=str(path))
    assert again.hash() == pinned and again.to_dict() == config.to_dict()


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.yaml")),
                         ids=lambda p: p.name)
def test_every_shipped_config_reads_back_from_its_manifest_with_the_same_hash(
        at_root, path):
    config = load_config(path.relative_to(ROOT))
    again = parse_config(config.to_dict(), source=config.source)
    assert again.hash() == config.hash() and again.to_dict() == config.to_dict()
