"""`evalpipe audit` on a tiny model built in the test: recorded turns generated again one
at a time, batched and in bfloat16; audit.json in the run and in the report."""

from __future__ import annotations

import json

from click.testing import CliRunner
from test_repeats_run import _config, _run

from evalpipe.audit import audit_run
from evalpipe.cli import main
from evalpipe.store import RunStore


def test_audit_regenerates_turns_and_reports_agreement(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.setenv("EVALPIPE_GENERATION_CACHE", str(tmp_path / "gen.sqlite"))
    cfg = _config(tmp_path, tiny_model_dir, temperature=0.0)
    run = _run(cfg, tmp_path / "out", f"models=[{{id: {tiny_model_dir}, dtype: float32}}]")
    audit = audit_run(run, sample=3, echo=lambda s: None)
    assert [c["name"] for c in audit["conditions"]] == ["batch 1", "batched",
                                                        "batch 1 bfloat16"]
    (cell,) = audit["cells"]
    assert cell["turns"] == 3 == audit["turns"]
    one = cell["results"]["batch 1"]
    assert one["identical_replies"]["n"] == 3
    # float32: a reply does not depend on the rows decoded beside it
    assert one["identical_replies"]["rate"] == 1.0 == one["identical_verdicts"]["rate"]
    for res in cell["results"].values():  # the same reply means the same verdict
        assert res["identical_verdicts"]["rate"] >= res["identical_replies"]["rate"]
    assert json.loads((run / "audit.json").read_text()) == audit

    report = CliRunner().invoke(main, ["report", str(run), "--format", "md"])
    assert report.exit_code == 0, report.output
    assert "Determinism audit" in report.output and "batch 1 bfloat16" in report.output


def test_audit_of_a_run_without_stored_prompts_exits_2(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.setenv("EVALPIPE_GENERATION_CACHE", str(tmp_path / "gen.sqlite"))
    run = _run(_config(tmp_path, tiny_model_dir), tmp_path / "out")
    store = RunStore(run)
    old = [{**s, "prompt_text": {}} for s in store.read_samples()]  # as written before
    store.samples_path.write_text("".join(json.dumps(s) + "\n" for s in old))
    result = CliRunner().invoke(main, ["audit", str(run)])
    assert result.exit_code == 2
    assert "prompt" in result.output and "audit.json" not in [p.name for p in run.iterdir()]
