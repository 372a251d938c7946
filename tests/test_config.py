"""Config parsing, the grid, include/exclude and overrides."""

from __future__ import annotations

import pytest

from evalpipe.config import load_config, parse_config
from evalpipe.errors import InputError

BASE = {"questions": ["q.jsonl"], "corpus": "site", "models": ["m1", {"id": "m2"}],
        "formats": ["hermes", "json"], "toolsets": ["none", "calculator"],
        "retrieval": ["none", {"mode": "prepend", "method": "bm25", "k": 3}]}


def test_grid_is_the_product_less_format_copies_of_toolless_cells():
    cells = parse_config(dict(BASE)).cells()
    ids = [c.id for c in cells]
    # per model: 2 retrieval x (1 tool-less + 2 formats with tools) = 6
    assert len(ids) == 12 and len(set(ids)) == 12
    assert "m1/-/none/no-rag" in ids and "m2/json/calculator/bm25-prepend" in ids


def test_exclude_and_include_rules():
    cfg = parse_config(dict(BASE, exclude=[{"format": "json", "retrieval": "prepend"}]))
    assert not [c for c in cfg.cells() if c.format == "json" and c.retrieval.mode == "prepend"]
    cfg = parse_config(dict(BASE, include=[{"model": "m2", "toolset": "calculator"}]))
    assert {c.model.id for c in cfg.cells()} == {"m2"}
    with pytest.raises(InputError, match="empty"):
        parse_config(dict(BASE, include=[{"model": "nope"}])).cells()


@pytest.mark.parametrize("patch, field", [
    ({"retrieval": [{"mode": "sideways"}]}, "retrieval[0].mode"),
    ({"max_turns": 0}, "max_turns"),
    ({"limit": -1}, "limit"),
    ({"colour": "red"}, "colour"),
    ({"generation": {"beams": 4}}, "generation.beams"),
    ({"questions": []}, "questions"),
    ({"corpus": None}, "corpus"),
    ({"k": True}, "k"),
])
def test_bad_fields_are_named(patch, field):
    with pytest.raises(InputError) as err:
        parse_config({**BASE, **patch}, source="c.yaml")
    assert err.value.field == field and "c.yaml" in str(err.value)
    assert err.value.exit_code == 2


@pytest.mark.parametrize("yaml_text, field, line, suggestion", [
    ("models:\n  - id: m\n    dtpye: bfloat16\n", "models[0].dtpye", 4, "dtype"),
    ("chunking:\n  sise: 100\n", "chunking.sise", 3, "size"),
    ("exclude:\n  - tolset: none\n", "exclude[0].tolset", 3, "toolset"),
    ("tool_limits: {timeout: 3}\n", "tool_limits.timeout", 2, "timeout_s"),
    ("models: [{id: m, backend: openai, base_url: u, concurency: 2}]\n",
     "models[0].concurency", 2, "concurrency"),
    ("corpus: c\nretrieval:\n  - mode: prepend\n    methd: dense\n",
     "retrieval[0].methd", 5, "method"),
    ("limt: 3\n", "limt", 2, "limit"),
])
def test_misspelt_keys_name_file_line_field_and_the_closest_name(
        tmp_path, yaml_text, field, line, suggestion):
    path = tmp_path / "typo.yaml"
    path.write_text("questions: [q.jsonl]\n" + yaml_text)
    with pytest.raises(InputError) as err:
        load_config(path)
    assert (err.value.file, err.value.line, err.value.field) == (str(path), line, field)
    assert f"did you mean {suggestion}?" in str(err.value) and err.value.exit_code == 2


def test_a_misspelt_set_override_names_the_override(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("questions: [q.jsonl]\n")
    with pytest.raises(InputError) as err:
        load_config(path, sets=["generation.batch_sise=4"])
    assert err.value.file == "--set generation.batch_sise" and "batch_size?" in str(err.value)


def test_unknown_backend_lists_the_backends():
    with pytest.raises(InputError, match=r"transformers \| replay") as err:
        parse_config({**BASE, "models": [{"id": "m", "backend": "vllm"}]})
    assert err.value.field == "models[0].backend"


def test_dtype_override_reaches_only_models_with_weights(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("questions: [q.jsonl]\nmodels:\n  - m1\n"
                    "  - {id: s, backend: openai, base_url: http://x}\n")
    cfg = load_config(path, dtype="bfloat16")
    assert [m.record().get("dtype") for m in cfg.models] == ["bfloat16", None]
    assert cfg.hash() != load_config(path).hash()


def test_set_indexes_lists(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("questions: [q.jsonl]\nmodels: [{id: m1}, {id: m2}]\n")
    cfg = load_config(path, sets=["models.1.dtype=bfloat16"])
    assert [m.record().get("dtype") for m in cfg.models] == [None, "bfloat16"]


def test_config_built_in_python_hashes_like_yaml(tmp_path):
    import evalpipe

    path = tmp_path / "c.yaml"
    path.write_text("name: c\nquestions: [q.jsonl]\nmodels: [m1]\nformats: [hermes]\n"
                    "toolsets: [calculator]\nretrieval: [none]\n")
    from_yaml = load_config(path)
    built = evalpipe.load({"name": "c", "questions": from_yaml.questions,
                           "models": [{"id": "m1"}], "formats": ["hermes"],
                           "toolsets": ["calculator"], "retrieval": [{"mode": "none"}]})
    assert built.hash() == from_yaml.hash()
    # the manifest records the normalised config, and it reads back to the same hash
    again = parse_config(from_yaml.to_dict(), source=str(path))
    assert again.hash() == from_yaml.hash() and again.to_dict() == from_yaml.to_dict()


def test_spelling_a_default_out_does_not_change_the_hash(tmp_path):
    short, long = tmp_path / "a.yaml", tmp_path / "b.yaml"
    short.write_text("name: x\nquestions: [q.jsonl]\n")
    long.write_text("name: x\nquestions: [q.jsonl]\nmax_turns: 5\nk: 3\n"
                    "chunking: {size: 800}\ngeneration: {batch_size: 256}\n")
    assert load_config(short).hash() == load_config(long).hash()


OPENAI = {"id": "s", "backend": "openai", "base_url": "http://x"}


@pytest.mark.parametrize("plain, spelt", [
    ({"models": ["m"]}, {"models": [{"id": "m", "dtype": "auto"}]}),
    ({"models": ["m"]}, {"models": [{"id": "m", "dtype": "float32"}]}),
    ({"models": [OPENAI]}, {"models": [{**OPENAI, "concurrency": 4, "timeout_s": 120,
                                        "max_retries": 4, "stream": "auto", "mode": "chat"}]}),
    ({"models": [{"id": "g", "backend": "llamacpp"}]},
     {"models": [{"id": "g", "backend": "llamacpp", "n_ctx": 4096, "n_batch": 512}]}),
    ({"retrieval": ["prepend"]},
     {"retrieval": [{"mode": "prepend", "method": "bm25", "k": 3, "bigrams": True,
                     "bm25": {"variant": "lucene", "k1": 1.5, "b": 0.75}, "depth": 50}]}),
    ({}, {"tool_limits": {"timeout_s": 5.0}, "schema_tools": {"mode": "call_only"}}),
])
def test_a_default_spelt_out_in_any_section_keeps_the_hash(plain, spelt):
    base = {"name": "x", "questions": ["q.jsonl"], "corpus": "site"}
    assert parse_config({**base, **plain}).hash() == parse_config({**base, **spelt}).hash()


def test_a_value_apart_from_its_default_changes_the_hash():
    base = {"name": "x", "questions": ["q.jsonl"], "corpus": "site"}
    plain = parse_config({**base, "retrieval": [{"mode": "prepend"}]})
    other = parse_config({**base, "retrieval": [{"mode": "prepend", "bm25": {"k1": 1.2}}]})
    assert plain.hash() != other.hash()
    assert other.to_dict()["retrieval"] == [{"mode": "prepend", "method": "bm25", "k": 3,
                                             "bm25": {"k1": 1.2}}]


@pytest.mark.parametrize("path", ["configs/default.yaml", "configs/sizes.yaml",
                                  "configs/seed.yaml"])
def test_shipped_configs_stay_valid(path):
    assert load_config(path).cells()


def test_overrides_and_yaml_errors(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("questions: [q.jsonl]\ngeneration: {batch_size: 16}\n")
    cfg = load_config(path, sets=["generation.batch_size=4", "max_turns=2"], limit=3)
    assert cfg.generation.batch_size == 4 and cfg.max_turns == 2 and cfg.limit == 3
    assert cfg.hash() != load_config(path).hash()
    bad = tmp_path / "bad.yaml"
    bad.write_text("questions: [a\nmodels: {")
    with pytest.raises(InputError) as err:
        load_config(bad)
    assert err.value.line is not None and err.value.exit_code == 2
    with pytest.raises(InputError, match="key=value"):
        load_config(path, sets=["nonsense"])


def test_the_command_line_exits_2_on_a_misspelt_key_before_any_model_loads(tmp_path):
    from click.testing import CliRunner

    from evalpipe.cli import main

    path = tmp_path / "typo.yaml"
    path.write_text("questions: [q.jsonl]\nmodels:\n  - id: m\n    dtpye: bfloat16\n")
    result = CliRunner().invoke(main, ["run", "--config", str(path), "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert f"{path}:4" in result.output and "did you mean dtype?" in result.output
    assert list(tmp_path.iterdir()) == [path]  # nothing written


def test_the_readme_configuration_is_configs_default_yaml():
    """The README's "Configuration" example was titled `name: default` and differed from
    configs/default.yaml in five keys; it is now a copy, and this keeps it one."""
    import re

    import yaml
    from helpers import REPO

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Configuration\n", 1)[1]
    shown = re.search(r"```yaml\n(.*?)```", section, re.DOTALL).group(1)
    assert shown == (REPO / "configs" / "default.yaml").read_text(encoding="utf-8")
    assert yaml.safe_load(shown)["name"] == "default"
