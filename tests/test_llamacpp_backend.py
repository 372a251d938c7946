"""The llama.cpp in-process backend on the embedded SmolLM2 GGUF, and the chat
template renderer it shares with the HTTP backend's text mode."""

from __future__ import annotations

import pytest

from evalpipe.backends.base import GenerationSettings
from evalpipe.backends.models import gguf_path
from evalpipe.backends.templates import CHATML, ChatTemplate
from evalpipe.errors import InputError, ModelUnavailableError

GEN = GenerationSettings(max_new_tokens=32)


def chat(question):
    return [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": question}]


# -- templates (no llama.cpp needed) ----------------------------------------------------------

def test_builtin_templates_and_inline_jinja():
    chatml = ChatTemplate.from_spec("chatml")
    assert chatml.render(chat("Hi")) == ("<|im_start|>system\nAnswer briefly.<|im_end|>\n"
                                         "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert chatml.stop == ["<|im_end|>"] and not chatml.supports_tools
    plain = ChatTemplate.from_spec("plain")
    assert plain.render(chat("Hi")).endswith("User: Hi\n\nAssistant:")
    inline = ChatTemplate.from_spec("{% for m in messages %}[{{ m.role }}]{{ m.content|tojson }}"
                                    "{% endfor %}{% if tools %}T{% endif %}")
    assert inline.render([{"role": "user", "content": "é<b>"}], tools=[{}]) == '[user]"é<b>"T'
    assert inline.supports_tools
    assert ChatTemplate.from_spec(None).source == CHATML
    with pytest.raises(InputError, match="chat template"):
        ChatTemplate.from_spec("no-such-template")


def test_a_template_can_refuse_with_raise_exception():
    from jinja2.exceptions import TemplateError

    t = ChatTemplate("{{ raise_exception('roles must alternate') }}")
    with pytest.raises(TemplateError, match="alternate"):
        t.render(chat("x"))


def test_the_embedded_gguf_carries_its_chat_template():
    template = ChatTemplate.from_spec("smollm2-135m")
    prompt = template.render(chat("What is 6 times 7?"))
    assert "<|im_start|>user\nWhat is 6 times 7?<|im_end|>" in prompt
    assert prompt.endswith("<|im_start|>assistant\n")
    assert template.eos_token == "<|im_end|>" and template.stop == ["<|im_end|>"]


def test_a_missing_gguf_is_a_clear_error(tmp_path):
    with pytest.raises(ModelUnavailableError, match="GGUF"):
        gguf_path(str(tmp_path / "nope.gguf"))
    with pytest.raises(ModelUnavailableError, match="GGUF"):
        gguf_path("org/some-hub-model")


# -- the backend (needs llama-cpp-python) ------------------------------------------------------

@pytest.fixture(scope="module")
def llm():
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed "
                        "(run .ci/setup-llamacpp.sh)")
    from evalpipe.backends import load_backend

    return load_backend({"id": "smollm2-135m", "backend": "llamacpp", "n_threads": 1})


def test_render_uses_the_models_chat_template(llm):
    prompt = llm.render(chat("What is 6 times 7?"), None)
    assert prompt == ChatTemplate.from_spec("smollm2-135m").render(chat("What is 6 times 7?"))
    facts = llm.describe()
    assert facts["backend"] == "llamacpp" and facts["n_ctx"] == 4096
    assert len(facts["gguf_sha256"]) == 16 and facts["chat_template_hash"]


def test_greedy_replies_do_not_depend_on_order_or_repetition(llm):
    prompts = [llm.render(chat(q), None) for q in
               ("What is 6 times 7?", "Name a colour.", "What is the capital of France?")]
    first = llm.generate(prompts, GEN)
    again = llm.generate(list(reversed(prompts)), GEN)
    assert [g.text for g in first] == [g.text for g in reversed(again)]
    for g in first:
        assert g.error is None and g.text.strip()
        assert g.prompt_tokens > 10 and 0 < g.completion_tokens <= GEN.max_new_tokens
        assert g.prefill_ms > 0 and g.decode_ms >= 0  # measured: load can only lengthen them
        assert g.finish_reason in ("stop", "length")


def test_max_new_tokens_cuts_a_reply_with_finish_reason_length(llm):
    [gen] = llm.generate([llm.render(chat("Count from one to one hundred."), None)],
                         GenerationSettings(max_new_tokens=5))
    assert gen.finish_reason == "length" and gen.completion_tokens == 5


def test_a_prompt_longer_than_the_context_is_an_error_reply(llm):
    long = llm.render(chat("word " * 6000), None)
    gens = llm.generate([long, llm.render(chat("Hi"), None)], GEN)
    assert gens[0].finish_reason == "error" and "n_ctx 4096" in gens[0].error
    assert gens[1].error is None  # the next prompt is unaffected
