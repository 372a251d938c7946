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
    assert not [c for c in cfg.cells() if c.format == "json" and c.retrieval["mode"] == "prepend"]
    cfg = parse_config(dict(BASE, include=[{"model": "m2", "toolset": "calculator"}]))
    assert {c.model["id"] for c in cfg.cells()} == {"m2"}
    with pytest.raises(InputError, match="empty"):
        parse_config(dict(BASE, include=[{"model": "nope"}])).cells()


@pytest.mark.parametrize("patch, field", [
    ({"retrieval": [{"mode": "sideways"}]}, "retrieval"),
    ({"max_turns": 0}, "max_turns"),
    ({"limit": -1}, "limit"),
    ({"colour": "red"}, "colour"),
    ({"generation": {"beams": 4}}, "generation"),
    ({"questions": []}, "questions"),
    ({"corpus": None}, "corpus"),
])
def test_bad_fields_are_named(patch, field):
    with pytest.raises(InputError) as err:
        parse_config({**BASE, **patch}, source="c.yaml")
    assert err.value.field == field and "c.yaml" in str(err.value)


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
