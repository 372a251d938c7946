"""dtype: the model entry's `dtype` reaches the backend and its description, and the
default model answers the bundled arithmetic sample the same way under bfloat16 as
under float32, at the rate measured in docs/speed.md (minus a margin)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Measured with this test's setup (docs/speed.md): on the 6-question arithmetic sample,
# 5 of 6 bfloat16 final answers were identical to float32's on the bfloat16 panels with
# float32 around them (3 of 6 with the whole model in bfloat16); the other differs in
# digits (and all six are wrong under both dtypes: the 135M model rarely calls the
# calculator). The assertion allows one question fewer than measured.
MEASURED_AGREEMENT = 5 / 6
MARGIN = 0.17


def arithmetic_sample():
    from evalpipe.questions import load_questions

    sample = REPO / "datasets/sample/arithmetic.jsonl"
    if sample.is_file():
        return load_questions(sample)
    full = REPO / "datasets/arithmetic.jsonl"
    if not full.is_file():
        pytest.skip("no arithmetic question set")
    return load_questions(full)[:12]


def final_answers(backend, questions) -> dict[str, str]:
    from evalpipe.backends.base import GenerationSettings
    from evalpipe.engine import CellRuntime, Engine
    from evalpipe.formats import get_format
    from evalpipe.tools import build_toolset

    runtime = CellRuntime(cell_id="dtype", fingerprint="dtype", settings={}, backend=backend,
                          fmt=get_format("hermes"), toolset=build_toolset("calculator"),
                          generation=GenerationSettings(max_new_tokens=128, batch_size=16),
                          max_turns=3)
    answers = {}
    for samples in Engine().run(runtime, questions, "dtype"):
        for s in samples:
            answers[s.question_id] = " ".join(s.final_answer.split())
    return answers


def test_unknown_dtype_is_an_input_error(tiny_model_dir):
    from evalpipe.backends.transformers_backend import TransformersBackend
    from evalpipe.errors import InputError

    with pytest.raises(InputError):
        TransformersBackend(str(tiny_model_dir), dtype="float8")


def test_dtype_reaches_model_and_description(tiny_model_dir):
    import torch

    from evalpipe.backends import load_backend
    from evalpipe.backends.local import packed_linear

    backend = load_backend({"id": str(tiny_model_dir), "dtype": "bfloat16"})
    facts = backend.describe()
    assert facts["dtype"] == "bfloat16" and facts["engine"]["dtype"] == "bfloat16"
    assert backend.model.get_input_embeddings().weight.dtype == torch.bfloat16
    if packed_linear.kernel_for(torch.bfloat16) == "panel":  # float32 around bf16 panels
        assert facts["engine"]["linear"] == "panel" and facts["activations"] == "float32"
        assert backend.batcher.dtype == torch.float32
        assert facts["engine"]["bf16_products"] in ("dot", "widened")
    else:  # the model's own dtype throughout
        assert "activations" not in facts and backend.batcher.dtype == torch.bfloat16
    prompt = backend.render([{"role": "user", "content": "What is 2 + 2?"}], None)
    from evalpipe.backends.base import GenerationSettings

    (gen,) = backend.generate([prompt], GenerationSettings(max_new_tokens=4))
    assert gen.finish_reason in ("stop", "length") and gen.completion_tokens >= 1


@pytest.mark.slow
def test_bfloat16_agrees_with_float32_on_arithmetic_sample(default_backend):
    from evalpipe.backends import load_backend

    questions = arithmetic_sample()
    f32 = final_answers(default_backend, questions)
    bf16 = final_answers(load_backend({"id": "smollm2-135m", "dtype": "bfloat16"}), questions)
    agree = sum(f32[q.id] == bf16[q.id] for q in questions) / len(questions)
    assert agree >= MEASURED_AGREEMENT - MARGIN, (agree, f32, bf16)
