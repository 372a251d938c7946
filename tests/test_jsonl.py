"""The append-only JSON-lines rules every writer shares (evalpipe/jsonl.py)."""

from __future__ import annotations

import pytest

from evalpipe import jsonl
from evalpipe.errors import InputError


def test_append_then_read_round_trips_unicode(tmp_path):
    path = tmp_path / "r.jsonl"
    assert jsonl.append(path, [{"q": "Bao nhiêu?"}, {"q": 2}]) == 2
    assert jsonl.append(path, []) == 0
    assert jsonl.read(path) == [{"q": "Bao nhiêu?"}, {"q": 2}]
    assert "nhiêu" in path.read_text(encoding="utf-8")  # not \\u-escaped


@pytest.mark.parametrize("tail", ['{"q": 3, "turns": [', '{"q": 3}', 'not json\n', 'x\n\n\n'])
def test_a_torn_last_line_is_dropped_and_repair_cuts_it(tmp_path, tail):
    path = tmp_path / "r.jsonl"
    jsonl.append(path, [{"q": 1}, {"q": 2}])
    good = path.stat().st_size
    with open(path, "a", encoding="utf-8") as f:
        f.write(tail)
    assert jsonl.read(path) == [{"q": 1}, {"q": 2}]
    assert jsonl.repair(path) == len(tail.encode())
    assert path.stat().st_size == good
    jsonl.append(path, [{"q": 3}])
    assert [r["q"] for r in jsonl.read(path)] == [1, 2, 3]


def test_a_bad_line_before_good_ones_is_corruption_with_its_line(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"a": 1}\nnot json\n{"b": 2}\n')
    with pytest.raises(InputError) as err:
        jsonl.read(path)
    assert (err.value.file, err.value.line) == (str(path), 2)
    with pytest.raises(InputError):
        jsonl.repair(path)  # never cut good records away
    assert path.read_text() == '{"a": 1}\nnot json\n{"b": 2}\n'


def test_a_failed_write_leaves_the_file_as_it_was(tmp_path, monkeypatch):
    path = tmp_path / "r.jsonl"
    jsonl.append(path, [{"q": 1}])
    before = path.read_bytes()

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(jsonl.os, "fsync", full_disk)  # the data was written, then failed
    with pytest.raises(OSError):
        jsonl.append(path, [{"q": 2}, {"q": 3}])
    assert path.read_bytes() == before


def test_a_missing_file_reads_as_empty(tmp_path):
    assert jsonl.read(tmp_path / "none.jsonl") == [] and jsonl.repair(tmp_path / "none") == 0
