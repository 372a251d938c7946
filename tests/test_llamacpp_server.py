"""The OpenAI-compatible backend against a real server: llama-cpp-python's
OpenAI-compatible server on 127.0.0.1, serving the embedded SmolLM2 GGUF.

Skipped only when llama_cpp cannot be imported (.ci/setup-llamacpp.sh installs it).
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed "
                    "(run .ci/setup-llamacpp.sh)")
pytest.importorskip("llama_cpp.server.app", reason="llama-cpp-python was installed without "
                    "its [server] extra (run .ci/setup-llamacpp.sh)")

from evalpipe.backends import load_backend
from evalpipe.backends.base import GenerationSettings
from evalpipe.backends.models import gguf_path

MODEL = "smollm2-135m"
GREEDY = {"repeat_penalty": 1.0}  # the server's default is 1.1; evalpipe's greedy means none
GEN = GenerationSettings(max_new_tokens=48)
MULTIPLY = {"type": "function", "function": {
    "name": "multiply", "description": "Multiply two numbers.",
    "parameters": {"type": "object", "properties": {"a": {"type": "number"},
                                                    "b": {"type": "number"}},
                   "required": ["a", "b"]}}}
QUESTIONS = ["What is 6 times 7?", "Name a colour.", "What is the capital of France?",
             "Count from one to five.", "Say hello in Vietnamese.", "What is 12 plus 30?",
             "Is water wet?", "Write one word that rhymes with cat."]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, log: Path):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf_path(MODEL)),
               "--model_alias", MODEL, "--host", "127.0.0.1", "--port", str(self.port),
               "--n_ctx", "4096", "--seed", "0", "--n_threads", "1", "--verbose", "False",
               # small prompt batches: the server reuses the KV cache of the previous
               # request's common prefix, and llama.cpp's numbers depend on how a prompt
               # is split into batches; small batches (llama.cpp raises 1 to 64) make a
               # greedy reply (nearly always) independent of the request before it
               "--n_batch", "1", "--n_ubatch", "1",
               # without this, a new request cuts the reply being streamed short
               "--interrupt_requests", "False"]
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        self.log = log

    def wait_ready(self, timeout: float = 120.0) -> None:
        # Polls until the server answers; the deadline only ends a server that never starts.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"llama.cpp server exited with {self.proc.returncode}: "
                            f"{self.log.read_text(errors='replace')[-2000:]}")
            try:
                with urllib.request.urlopen(self.url + "/models", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.3)  # not up yet: ask again
        self.stop()
        pytest.fail(f"llama.cpp server did not answer /v1/models within {timeout:g} s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(tmp_path_factory.mktemp("llama-server") / "server.log")
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


def backend(url, **kw):
    return load_backend({"id": MODEL, "backend": "openai", "base_url": url,
                         "extra_body": GREEDY, "backoff_s": 0.05, "max_backoff_s": 0.2, **kw})


def chat(question):
    return [{"role": "system", "content": "You are a helpful assistant. Answer briefly."},
            {"role": "user", "content": question}]


def test_chat_with_tools_gives_structured_calls_and_takes_tool_results(server):
    b = backend(server.url, tool_choice={"type": "function", "function": {"name": "multiply"}})
    messages = chat("What is 6 times 7? Use the tool.")
    [gen] = b.generate([b.render(messages, [MULTIPLY])], GEN)
    assert gen.error is None, gen.error
    assert gen.tool_calls and gen.tool_calls[0].name == "multiply"
    assert isinstance(gen.tool_calls[0].arguments, dict) and gen.tool_calls[0].id
    assert gen.prompt_tokens > 0 and gen.completion_tokens > 0
    # The canonical transcript of the next turn: the call with its id, the result by that id.
    call = gen.tool_calls[0]
    messages += [
        {"role": "assistant", "content": gen.text, "tool_calls": [
            {"id": call.id, "type": "function",
             "function": {"name": call.name, "arguments": call.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": "42"}]
    plain = backend(server.url)
    [answer] = plain.generate([plain.render(messages, [MULTIPLY])], GEN)
    assert answer.error is None, answer.error
    assert answer.finish_reason in ("stop", "length") and answer.text.strip()


def test_concurrency_1_and_4_give_identical_greedy_replies(server):
    outputs = {}
    for concurrency in (1, 4):
        b = backend(server.url, concurrency=concurrency)
        gens = b.generate([b.render(chat(q), None) for q in QUESTIONS], GEN)
        assert all(g.error is None for g in gens), [g.error for g in gens]
        outputs[concurrency] = [g.text for g in gens]
    assert outputs[1] == outputs[4]
    assert len(set(outputs[1])) > 1  # different questions, different replies


def test_streaming_measures_time_to_first_token(server):
    b = backend(server.url, stream="on")
    [gen] = b.generate([b.render(chat(QUESTIONS[0]), None)], GEN)
    assert gen.error is None and gen.text.strip()
    assert gen.prefill_ms > 0 and gen.completion_tokens > 0  # load only lengthens prefill_ms
    plain = backend(server.url, stream="off")
    [same] = plain.generate([plain.render(chat(QUESTIONS[0]), None)], GEN)
    assert same.text == gen.text and same.prompt_tokens > 0


def test_text_mode_with_the_models_template_matches_chat_mode(server):
    chat_b = backend(server.url)
    text_b = backend(server.url, mode="text", chat_template=MODEL)
    for q in QUESTIONS[:3]:
        [a] = chat_b.generate([chat_b.render(chat(q), None)], GEN)
        [b] = text_b.generate([text_b.render(chat(q), None)], GEN)
        assert a.error is None and b.error is None, (a.error, b.error)
        assert a.text.strip() == b.text.strip()


def test_a_server_killed_mid_run_gives_error_replies_and_loses_none(tmp_path):
    srv = Server(tmp_path / "server.log")
    srv.wait_ready()
    try:
        b = backend(srv.url, concurrency=2, max_retries=2, timeout_s=30)
        prompts = [b.render(chat(f"{q} Explain in detail."), None) for q in QUESTIONS * 2]
        done = []

        def progress(n):
            done.append(n)
            if len(done) == 2:  # two replies in: kill the server under the rest
                threading.Thread(target=srv.proc.kill).start()

        gens = b.generate(prompts, GenerationSettings(max_new_tokens=96), progress=progress)
    finally:
        srv.stop()
    assert len(gens) == len(prompts) and sum(done) == len(prompts)
    ok = [g for g in gens if g.finish_reason != "error"]
    failed = [g for g in gens if g.finish_reason == "error"]
    assert len(ok) >= 2 and failed
    assert all(g.text.strip() for g in ok)
    for g in failed:
        assert "cannot connect" in g.error or "connection lost" in g.error, g.error
        assert srv.url in g.error


# Two tool questions and one without tools: both paths of the agent loop.
RUN_QUESTIONS = [
    {"id": "a1", "suite": "arithmetic", "question": "What is 12 plus 30?", "answer": 42,
     "gold_calls": [{"id": "s1", "name": "add", "arguments": {"a": 12, "b": 30}}]},
    {"id": "a2", "suite": "arithmetic", "question": "What is 6 times 7?", "answer": 42,
     "gold_calls": [{"id": "s1", "name": "multiply", "arguments": {"a": 6, "b": 7}}]},
    {"id": "c1", "suite": "control", "question": "What is the capital of France?",
     "answer": "Paris", "gold_calls": []},
]

def test_an_evalpipe_run_through_the_server_scores_like_the_in_process_backend(server, tmp_path,
                                                                               monkeypatch):
    from evalpipe.config import parse_config
    from evalpipe.runner import execute_run

    monkeypatch.setenv("EVALPIPE_CACHE", str(tmp_path / "cache"))
    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps(q) + "\n" for q in RUN_QUESTIONS))
    raw = {"name": "http-vs-inprocess", "questions": [str(questions)],
           "formats": ["hermes"], "toolsets": ["none", "calculator"], "max_turns": 3,
           "generation": {"max_new_tokens": 64}}
    runs = {}
    for name, model in [
        ("http", {"id": MODEL, "backend": "openai", "base_url": server.url, "concurrency": 4,
                  "extra_body": GREEDY}),
        ("inprocess", {"id": MODEL, "backend": "llamacpp", "n_threads": 1, "n_batch": 1}),
    ]:
        config = parse_config(dict(raw, models=[model]), source=str(tmp_path / f"{name}.yaml"))
        run_dir = execute_run(config, tmp_path / name, use_cache=False, echo=lambda s: None)
        samples = [json.loads(x) for x in (run_dir / "samples.jsonl").read_text().splitlines()]
        scores = json.loads((run_dir / "scores.json").read_text())
        runs[name] = ({(s["cell_id"], s["question_id"]): s for s in samples},
                      {(r["cell_id"], r["question_id"]): (r["exact"], r["category"])
                       for r in scores["samples"]})
    http, inproc = runs["http"], runs["inprocess"]
    assert set(http[0]) == set(inproc[0]) and len(http[0]) == 6
    assert all(s["stop_reason"] != "infra_error" for s in http[0].values())
    # The server reuses the previous request's prefix, the in-process backend evaluates
    # every prompt from scratch: a near tie may flip one reply (bench_http measured 1 of 16).
    differ = [k for k, s in http[0].items() if s["final_answer"] != inproc[0][k]["final_answer"]]
    assert len(differ) <= 1, differ
    assert sum(http[1][k] != inproc[1][k] for k in http[1]) <= len(differ)


@pytest.mark.slow
def test_a_served_model_judges_through_the_openai_backend(server, tmp_path):
    """The judge configured as an OpenAI-compatible model: `evalpipe judge --agreement`
    grades labelled replies through the server and prints its agreement."""
    from click.testing import CliRunner

    from evalpipe.cli import main
    from evalpipe.scoring.agreement import load_labels

    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n"
                              for r in load_labels()[:3]), encoding="utf-8")
    judge = tmp_path / "judge.yaml"
    judge.write_text(json.dumps({"judge": {"model": {
        "id": MODEL, "backend": "openai", "base_url": server.url, "extra_body": GREEDY},
        "max_new_tokens": 24}}))
    result = CliRunner().invoke(main, ["judge", "--agreement", "--judge", str(judge),
                                       "--labels", str(labels)],
                                env={"EVALPIPE_GENERATION_CACHE": str(tmp_path / "g.sqlite")})
    # exit 4 when the judge gave no verdict at all (a small model may not)
    verdicts = re.search(r"on 3 labelled replies: (\d+) verdict", result.output)
    assert verdicts and result.exit_code == (0 if int(verdicts.group(1)) else 4), result.output
    assert "judge agreement with 3 labelled replies" in result.output
    assert f"{MODEL}:" in result.output and "rules:" in result.output
