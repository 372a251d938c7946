"""evalpipe report: table contents against hand-computed values of a synthetic run,
the tidy CSV, JSON, Markdown, LaTeX (parsed, and compiled when pdflatex exists), plots
and the CLI. Fixture figures are derived in tests/report_fixtures.py."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess

import pytest
from click.testing import CliRunner
from report_fixtures import BASE, MODEL, TOOLS, make_run_a, samples_a, write_run

from evalpipe._report import escape
from evalpipe._report.build import build_report
from evalpipe._report.load import load_run, model_parameters
from evalpipe._report.render import (
    render_csv,
    render_json,
    render_latex,
    render_markdown,
)
from evalpipe._report.tables import score_table


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return make_run_a(tmp_path_factory.mktemp("run") / "run-a")


@pytest.fixture(scope="module")
def data(run_dir):
    return build_report(load_run(run_dir))


def acc(data, cell, suite, metric):
    for r in data["accuracy"]:
        if r["cell_id"] == cell and r["suite"] == suite:
            return r["metrics"].get(metric)
    raise KeyError((cell, suite))


def test_accuracy_hand_computed(data):
    assert data["suites"] == ["arithmetic", "site_rag", "all"]
    assert [c["cell_id"] for c in data["cells"]] == [BASE, TOOLS]
    m = acc(data, BASE, "arithmetic", "exact")
    assert (m["rate"], m["n"]) == (0.25, 4)
    # Wilson 95% of 1/4
    assert m["lo"] == pytest.approx(0.04559, abs=1e-4) and m["hi"] == pytest.approx(0.69936,
                                                                                   abs=1e-4)
    assert acc(data, BASE, "all", "exact")["rate"] == pytest.approx(2 / 6)
    assert acc(data, TOOLS, "arithmetic", "exact")["rate"] == 0.75
    assert acc(data, TOOLS, "all", "exact")["rate"] == pytest.approx(4 / 6)
    assert (acc(data, TOOLS, "all", "format_valid")["rate"],
            acc(data, TOOLS, "all", "format_valid")["n"]) == (1.0, 3)
    assert acc(data, TOOLS, "all", "format_valid_strict")["n"] == 3
    assert acc(data, BASE, "all", "format_valid")["n"] == 0  # no tool attempts
    assert (acc(data, TOOLS, "arithmetic", "plan_exact")["rate"],
            acc(data, TOOLS, "arithmetic", "plan_exact")["n"]) == (0.5, 4)
    r = acc(data, TOOLS, "site_rag", "recall@k")
    assert (r["rate"], r["n"]) == (0.5, 2)


def test_categories_and_cost_hand_computed(data):
    cats = {r["cell_id"]: r for r in data["categories"]}
    assert cats[BASE]["counts"] == {"correct": 2, "wrong_plan": 0, "retrieval_miss": 0,
                                    "wrong_answer": 4}
    assert cats[TOOLS]["counts"]["wrong_plan"] == 1
    assert cats[TOOLS]["counts"]["retrieval_miss"] == 1
    assert cats[TOOLS]["shares"]["correct"]["rate"] == pytest.approx(4 / 6)
    assert cats[TOOLS]["subtypes"] == {"wrong_arguments": 1}

    cost = {r["cell_id"]: r for r in data["cost"]}
    assert cost[TOOLS]["baseline"] == BASE and cost[BASE]["baseline"] == BASE
    assert cost[BASE]["fields"]["prompt_tokens"]["mean"] == 120
    assert cost[TOOLS]["fields"]["prompt_tokens"]["mean"] == pytest.approx(210)
    assert cost[TOOLS]["fields"]["turns"]["mean"] == pytest.approx(1.5)
    assert cost[TOOLS]["ratios"] == pytest.approx(
        {"prompt_tokens": 1.75, "completion_tokens": 1.5, "ttft_ms": 1.0, "wall_ms": 2.5,
         # recorded turns without attributed compute, and a run without a latency probe
         "prefill_compute_ms": None, "probe_ttft_ms": None})


def test_model_parameters_fallbacks(run_dir):
    run = load_run(run_dir)
    assert model_parameters(run, BASE) == (135e6, "name")  # "tiny-135m"
    # the runner records backend.describe() under the cell's "model"
    cell = run.manifest.cells[BASE]
    cell.model = {"model_id": MODEL, "parameters": 134_515_008}
    assert model_parameters(run, BASE) == (134_515_008, "backend")
    cell.model = {}
    cell.settings.model.id = "gemma-3-270m"
    assert model_parameters(run, BASE) == (268_098_176, "alias")


def test_markdown(data):
    md = render_markdown(data)
    assert "## exact match" in md and "## recall@3" in md
    assert f"| {BASE} | 25.0% (1/4) [4.6, 69.9] | 50.0% (1/2) [9.5, 90.5] | 33.3% (2/6) " \
           "[9.7, 70.0] |" in md
    assert "| 0.500 [0.000, 1.000] n=2 |" in md  # recall@3 site_rag of the tools cell
    assert "2 (33.3%)" in md and "1.75x" in md and "2.50x" in md
    # every table row has as many cells as its header
    for block in md.split("\n\n"):
        lines = [ln for ln in block.splitlines() if ln.startswith("|")]
        if lines:
            widths = {ln.replace("\\|", "").count("|") for ln in lines}
            assert len(widths) == 1, block


def test_csv_is_tidy(data):
    rows = list(csv.DictReader(io.StringIO(render_csv(data))))
    assert list(rows[0]) == ["cell_id", "model", "format", "toolset", "retrieval",
                             "retrieval_method", "suite", "metric", "value", "n", "lo", "hi"]
    tools = next(r for r in rows if r["cell_id"] == TOOLS)
    assert (tools["model"], tools["format"], tools["toolset"], tools["retrieval"],
            tools["retrieval_method"]) == (MODEL, "hermes", "calculator", "prepend", "bm25")
    base = next(r for r in rows if r["cell_id"] == BASE)
    assert (base["toolset"], base["retrieval"], base["retrieval_method"]) == ("none", "none", "")
    keys = [(r["cell_id"], r["suite"], r["metric"]) for r in rows]
    assert len(keys) == len(set(keys))  # one row per cell x suite x metric
    by = dict(zip(keys, rows))
    r = by[(TOOLS, "arithmetic", "exact")]
    assert (float(r["value"]), int(r["n"])) == (0.75, 4) and 0 < float(r["lo"]) < 0.75
    assert float(by[(TOOLS, "site_rag", "recall@3")]["value"]) == 0.5
    assert float(by[(TOOLS, "all", "cost_ratio:wall_ms")]["value"]) == 2.5
    assert int(by[(BASE, "all", "category:wrong_answer")]["n"]) == 6
    assert (BASE, "all", "format_valid") not in by  # n = 0: does not apply


def test_json_round_trips(data):
    back = json.loads(render_json(data))
    assert back["accuracy"][0]["metrics"]["exact"]["rate"] == 0.25
    for table in ("accuracy", "categories", "cost"):  # the facets beside every cell id
        row = next(r for r in back[table] if r["cell_id"] == TOOLS)
        assert (row["model"], row["format"], row["toolset"], row["retrieval_mode"],
                row["retrieval_method"]) == (MODEL, "hermes", "calculator", "prepend", "bm25")
    assert set(back) >= {"run_id", "k", "suites", "cells", "accuracy", "categories", "cost"}


def _tabulars(tex):
    pytest.importorskip("pylatexenc", reason="pylatexenc (test extra) parses the LaTeX")
    from pylatexenc.latexwalker import (
        LatexEnvironmentNode,
        LatexMacroNode,
        LatexSpecialsNode,
        LatexWalker,
    )

    nodes, _, _ = LatexWalker(tex, tolerant_parsing=False).get_latex_nodes()

    def walk(ns):
        for n in ns or []:
            yield n
            yield from walk(getattr(n, "nodelist", None))
            argd = getattr(n, "nodeargd", None)
            if argd is not None:
                yield from walk([a for a in (argd.argnlist or []) if a is not None])

    for env in (n for n in walk(nodes) if isinstance(n, LatexEnvironmentNode)
                and n.environmentname == "tabular"):
        spec = env.nodeargd.argnlist[-1].latex_verbatim().strip("{}")
        rows, amps, rules = [], 0, []
        for n in env.nodelist:
            if isinstance(n, LatexSpecialsNode) and n.specials_chars == "&":
                amps += 1
            elif isinstance(n, LatexMacroNode) and n.macroname == "\\":
                rows.append(amps)
                amps = 0
            elif isinstance(n, LatexMacroNode) and n.macroname.endswith("rule"):
                rules.append(n.macroname)
        yield spec, rows, rules


def test_latex_parses_with_booktabs_structure(data):
    tex = render_latex(data, standalone=True)
    tables = list(_tabulars(tex))
    assert len(tables) == 8  # six metrics, categories, cost
    for spec, rows, rules in tables:
        assert rules == ["toprule", "midrule", "bottomrule"]
        assert rows and all(r == len(spec) - 1 for r in rows), (spec, rows)
    assert r"tiny-135m/-/none/no-rag" in tex and r"25.0\% (1/4)" in tex
    assert r"\usepackage{booktabs}" in tex
    assert escape.tex("a_b & 50% #1 {x}") == r"a\_b \& 50\% \#1 \{x\}"


@pytest.mark.skipif(shutil.which("pdflatex") is None,
                    reason="pdflatex not installed (apt-get install texlive-latex-base "
                           "texlive-latex-recommended)")
def test_latex_compiles(data, tmp_path):
    (tmp_path / "r.tex").write_text(render_latex(data, standalone=True), encoding="utf-8")
    proc = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "r.tex"],
                          check=False, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert (tmp_path / "r.pdf").stat().st_size > 1000


def test_plots_are_png(data, tmp_path):
    pytest.importorskip("matplotlib")
    from evalpipe._report.plots import write_plots

    paths = write_plots(data, tmp_path)
    # one model: no accuracy-against-size plot (one size is no curve)
    assert sorted(p.name for p in paths) == ["accuracy_vs_cost.png", "categories.png"]
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _figures(monkeypatch):
    """The matplotlib figures the plot functions draw, kept instead of closed."""
    from evalpipe._report import plots

    drawn = []
    monkeypatch.setattr(plots, "_png", lambda fig: drawn.append(fig) or b"png")
    return drawn


def test_size_plot_needs_two_model_sizes(data, monkeypatch):
    pytest.importorskip("matplotlib")
    from evalpipe._report.plots import accuracy_vs_size

    assert accuracy_vs_size(data) is None
    two = {**data, "cells": [{**c, "parameters": 135e6 if i == 0 else 1.7e9}
                             for i, c in enumerate(data["cells"])]}
    drawn = _figures(monkeypatch)
    assert accuracy_vs_size(two) == b"png"
    labels = [t.get_text() for t in drawn[0].axes[0].get_xticklabels()]
    assert labels == ["135M", "1.7B"]
    # Each size says the dtype its model ran in (a bfloat16 1.7B beside a float32 135M).
    typed = {**two, "cells": [{**c, "dtype": "float32" if i == 0 else "bfloat16"}
                              for i, c in enumerate(two["cells"])]}
    assert accuracy_vs_size(typed) == b"png"
    labels = [t.get_text() for t in drawn[1].axes[0].get_xticklabels()]
    assert labels == ["135M\nfloat32", "1.7B\nbfloat16"]


def test_the_models_table_says_each_models_dtype_path_and_size(run_dir):
    """The manifest's facts of each model (backend.describe(): dtype, the engine's path,
    its resident size) head the Markdown report, so a size comparison says what ran."""
    run = load_run(run_dir)
    run.manifest.cells[BASE].model = {
        "model_id": MODEL, "parameters": 1_777_088_000, "dtype": "bfloat16",
        "activations": "float32", "engine": {"path": "batching loop", "linear": "panel",
                                             "resident_bytes": 3_817_537_536}}
    md = render_markdown(build_report(run))
    assert "| model | parameters | dtype | path | resident |" in md
    assert f"| {MODEL} | 1.78B | bfloat16 (computing in float32) | batching loop, linears " \
           "panel | 3.56 GiB |" in md


def test_cost_axis_says_under_load_and_log_ticks_are_readable(data, monkeypatch):
    pytest.importorskip("matplotlib")
    from evalpipe._report.plots import accuracy_vs_cost

    # SmolLM at ~1 s per sample, a large model at ~24 s: a log axis over 10x
    cost = [{**r, "fields": {**r["fields"], "wall_ms": {"mean": wall}}}
            for r, wall in zip(data["cost"], (1_000.0, 24_000.0))]
    drawn = _figures(monkeypatch)
    accuracy_vs_cost({**data, "cost": cost})
    wall_axis = drawn[0].axes[1]
    assert "under load" in wall_axis.get_xlabel()
    assert wall_axis.get_xscale() == "log"
    drawn[0].canvas.draw()
    lo, hi = wall_axis.get_xlim()
    shown = [t.get_text() for t in wall_axis.get_xticklabels()
             if lo <= t.get_position()[0] <= hi and t.get_text()]
    assert len(shown) >= 3 and {"1k", "2k", "5k", "10k", "20k"} >= set(shown), shown


def test_score_table_reads_nested_rates(run_dir):
    scores = json.loads((run_dir / "scores.json").read_text())
    table = score_table(scores)
    assert "66.7% (4/6)" in table and "100.0% (3/3)" in table and "0.500 (n=2)" in table
    header = table.splitlines()[0]
    assert "| plan match | calls/q |" in header


def test_report_without_scores_json_scores_in_memory(tmp_path):
    path = write_run(tmp_path / "r", samples_a(), score=False)
    data = build_report(load_run(path))
    assert data["rescored"] and acc(data, TOOLS, "all", "exact")["rate"] == pytest.approx(4 / 6)
    assert not (path / "scores.json").exists()


def test_cli_report_formats(run_dir, tmp_path):
    from evalpipe.cli import main

    runner = CliRunner()
    res = runner.invoke(main, ["report", str(run_dir)])
    assert res.exit_code == 0, res.output
    assert "## exact match" in res.output
    for fmt in ("csv", "latex", "json", "html"):
        out = tmp_path / f"r.{fmt}"
        res = runner.invoke(main, ["report", str(run_dir), "--format", fmt, "--out", str(out)])
        assert res.exit_code == 0, res.output
        assert out.stat().st_size > 200
    res = runner.invoke(main, ["report", str(tmp_path / "missing")])
    assert res.exit_code == 2


def test_cli_report_bad_run_dir(tmp_path):
    from evalpipe.cli import main

    (tmp_path / "empty").mkdir()
    res = CliRunner().invoke(main, ["report", str(tmp_path / "empty")])
    assert res.exit_code == 2 and "manifest.json" in res.output


def test_infra_errors_are_left_out_and_noted(tmp_path):
    from report_fixtures import Q
    from synth import make_sample

    samples = samples_a()
    samples[3] = make_sample(Q["a4"], stop_reason="infra_error", cell_id=BASE, model=MODEL,
                             toolset="none", tools_offered=[])
    data = build_report(load_run(write_run(tmp_path / "r", samples)))
    m = acc(data, BASE, "arithmetic", "exact")
    assert (m["rate"], m["n"]) == (pytest.approx(1 / 3), 3)
    cats = {r["cell_id"]: r for r in data["categories"]}
    assert cats[BASE]["counts"]["infra_error"] == 1
    assert f"left out of the rates: {BASE} (all): 1" in render_markdown(data)


def test_html_sample_cap(run_dir):
    from evalpipe._report.html import render_html

    run = load_run(run_dir)
    data = build_report(run)
    page = render_html(run, data, {}, max_samples=5)
    payload = page.split('id="sample-data">', 1)[1].split("</script>", 1)[0]
    assert len(json.loads(payload)) == 5
    assert "first 5 of 12 samples" in page
    assert "first" not in render_html(run, data, {}, max_samples=None).split("Samples</h2>")[1][:40]


def test_cell_facets_are_read_from_the_manifest_never_parsed_from_the_cell_id(tmp_path):
    """A cell id is a name: a model id with slashes, or a renamed cell, must not change
    what a report groups by. The runner records each cell's facets in the manifest."""
    from evalpipe._report.load import RunData, cell_facets
    from evalpipe.records import Manifest

    def run_of(cells):
        return RunData(tmp_path, Manifest.model_validate({"run_id": "r", "config": {},
                                                          "cells": cells}), {}, [],
                       {"run_id": "r", "scorer_version": None, "groups": [], "samples": []})

    cell = "org/model-7b/json/math/hybrid_weighted-tool"
    facets = {"model": "org/model-7b", "format": "json", "toolset": "math", "retrieval": "tool",
              "method": "hybrid_weighted"}
    run = run_of({cell: {"facets": facets}})
    assert cell_facets(run, cell) == {"model": "org/model-7b", "format": "json",
                                      "toolset": "math", "retrieval_mode": "tool",
                                      "retrieval_method": "hybrid_weighted"}
    unknown = run_of({"a/b/c/no-rag": {}})
    assert set(cell_facets(unknown, "a/b/c/no-rag").values()) == {None}


def test_a_run_records_each_cells_facets_in_its_manifest(tmp_path, scripted, monkeypatch):
    import json

    from evalpipe import runner
    from evalpipe.config import parse_config

    (tmp_path / "q.jsonl").write_text(json.dumps(
        {"id": "q1", "suite": "s", "question": "1+1?", "answer": 2}) + "\n")
    config = parse_config({"name": "f", "questions": [str(tmp_path / "q.jsonl")],
                           "models": ["m"], "toolsets": ["none"]})
    run_dir = runner.execute_run(config, tmp_path / "out", use_cache=False, echo=lambda s: None,
                                 backends=lambda model: scripted(lambda prompt: "2"))
    manifest = json.loads((run_dir / "manifest.json").read_text())
    [cell] = manifest["cells"].values()
    assert cell["facets"] == {"model": "m", "format": "hermes", "toolset": "none",
                              "retrieval": "none", "method": None}


def test_a_cells_dtype_comes_from_its_recorded_settings_where_the_facts_have_none(tmp_path):
    """A backend that reports no dtype (a server) leaves the one its entry asked for,
    recorded with the cell's settings, read through the manifest's type."""
    from evalpipe._report.load import RunData, model_engine
    from evalpipe.records import CellRecord, CellSettings, Manifest, RecordedConfig

    manifest = Manifest(run_id="r", config=RecordedConfig(), cells={
        "asked": CellRecord(settings=CellSettings(dtype="bfloat16"), model={"backend": "x"}),
        "ran": CellRecord(settings=CellSettings(dtype="bfloat16"), model={"dtype": "float32"}),
        "silent": CellRecord(model={})})
    run = RunData(tmp_path, manifest, {}, [], {"run_id": "r", "scorer_version": None,
                                               "groups": [], "samples": []})
    assert [model_engine(run, c)["dtype"] for c in ("asked", "ran", "silent")] == [
        "bfloat16", "float32", None]
