"""The HTML report in a real headless browser: it loads without network, the filters
change the visible sample count, a transcript opens with gold chunks marked.

Needs Debian's chromium (.ci/setup-browser.sh) and the playwright package; skips
with the reason otherwise. Never `playwright install` (it downloads a browser)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from helpers import CHROMIUM, CHROMIUM_ARGS, playwright_or_skip
from report_fixtures import BASE, MODEL, TOOLS, make_run_a

from evalpipe._report.build import build_report
from evalpipe._report.html import render_html, sample_view
from evalpipe._report.load import load_run

ARGS = CHROMIUM_ARGS


@pytest.fixture(scope="module")
def report_file(tmp_path_factory):
    root = tmp_path_factory.mktemp("html")
    path = make_run_a(root / "run-a")
    manifest = json.loads((path / "manifest.json").read_text())
    manifest.update(started="2025-01-02T03:04:05+0000", git_commit="0123456789abcdef0123",
                    config={**manifest["config"], "name": "nightly"})
    (path / "manifest.json").write_text(json.dumps(manifest))
    run = load_run(path)
    # a reply that tries to inject markup must come out as text
    for s in run.samples:
        if s["cell_id"] == BASE and s["question_id"] == "a2":
            s["messages"][-1]["content"] = "<img src=x onerror=alert(1)></script><b>31</b>"
    data = build_report(run)
    try:
        from evalpipe._report.plots import render_plots

        plots = render_plots(data)
    except Exception:  # noqa: BLE001 - matplotlib missing: the page still works
        plots = {}
    path = root / "report.html"
    path.write_text(render_html(run, data, plots), encoding="utf-8")
    return path


def test_html_is_self_contained(report_file):
    text = report_file.read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)
    assert "<link" not in text and "@import" not in text
    payload = text.split('id="sample-data">', 1)[1].split("</script>", 1)[0]
    assert "</" not in payload  # model output cannot close the data block
    assert len(json.loads(payload)) == 12


def test_sample_view_marks_gold_chunks(report_file):
    run = load_run(report_file.parent / "run-a")
    scored = {(s["cell_id"], s["question_id"]): s for s in run.scores["samples"]}
    samples = {(s["cell_id"], s["question_id"]): s for s in run.samples}
    v = sample_view(scored[(TOOLS, "r1")], samples[(TOOLS, "r1")], run.questions["r1"])
    assert [c["gold"] for c in v["retrieved"]] == [True, False]
    v = sample_view(scored[(TOOLS, "r2")], samples[(TOOLS, "r2")], run.questions["r2"])
    assert not any(c["gold"] for c in v["retrieved"])
    assert v["why"]["reason"].startswith("no chunk shown covers a gold passage")


_browser = playwright_or_skip


def test_html_in_headless_browser(report_file):
    sync_playwright = _browser()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page()
            errors, requests = [], []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("dialog", lambda d: (errors.append("dialog: " + d.message), d.dismiss()))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(report_file.as_uri())
            page.wait_for_selector("#sample-body tr.sample-row")

            def visible():
                return page.locator("#sample-body tr.sample-row").count()

            assert page.text_content("#sample-count") == "12 of 12 samples"
            assert visible() == 12
            assert page.locator("img.plot").count() in (0, 2)  # one model: no size plot

            page.select_option("#f-cell", TOOLS)
            assert visible() == 6
            page.select_option("#f-category", "correct")
            assert visible() == 4 and page.text_content("#sample-count") == "4 of 12 samples"
            page.select_option("#f-category", "")
            page.select_option("#f-suite", "site_rag")
            assert visible() == 2
            page.select_option("#f-result", "wrong")
            assert visible() == 1  # r2, the retrieval miss
            page.select_option("#f-result", "")
            page.fill("#f-text", "reverse proxy")
            assert visible() == 1

            # open r1's transcript: roles, the answer, a gold-marked chunk
            page.locator("#sample-body tr.sample-row").first.click()
            detail = page.locator("#sample-body tr.detail .transcript")
            assert detail.count() == 1
            text = detail.inner_text()
            assert "Which reverse proxy do we run?" in text
            roles = [r.lower() for r in detail.locator(".msg .role").all_inner_texts()]
            assert roles[:3] == ["system", "user", "assistant"]
            assert detail.locator(".chunk.gold").count() == 1
            assert "We moved the reverse proxy to Caddy." in detail.locator(
                ".chunk.gold").inner_text()
            page.locator("#sample-body tr.sample-row").first.click()  # closes again
            assert page.locator("#sample-body tr.detail").count() == 0

            # a tool-calling transcript shows its call and the tool's result
            page.fill("#f-text", "")
            page.select_option("#f-suite", "arithmetic")
            page.select_option("#f-category", "wrong_plan")
            assert visible() == 1
            page.locator("#sample-body tr.sample-row").first.click()
            text = page.locator("#sample-body tr.detail .transcript").inner_text()
            assert "tool call" in text and '"b": 9' in text.replace("\n", " ")
            assert "wrong_plan / wrong_arguments" in text
            # beside the transcript: the rung that decided and the facts it read
            assert "the calls do not match the plan: wrong_arguments" in text
            assert "ladder facts" in text and "plan_applicable" in text

            # injected markup stays text
            page.select_option("#f-cell", BASE)
            page.select_option("#f-category", "")
            page.fill("#f-text", "5 * 6")
            page.locator("#sample-body tr.sample-row").first.click()
            assert "<img src=x" in page.locator("#sample-body tr.detail").inner_text()
            assert page.locator("#sample-body tr.detail img").count() == 0

            assert errors == []
            assert all(u.startswith(("file:", "data:", "about:")) for u in requests), requests
        finally:
            browser.close()


def test_skip_reason_without_chromium():
    if shutil.which("chromium") or Path(CHROMIUM).exists():
        pytest.skip("chromium present: the browser test runs instead")
    with pytest.raises(pytest.skip.Exception, match=r"setup-browser\.sh"):
        _browser()


def test_html_fits_a_1400_px_window_with_facts_on_top(report_file):
    """A 17-column cost table scrolls inside its section instead of widening the page;
    the top names models, date, config and commit; Markdown `code` in the notes is
    code; a sample's cost reads as words and rounded figures, not a raw dict."""
    sync_playwright = _browser()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(report_file.as_uri())
            page.wait_for_selector("#sample-body tr.sample-row")
            assert page.evaluate("document.documentElement.scrollWidth") <= 1400
            assert page.locator(".scroll table.cost").count() == 1
            facts = page.text_content("header .facts")
            assert f"models: {MODEL}" in facts and "config: nightly" in facts
            assert "started: 2025-01-02 03:04:05" in facts and "commit: 0123456789ab" in facts
            assert page.locator("#cost code", has_text="latency_probe").count() == 1
            assert "`" not in page.text_content("#cost p")
            page.locator("#sample-body tr.sample-row").first.click()
            cost = page.locator(".transcript .kv tr", has_text="cost").inner_text()
            assert "120 prompt tokens" in cost and "wall 100.0 ms under load" in cost
            assert "{" not in cost
        finally:
            browser.close()
