"""Qwen2.5-Coder-0.5B- and 1.5B-Instruct, models that really call tools.

The recorded replies (tests/data/qwen_replies.json: `evalpipe measure-formats --model
qwen2.5-coder-0.5b,qwen2.5-coder-1.5b --formats hermes,json,xml,native --dump`, each
distinct reply once, with what the parsers read from it) run on every test run: the
parsers meet the call shapes these models really write (bare JSON, fenced JSON,
several calls in one reply). The live test is marked `qwen` and runs only where the
converted 0.5B is already in the cache (a 478 MB fetch and a conversion of minutes:
never done by a test); the 1.5B never runs in the tests.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalpipe.formats import ERROR_KINDS, get_format
from evalpipe.tools import build_toolset

FIXTURES = Path(__file__).parent / "data" / "qwen_replies.json"
MODEL = "qwen2.5-coder-0.5b"
SCHEMAS = build_toolset("math").schemas()


def load() -> dict:
    return json.loads(FIXTURES.read_text(encoding="utf-8"))


def recorded() -> list[tuple[str, str, int, dict]]:
    return [(model, fmt, i, case) for model, formats in load()["replies"].items()
            for fmt, cases in formats.items() for i, case in enumerate(cases)]


def read(fmt_name: str, raw: str, lenient: bool) -> dict:
    fmt = get_format(fmt_name)
    fmt.prepare([], SCHEMAS, True)
    result = fmt.parse(raw, lenient=lenient)
    assert all(e.kind in ERROR_KINDS and e.kind != "parser_bug" for e in result.errors)
    return {"calls": [[c.name, c.arguments] for c in result.calls],
            "errors": [e.kind for e in result.errors], "repaired": result.repaired}


def test_recorded_replies_come_from_both_models_and_hold_their_call_shapes():
    data = load()
    assert set(data["replies"]) == {"qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"}
    for formats in data["replies"].values():
        assert {"hermes", "json", "xml", "native"} <= set(formats)
        assert all(case["raw"] for cases in formats.values() for case in cases)
        # these models call tools: most formats read calls out of their replies
        with_calls = [f for f, cases in formats.items()
                      if any(case["lenient"]["calls"] for case in cases)]
        assert len(with_calls) >= 3, with_calls


@pytest.mark.parametrize(("model", "fmt", "index", "case"), recorded(),
                         ids=lambda v: v if isinstance(v, (str, int)) else "")
def test_recorded_reply_parses_as_pinned(model, fmt, index, case):
    for mode in ("strict", "lenient"):
        assert read(fmt, case["raw"], mode == "lenient") == case[mode], (mode, case["raw"])


def test_calls_without_the_protocol_wrapper_are_read_leniently_and_refused_strictly():
    """Bare or fenced JSON under hermes (never the <tool_call> tags): each call runs
    (lenient, repaired) and is one strict format error; no reply loses a call in strict
    mode that it did not report as an error."""
    untagged = [case for _, fmt, _, case in recorded() if fmt == "hermes"
                and "<tool_call>" not in case["raw"] and case["lenient"]["calls"]]
    assert untagged, "the recorded hermes replies hold no untagged call"
    for case in untagged:
        assert case["lenient"]["repaired"]
        assert case["strict"]["calls"] == []
        assert case["strict"]["errors"].count("untagged_call") >= len(case["lenient"]["calls"])


@pytest.fixture(scope="module")
def qwen_backend():
    from evalpipe.backends import load_backend
    from evalpipe.backends.models import converted_dir, is_cached

    if not is_cached(MODEL):
        pytest.skip(f"{MODEL} is not converted in the cache ({converted_dir(MODEL)}); "
                    f"`evalpipe run` fetches and converts it once (478 MB, minutes)")
    return load_backend({"id": MODEL, "dtype": "float32"})


@pytest.mark.qwen
@pytest.mark.slow
def test_the_seed_questions_get_real_tool_verdicts(qwen_backend, tmp_path):
    """The engine and the ladder on the 0.5B's own calls (three questions, three
    turns): bare JSON calls run through the lenient parse, count as strict format
    errors, and every sample gets a verdict that names a tool-use failure or success."""
    from evalpipe.backends.base import GenerationSettings
    from evalpipe.engine import CellRuntime, Engine
    from evalpipe.questions import load_questions
    from evalpipe.scoring import score_sample

    questions = load_questions(str(Path(__file__).parent.parent / "datasets" / "seed.jsonl"))
    toolset = build_toolset("calculator")
    cell = CellRuntime(
        cell_id=f"{MODEL}/hermes/calculator/no-rag", fingerprint="test",
        settings={"model": MODEL, "format": "hermes", "toolset": "calculator",
                  "tools_offered": toolset.names, "retrieval": {"mode": "none"}},
        backend=qwen_backend, fmt=get_format("hermes"), toolset=toolset,
        generation=GenerationSettings(max_new_tokens=64, batch_size=8), max_turns=3)
    samples = [s.to_dict() for group in Engine().run(cell, questions, "t") for s in group]
    by_id = {q.id: q for q in questions}
    scored = {s["question_id"]: score_sample(s, by_id[s["question_id"]]) for s in samples}
    first = samples[0]["turns"][0]
    assert first["calls"] and first["calls"][0]["name"] == "multiply"
    assert first["calls"][0]["arguments"] == {"a": 1234, "b": 5678}
    assert first["strict_errors"] and first["repaired"]  # no <tool_call> tags
    assert scored["seed-1"]["format_valid"] is True
    assert scored["seed-1"]["format_valid_strict"] is False
    assert all(s["category"] not in ("infra_error", "malformed_call") for s in scored.values())
