"""The learned abstention reader: a file that is what its training data gives, refused
when tampered with or made for other features, and measured against the rules."""

from __future__ import annotations

import json

import pytest

from evalpipe.errors import InputError
from evalpipe.scoring.agreement import abstention_methods, load_labels
from evalpipe.scoring.answers import abstention_model
from evalpipe.scoring.answers.abstention_model import (
    MODEL,
    data_checksum,
    features,
    load,
    training_rows,
)

WRITTEN = abstention_model.LABELS / "abstention_replies.jsonl"


def test_the_shipped_model_was_trained_on_the_data_in_the_repository():
    meta = load().meta
    rows = training_rows()
    assert meta["training_sha256"] == data_checksum(rows), \
        "the training data changed: run python -m evalpipe.scoring.answers.abstention_model train"
    assert meta["training_rows"] == len(rows) and meta["scikit_learn"]
    held_out = {r["reply"] for r in load_labels(WRITTEN) if r["split"] == "held_out"}
    assert not held_out & {text for text, _ in rows}  # held-out replies never train it


def test_retraining_gives_the_shipped_file():
    import sklearn

    shipped = json.loads(MODEL.read_text(encoding="utf-8"))
    if sklearn.__version__ != shipped["meta"]["scikit_learn"]:
        pytest.skip(f"trained with scikit-learn {shipped['meta']['scikit_learn']}, "
                    f"{sklearn.__version__} installed")
    assert abstention_model.train() == shipped


def test_a_tampered_or_foreign_model_file_is_refused(tmp_path):
    data = json.loads(MODEL.read_text(encoding="utf-8"))
    tampered = dict(data, weights={**data["weights"], "w:caddy": 9.0})
    (tmp_path / "t.json").write_text(json.dumps(tampered), encoding="utf-8")
    with pytest.raises(InputError, match="checksum"):
        load(tmp_path / "t.json")
    foreign = dict(data, meta={**data["meta"], "features": "bert-embeddings"})
    (tmp_path / "f.json").write_text(json.dumps(foreign), encoding="utf-8")
    with pytest.raises(InputError, match="feature scheme"):
        load(tmp_path / "f.json")
    (tmp_path / "bad.json").write_text("{", encoding="utf-8")
    with pytest.raises(InputError, match="cannot read"):
        load(tmp_path / "bad.json")


def test_features_keep_vietnamese_tones_and_join_hyphenated_words():
    assert "w:chịu" in features("Câu này tôi chịu.") and "w:chiu" not in features("tôi chịu")
    assert {"w:wifi", "p:no wifi"} <= features("no Wi-Fi password")


def test_rules_learned_and_both_are_measured_on_the_held_out_written_replies():
    rows = [r for r in load_labels(WRITTEN) if r["split"] == "held_out"]
    assert len(rows) >= 60 and {r["lang"] for r in rows} == {"en", "vi"}
    measured = abstention_methods(rows)
    for name in ("rules", "learned", "both"):
        agree, n = measured[name]
        assert n == len(rows) and agree >= 0.8 * n, (name, measured["misses"][name])
