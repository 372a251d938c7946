"""A backend that ignored the tools is caught from the prompt tokens it reports, and the
run says so in its log and manifest (with llama.cpp's server and the `openai` format
the tools were dropped silently: 53 prompt tokens against ~500 with hermes, and every
sample scored no_tool_call)."""

from __future__ import annotations

import json

from helpers import ScriptedBackend, write_jsonl

from evalpipe import runner
from evalpipe.config import parse_config
from evalpipe.health import ignored_tools
from evalpipe.tools import build_toolset

SCHEMAS = build_toolset("calculator").schemas()
ABOUT = len(json.dumps(SCHEMAS)) / 4  # the definitions' tokens, estimated


def test_prompts_too_short_to_hold_the_tools_are_flagged():
    short = {f"q{i}": 53 for i in range(4)}
    message = ignored_tools("m/openai/calculator/no-rag", short, SCHEMAS)
    assert message and "ignored the tools" in message and "53 tokens (median of 4)" in message
    assert "--jinja" in message
    full = {q: 53 + int(ABOUT) for q in short}
    assert ignored_tools("m/hermes/calculator/no-rag", full, SCHEMAS) is None
    # against the same questions without tools: the prompts must grow by the tools
    plain = dict.fromkeys(short, 40)
    assert ignored_tools("c", dict.fromkeys(short, 43), SCHEMAS, plain) is not None
    assert ignored_tools("c", {q: 40 + int(ABOUT) for q in short}, SCHEMAS, plain) is None
    assert ignored_tools("c", short, []) is None  # no tools offered
    assert ignored_tools("c", {"q1": 5}, SCHEMAS) is None  # too few samples to tell


def test_a_run_warns_in_its_log_and_manifest(tmp_path, monkeypatch):
    write_jsonl(tmp_path / "q.jsonl", [
        {"id": f"q{i}", "suite": "arithmetic", "question": f"What is {i} plus 2?",
         "answer": i + 2, "gold_calls": [{"id": "s1", "name": "add",
                                          "arguments": {"a": i, "b": 2}}]} for i in range(4)])
    # the scripted backend renders the messages alone: tools sent out of band (openai) are
    # dropped, as a server without tool support does; hermes writes them into the messages
    config = parse_config({"name": "h", "questions": [str(tmp_path / "q.jsonl")],
                           "models": [{"id": "scripted"}], "formats": ["openai", "hermes"],
                           "toolsets": ["none", "calculator"], "retrieval": ["none"]})
    lines: list[str] = []
    run_dir = runner.execute_run(config, tmp_path / "out", use_cache=False, echo=lines.append,
                                 backends=lambda model: ScriptedBackend(lambda p: "5"))
    manifest = json.loads((run_dir / "manifest.json").read_text())
    (warning,) = manifest["warnings"]
    assert warning.startswith("cell scripted/openai/calculator/no-rag: the backend seems to "
                              "have ignored the tools")
    assert "against the same questions without tools" in warning
    assert f"warning: {warning}" in lines
    from evalpipe.api import report

    assert "ignored the tools" in report(run_dir, "md")
