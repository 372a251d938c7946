"""Config values are checked against their registries before anything starts: through the
real command line, a misspelt name or a value out of range exits 2 with one line that
names the file, line and field and the closest valid value, and leaves nothing behind."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from evalpipe.cli import main

QUESTION = {"id": "q1", "suite": "arithmetic", "question": "What is 6 times 7?", "answer": 42}
OPENAI = "  - {id: s, backend: openai, base_url: 'http://127.0.0.1:9/v1'%s}\n"


def run_cli(tmp_path, config_text: str, env: dict[str, str] | None = None):
    (tmp_path / "q.jsonl").write_text(json.dumps(QUESTION) + "\n")
    (tmp_path / "site").mkdir(exist_ok=True)
    path = tmp_path / "c.yaml"
    path.write_text("questions: [q.jsonl]\ncorpus: site\n" + config_text)
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["run", "--config", str(path), "--out", str(out)],
                                env=env)
    return path, out, result


@pytest.mark.parametrize("text, line, field, hint", [
    # the registries
    ("formats: [hermes, jsno]\n", 3, "formats[1]", "did you mean json?"),
    ("toolsets: [calculater]\n", 3, "toolsets[0]", "did you mean calculator?"),
    ("retrieval:\n  - {mode: prepend, method: bm52}\n", 4, "retrieval[0].method",
     "did you mean bm25?"),
    ("retrieval:\n  - {mode: prepnd}\n", 4, "retrieval[0].mode", "did you mean prepend?"),
    ("retrieval:\n  - mode: prepend\n    bm25: {variant: lucen}\n", 5,
     "retrieval[0].bm25.variant", "did you mean lucene?"),
    ("retrieval:\n  - {mode: prepend, method: dense, model: minlm}\n", 4,
     "retrieval[0].model", "did you mean minilm?"),
    ("models:\n  - {id: m, dtype: flaot32}\n", 4, "models[0].dtype", "did you mean float32?"),
    ("models:\n  - {id: m, backend: opneai}\n", 4, "models[0].backend", "did you mean openai?"),
    ("models:\n" + OPENAI % ", mode: chta", 4, "models[0].mode", "did you mean chat?"),
    ("exclude:\n  - {format: hermse}\n", 4, "exclude[0].format", "did you mean hermes?"),
    ("exclude:\n  - {retrieval: prepnd}\n", 4, "exclude[0].retrieval", "did you mean prepend?"),
    ("include:\n  - {method: [bm25, hybird]}\n", 4, "include[0].method[1]",
     "did you mean hybrid?"),
    ("match: bfc\n", 3, "match", "did you mean bfcl?"),
    # the ranges
    ("models:\n" + OPENAI % ", timeout_s: -1", 4, "models[0].timeout_s", "greater than 0"),
    ("models:\n" + OPENAI % ", max_retries: -3", 4, "models[0].max_retries",
     "greater than or equal to 0"),
    ("models:\n" + OPENAI % ", concurrency: 0", 4, "models[0].concurrency",
     "greater than or equal to 1"),
    ("k: 0\n", 3, "k", "greater than or equal to 1"),
    ("retrieval:\n  - {mode: prepend, k: 0}\n", 4, "retrieval[0].k", "greater than or equal"),
    ("limit: 0\n", 3, "limit", "greater than or equal to 1"),
    ("max_turns: 0\n", 3, "max_turns", "greater than or equal to 1"),
    ("chunking: {size: 100, overlap: 100}\n", 3, "chunking", "overlap smaller than"),
    ("models:\n  - {id: g, backend: llamacpp, n_ctx: 0}\n", 4, "models[0].n_ctx",
     "greater than or equal to 1"),
    # the run's name becomes a folder name
    ("name: '../../../../escaped'\n", 3, "name", "cannot name a run folder"),
])
def test_a_bad_value_exits_2_naming_its_place_and_leaves_nothing(tmp_path, text, line, field,
                                                                 hint):
    path, out, result = run_cli(tmp_path, text)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith(f"error: {path}:{line}: field '{field}'"), lines[0]
    assert hint in lines[0]
    assert not out.exists()  # no run directory, no `latest`
    assert not [p for up in tmp_path.parents[:4] for p in up.glob("*escaped*")]


def test_custom_tools_are_imported_and_named_apart_before_anything_starts(tmp_path,
                                                                         monkeypatch):
    (tmp_path / "mytools.py").write_text(
        "def add(a: int, b: int) -> int:\n    return a + b\n\n"
        "def double(x: int) -> int:\n    '''Twice x.'''\n    return 2 * x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for entry, message in [("mytools:add", "tool name 'add' is taken by a built-in tool"),
                           ("mytools:tripple", "cannot import tool 'mytools:tripple'"),
                           ("mytools.double", "string should match pattern")]:
        path, out, result = run_cli(tmp_path, f"custom_tools: ['{entry}']\n")
        assert result.exit_code == 2, result.output
        assert f"{path}:3: field 'custom_tools[0]'" in result.output, result.output
        assert message in result.output and not out.exists()
    ok = CliRunner().invoke(main, ["plan", "--config", str(tmp_path / "c.yaml"),
                                   "--set", "custom_tools=[mytools:double]", "--out",
                                   str(tmp_path / "out")])
    assert ok.exit_code == 0 and "1 cells x 1 questions" in ok.output, ok.output


def test_a_reused_run_id_does_not_append_to_the_earlier_run(tmp_path):
    earlier = tmp_path / "out" / "nightly-1"
    earlier.mkdir(parents=True)
    manifest = {"run_id": "nightly-1", "status": "finished"}
    (earlier / "manifest.json").write_text(json.dumps(manifest))
    (earlier / "samples.jsonl").write_text('{"question_id": "q1"}\n')
    before = {p.name: p.read_text() for p in earlier.iterdir()}
    _, _, result = run_cli(tmp_path, "models: [m]\n",
                           env={**os.environ, "EVALPIPE_RUN_ID": "nightly-1"})
    assert result.exit_code == 2, result.output
    assert "exists already" in result.output and "--resume" in result.output
    assert "field 'EVALPIPE_RUN_ID'" in result.output
    assert {p.name: p.read_text() for p in earlier.iterdir()} == before
    _, _, bad = run_cli(tmp_path, "models: [m]\n", env={**os.environ,
                                                        "EVALPIPE_RUN_ID": "../up"})
    assert bad.exit_code == 2 and "cannot name a run folder" in bad.output
    assert not (tmp_path / "up").exists()


def test_a_name_taken_from_the_file_name_is_made_a_plain_folder_name(tmp_path):
    from evalpipe.config import load_config

    path = tmp_path / "my nightly (v2).yaml"
    path.write_text("questions: [q.jsonl]\n")
    assert load_config(path).name == "my-nightly-v2"


def test_the_python_api_refuses_the_same_values():
    import evalpipe
    from evalpipe.errors import InputError

    with pytest.raises(InputError) as err:
        evalpipe.load({"questions": ["q.jsonl"], "formats": ["hermse"]})
    assert err.value.field == "formats[0]" and "did you mean hermes?" in str(err.value)


def test_names_given_on_the_command_line_are_checked_before_a_model_or_index_loads(
        tmp_path, monkeypatch):
    import evalpipe.backends
    import evalpipe.corpus

    def never(*args, **kwargs):
        raise AssertionError("loaded before the names were checked")

    monkeypatch.setattr(evalpipe.backends, "load_backend", never)
    monkeypatch.setattr(evalpipe.corpus, "load_corpus", never)
    measured = CliRunner().invoke(main, ["measure-formats", "--formats", "hermes,hermse"])
    assert measured.exit_code == 2, measured.output
    assert "unknown format 'hermse' (did you mean hermes?)" in measured.output
    (tmp_path / "q.jsonl").write_text(json.dumps(QUESTION) + "\n")
    path = tmp_path / "c.yaml"
    path.write_text("questions: [q.jsonl]\ncorpus: site\n")
    retrieved = CliRunner().invoke(main, ["retrieve", "--config", str(path), "--method",
                                          "bm25", "--method", "hybird"])
    assert retrieved.exit_code == 2, retrieved.output
    assert "unknown retrieval method 'hybird' (did you mean hybrid?)" in retrieved.output
