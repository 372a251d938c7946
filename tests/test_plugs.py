"""Adding a backend, a retriever, a toolset or a format is one registration each.

This module plays the part of a user's package: it defines a plug of each kind
(an `echo` backend, a `first` retrieval method, a `loud` toolset, a `line` format)
and adds each to its registry with one call, and with that alone a config names them,
checks their settings, and a run uses them end to end. Nothing of evalpipe is patched.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import evalpipe
from evalpipe.backends import BACKENDS, Backend, ModelEntry
from evalpipe.cli import main
from evalpipe.config import parse_config
from evalpipe.corpus import Chunk
from evalpipe.errors import InputError
from evalpipe.formats import FORMATS
from evalpipe.formats.base import PromptProtocolFormat, start_result
from evalpipe.records import Generation, ParseResult, ToolCall
from evalpipe.retrieval import RETRIEVERS, Hit, Method, RetrieverSettings, build_retriever
from evalpipe.store import RunStore
from evalpipe.tools import TOOLSETS, Tool

# -- a backend: its model entry (options checked by the config) and the backend it loads ---

class EchoBackend(Backend):
    """Calls `shout` on the question's last word, then answers with what the tool said."""

    def __init__(self, model_id: str, prefix: str):
        self.model_id, self.prefix = model_id, prefix

    def describe(self) -> dict[str, Any]:
        return {"model_id": self.model_id, "backend": "echo"}

    def render(self, messages, tools) -> str:
        return "\n".join(f"<{m['role']}>{m['content']}" for m in messages)

    def generate(self, prompts, settings, progress=None) -> list[Generation]:
        out = []
        for prompt in prompts:
            said = re.search(r"RESULT shout: (.*)", prompt)
            if said:
                out.append(Generation(f"{self.prefix} {said.group(1)}."))
            else:
                word = prompt.rstrip().split()[-1]
                out.append(Generation(f"CALL shout {json.dumps({'text': word})}"))
        return out


class EchoModel(ModelEntry):
    prefix: str = "The answer is"

    def load(self) -> Backend:
        return EchoBackend(self.id, self.prefix)


# -- a retrieval method: the first chunks of the corpus, whatever the query ---------------

class FirstChunks:
    name = "first"

    def __init__(self, chunks: list[Chunk]):
        self.chunks = chunks

    def search(self, query: str, k: int) -> list[Hit]:
        return [Hit(c, 1.0, rank) for rank, c in enumerate(self.chunks[:k], start=1)]


def first_chunks(settings: RetrieverSettings, chunks: list[Chunk]) -> FirstChunks:
    return FirstChunks(chunks)


# -- a toolset of one tool -------------------------------------------------------------------

def shout(text: str) -> str:
    return text.upper()


LOUD = [Tool("shout", "The text in capitals.",
             {"type": "object", "properties": {"text": {"type": "string"}},
              "required": ["text"], "additionalProperties": False}, shout)]


# -- a format: one line per call, `CALL name {arguments}` -------------------------------------

class LineFormat(PromptProtocolFormat):
    name = "line"

    def protocol(self, tools):
        names = ", ".join(t["function"]["name"] for t in tools)
        return f"Tools: {names}. Call one with a line: CALL name {{json arguments}}"

    def tool_result(self, name: str, content: str) -> str:
        return f"RESULT {name}: {content}"

    def _parse(self, text: str, *, lenient: bool = True) -> ParseResult:
        result, reply = start_result(text)
        if reply is None:
            return result
        rest = []
        for line in reply.splitlines():
            call = re.fullmatch(r"CALL (\w+) (\{.*\})", line.strip())
            if call:
                result.calls.append(ToolCall(call.group(1), json.loads(call.group(2)),
                                             f"call_{len(result.calls)}"))
            else:
                rest.append(line)
        result.content = "\n".join(rest).strip()
        return result


@pytest.fixture
def plugs():
    """Each plug added with one call to its registry, and taken back after the test."""
    added = [(BACKENDS, "echo", EchoModel),
             (RETRIEVERS, "first", Method(first_chunks, uses=())),
             (TOOLSETS, "loud", LOUD),
             (FORMATS, "line", LineFormat)]
    for registry, name, plug in added:
        registry.add(name, plug)
    yield
    for registry, name, _ in added:
        registry.remove(name)


def config(tmp_path: Path, **changes: Any) -> dict[str, Any]:
    (tmp_path / "q.jsonl").write_text(json.dumps(
        {"id": "q1", "suite": "s", "question": "Say it loud: hi", "answer": "HI"}) + "\n")
    (tmp_path / "site").mkdir(exist_ok=True)
    (tmp_path / "site" / "a.md").write_text("Alpha is the first letter.\n\nBeta follows it.")
    return {"name": "plugs", "questions": [str(tmp_path / "q.jsonl")],
            "corpus": str(tmp_path / "site"),
            "models": [{"id": "echo-1", "backend": "echo", "prefix": "It is"}],
            "formats": ["line"], "toolsets": ["loud"],
            "retrieval": [{"mode": "prepend", "method": "first", "k": 1}],
            "chunking": {"size": 30}, "max_turns": 3, **changes}


def test_a_plug_of_each_kind_runs_end_to_end_from_its_registration_alone(tmp_path, plugs):
    result = evalpipe.run(config(tmp_path), out=tmp_path / "out", use_cache=False)
    [sample] = RunStore(result.run_dir).read_samples()
    assert sample["cell_id"] == "echo-1/line/loud/first-prepend"
    assert sample["settings"]["model"] == {"id": "echo-1", "backend": "echo", "prefix": "It is"}
    assert sample["settings"]["tools_offered"] == ["shout"]
    assert [c["chunk_id"] for c in sample["retrieved"]] == ["a.md#0-26"]  # the first chunk
    first, second = sample["turns"]
    assert [(c["name"], c["arguments"]) for c in first["calls"]] == [("shout", {"text": "hi"})]
    assert first["tool_events"][0]["result"] == "HI"
    assert second["raw"] == "It is HI." and sample["final_answer"] == "It is HI."
    assert result.scores["samples"][0]["exact"] is True


def test_a_plug_is_checked_and_listed_like_the_built_in_ones(tmp_path, plugs):
    with pytest.raises(InputError) as err:
        parse_config(config(tmp_path, models=[{"id": "e", "backend": "echo", "prefx": "x"}]))
    assert err.value.field == "models[0].prefx" and "did you mean prefix?" in str(err.value)
    with pytest.raises(InputError) as err:
        parse_config(config(tmp_path, formats=["lien"]))
    assert "did you mean line?" in str(err.value) and "line" in (err.value.expected or "")
    for registry, name in ((BACKENDS, "echo"), (RETRIEVERS, "first"), (TOOLSETS, "loud"),
                           (FORMATS, "line")):
        assert name in registry.choices().split(" | ")


def test_a_name_taken_back_is_unknown_again(tmp_path, plugs):
    BACKENDS.remove("echo")
    try:
        with pytest.raises(InputError) as err:
            parse_config(config(tmp_path))
        assert err.value.field == "models[0].backend"
        assert "unknown backend 'echo'" in str(err.value)
    finally:
        BACKENDS.add("echo", EchoModel)


def test_the_command_line_runs_and_plans_a_config_of_plugs(tmp_path, plugs, monkeypatch):
    monkeypatch.setenv("EVALPIPE_GENERATION_CACHE", str(tmp_path / "gen.sqlite"))
    path = tmp_path / "c.yaml"
    path.write_text(json.dumps(config(tmp_path)))  # JSON is YAML
    ran = CliRunner().invoke(main, ["run", "--config", str(path), "--out", str(tmp_path / "o")])
    assert ran.exit_code == 0, ran.output
    [run_dir] = [p for p in (tmp_path / "o").iterdir() if p.name != "latest"]
    [sample] = RunStore(run_dir).read_samples()
    assert sample["cell_id"] == "echo-1/line/loud/first-prepend"
    assert sample["final_answer"] == "It is HI."
    planned = CliRunner().invoke(main, ["plan", "--config", str(path),
                                        "--out", str(tmp_path / "o")])
    assert planned.exit_code == 0, planned.output
    assert "echo-1/line/loud/first-prepend" in planned.output
    assert "the echo backend renders them" in planned.output


MISSPELT = [  # a config's change, the field named, what the error says
    ({"models": [{"id": "e", "backend": "ecko"}]}, "models[0].backend",
     "unknown backend 'ecko' (did you mean echo?)"),
    ({"formats": ["lien"]}, "formats[0]", "unknown format 'lien' (did you mean line?)"),
    ({"toolsets": ["lowd"]}, "toolsets[0]", "unknown toolset 'lowd' (did you mean loud?)"),
    ({"retrieval": [{"mode": "prepend", "method": "frist", "k": 1}]}, "retrieval[0].method",
     "unknown retrieval method 'frist' (did you mean first?)"),
]


@pytest.mark.parametrize(("changes", "field", "said"), MISSPELT,
                         ids=["backend", "format", "toolset", "retrieval"])
def test_a_misspelt_plug_is_an_error_in_the_config_and_on_the_command_line(
        tmp_path, plugs, changes, field, said):
    """The names a plug added are what an unknown name is held against, in the config
    and on the command line alike: an error naming the closest, exit 2, nothing run."""
    with pytest.raises(InputError) as err:
        parse_config(config(tmp_path, **changes))
    assert err.value.field == field and said in str(err.value)
    path = tmp_path / "c.yaml"
    path.write_text(json.dumps(config(tmp_path, **changes)))
    ran = CliRunner().invoke(main, ["run", "--config", str(path), "--out", str(tmp_path / "o")])
    assert ran.exit_code == 2, ran.output
    assert said in ran.output and not (tmp_path / "o").exists()


def test_a_misspelt_retrieval_method_is_an_error_when_retrieving_too(tmp_path, plugs):
    """Settings made without a check still reach no retriever but the one named, and
    the retrieval command checks its --method against the same names."""
    unchecked = RetrieverSettings().model_copy(update={"method": "frist"})
    with pytest.raises(InputError) as err:
        build_retriever(unchecked, [])
    assert "unknown retrieval method 'frist' (did you mean first?)" in str(err.value)
    assert "first" in (err.value.expected or "").split(" | ")
    path = tmp_path / "c.yaml"
    path.write_text(json.dumps(config(tmp_path)))
    for method, code in (("frist", 2), ("first", 0)):
        retrieved = CliRunner().invoke(main, ["retrieve", "--config", str(path),
                                              "--method", method])
        assert retrieved.exit_code == code, retrieved.output
    assert "(did you mean first?)" in CliRunner().invoke(
        main, ["retrieve", "--config", str(path), "--method", "frist"]).output
