"""evalpipe view: the JSON API over an outputs folder, and the page in headless Chromium.

Three runs: A and B (finished; in B one question flips right -> wrong and one reply
is hostile: a script tag, ANSI colour codes and a right-to-left override), and a
run still writing (status running, no scores.json, a torn last line). The browser
tests need Debian's chromium (.ci/setup-browser.sh) and the playwright package, and
skip with the reason otherwise; never `playwright install`."""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from helpers import CHROMIUM, CHROMIUM_ARGS, playwright_or_skip
from report_fixtures import BASE, TOOLS, samples_a, write_run

from evalpipe.view import Outputs, ViewServer

HOSTILE = "\x1b[31m<script>alert(1)</script><img src=x onerror=alert(2)>\u202eevil"
ARGS = CHROMIUM_ARGS


def _finish(path: Path, started: str, status: str = "finished") -> None:
    manifest = json.loads((path / "manifest.json").read_text())
    manifest.update(started=started, status=status, git_commit="0123456789abcdef",
                    config={"k": 3, "name": "nightly", "models": [{"id": "tiny-135m"}]})
    (path / "manifest.json").write_text(json.dumps(manifest))


def _run_b() -> list[dict]:
    samples = samples_a("run-b")
    for s in samples:
        if s["cell_id"] == TOOLS and s["question_id"] == "a1":  # right in A, wrong in B
            s["final_answer"] = s["messages"][-1]["content"] = "41"
        if s["cell_id"] == BASE and s["question_id"] == "a2":
            s["final_answer"] = s["messages"][-1]["content"] = HOSTILE
    return samples


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("outputs")
    _finish(write_run(root / "run-a", samples_a("run-a"), run_id="run-a"),
            "2025-01-01T10:00:00+0000")
    _finish(write_run(root / "run-b", _run_b(), run_id="run-b"), "2025-01-02T10:00:00+0000")
    live = write_run(root / "run-live", samples_a("run-live")[:4], run_id="run-live",
                     score=False)
    _finish(live, "2025-01-03T10:00:00+0000", status="running")
    with open(live / "samples.jsonl", "a") as f:
        f.write('{"run_id": "run-live", "cell_id": "tiny')  # a kill mid-write
    (root / "latest").symlink_to("run-b")
    return root


@pytest.fixture(scope="module")
def server(outputs):
    srv = ViewServer(Outputs(outputs), port=0)
    srv.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def get(server, path, host=None):
    conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=60)
    conn.request("GET", path, headers={"Host": host or f"127.0.0.1:{server.server_address[1]}"})
    res = conn.getresponse()
    body = res.read()
    conn.close()
    return res.status, res.getheader("Content-Type"), body


def api(server, path):
    status, kind, body = get(server, path)
    assert status == 200 and kind.startswith("application/json"), (status, body[:300])
    return json.loads(body)


# -- the JSON API --------------------------------------------------------------------------

def test_the_list_shows_every_run_with_its_facts_and_headline(server):
    runs = {r["id"]: r for r in api(server, "/api/runs")["runs"]}
    assert list(runs) == ["run-live", "run-b", "run-a"]  # newest first
    b = runs["run-b"]
    assert (b["status"], b["config_name"], b["models"], b["commit"], b["latest"]) == (
        "finished", "nightly", ["tiny-135m"], "0123456789abcdef", True)
    assert b["exact"]["hits"] == 5 and b["exact"]["n"] == 12 and b["samples"] == 12
    assert runs["run-a"]["exact"]["hits"] == 6
    assert runs["run-live"]["status"] == "running" and runs["run-live"]["samples"] == 4


def test_a_run_page_has_tables_filters_and_plots(server):
    run = api(server, "/api/runs/run-a")
    assert run["samples"] == 12 and run["run"]["config_name"] == "nightly"
    titles = [t["title"] for t in run["tables"]]
    assert titles[0] == "exact match" and "Cost per sample (suite all, means)" in titles
    exact = run["tables"][0]
    assert exact["rows"][1][:1] == [TOOLS] and exact["rows"][1][-1].startswith("66.7% (4/6)")
    assert run["filters"]["cell"] == [BASE, TOOLS]
    assert run["filters"]["suite"] == ["arithmetic", "site_rag"]
    if run["plots"]:  # matplotlib installed
        status, kind, png = get(server, f"/api/runs/run-a/plots/{run['plots'][0]}.png")
        assert status == 200 and kind == "image/png" and png[:4] == b"\x89PNG"


def test_samples_are_paged_and_filtered_by_the_server(server):
    page = api(server, "/api/runs/run-a/samples?limit=5&offset=5")
    assert (page["total"], page["matched"], len(page["rows"])) == (12, 12, 5)
    assert [r["index"] for r in page["rows"]] == [5, 6, 7, 8, 9]
    page = api(server, f"/api/runs/run-a/samples?cell={TOOLS}&result=correct")
    assert page["matched"] == 4 and all(r["exact"] for r in page["rows"])
    page = api(server, "/api/runs/run-a/samples?q=reverse%20proxy")
    assert [(r["cell"], r["qid"]) for r in page["rows"]] == [(BASE, "r1"), (TOOLS, "r1")]
    assert api(server, "/api/runs/run-a/samples?category=wrong_plan")["matched"] == 1
    assert len(api(server, "/api/runs/run-a/samples?limit=100000")["rows"]) == 12


def test_a_transcript_carries_the_rung_and_reason(server):
    row = api(server, f"/api/runs/run-a/samples?cell={TOOLS}&category=wrong_plan")["rows"][0]
    sample = api(server, f"/api/runs/run-a/samples/{row['index']}")["sample"]
    assert sample["qid"] == "a3" and sample["category"] == "wrong_plan"
    assert sample["why"]["rung"] and "wrong_arguments" in sample["why"]["reason"]
    assert [m["role"] for m in sample["messages"]][:2] == ["system", "user"]


def test_a_running_run_shows_its_samples_so_far_and_grows(outputs, server):
    run = api(server, "/api/runs/run-live")
    assert run["run"]["status"] == "running" and run["samples"] == 4
    assert any("running" in n for n in run["notes"])
    before = run["version"]
    path = outputs / "run-live" / "samples.jsonl"
    text = path.read_text()
    torn = text[text.rindex("\n") + 1:]
    rest = "".join(json.dumps(s) + "\n" for s in samples_a("run-live")[4:8])
    path.write_text(text[:len(text) - len(torn)] + rest)  # the writer cut it and went on
    run = api(server, "/api/runs/run-live")
    assert run["samples"] == 8 and run["version"] > before
    assert api(server, "/api/runs/run-live/samples")["matched"] == 8


def test_compare_shows_the_flip_the_moves_and_the_costs(server):
    c = api(server, "/api/compare?a=run-a&b=run-b")
    cells = {x["title"]: x for x in c["cells"]}
    assert cells[TOOLS]["right_to_wrong"] == ["a1"] and cells[TOOLS]["wrong_to_right"] == []
    assert cells[BASE]["right_to_wrong"] == []
    assert ["correct", "misreported_result", 1] in cells[TOOLS]["category_moves"]
    assert cells[TOOLS]["header"][:4] == ["metric", "n", "A %", "B %"]
    assert c["verdict"].startswith("verdict: ")
    cost = {x["b_cell"]: {f["field"]: f for f in x["fields"]} for x in c["cost"]}
    assert cost[TOOLS]["wall_ms"]["a"] == 250.0 and cost[TOOLS]["wall_ms"]["ratio"] == 1.0


def test_the_server_refuses_what_it_does_not_serve(server):
    for path in ("/api/runs/..%2F..%2Fetc", "/api/runs/latest", "/static/..%2Fserver.py",
                 "/static/runs.py", "/api/runs/nope/samples", "/api/runs/run-a/samples/99",
                 "/etc/passwd"):
        assert get(server, path)[0] == 404, path
    assert get(server, "/api/runs", host="evil.example:80")[0] == 421  # DNS rebinding
    status, _, body = get(server, "/api/runs/run-a/samples?offset=x")
    assert status == 400 and b"error" in body


def test_pages_allow_only_their_own_scripts(server):
    conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=30)
    conn.request("GET", "/")
    res = conn.getresponse()
    res.read()
    assert res.status == 200
    csp = res.getheader("Content-Security-Policy")
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert res.getheader("X-Content-Type-Options") == "nosniff"


def test_the_cli_prints_the_url_and_refuses_a_missing_folder(tmp_path):
    from click.testing import CliRunner

    from evalpipe.cli import main

    res = CliRunner().invoke(main, ["view", str(tmp_path / "missing")])
    assert res.exit_code == 2


@pytest.mark.parametrize(("host", "warned"), [("127.0.0.1", False), ("localhost", False),
                                              ("0.0.0.0", True)])
def test_the_cli_warns_when_the_viewer_is_reachable_from_other_machines(
        tmp_path, monkeypatch, host, warned):
    from click.testing import CliRunner

    from evalpipe.cli import main

    def interrupted(self):
        raise KeyboardInterrupt
    monkeypatch.setattr(ViewServer, "serve_forever", interrupted)
    res = CliRunner().invoke(main, ["view", str(tmp_path), "--host", host, "--port", "0"])
    assert res.exit_code == 0, res.output
    assert "evalpipe view: http://" in res.output
    assert ("has no login" in res.output) is warned


def test_a_large_run_is_served_a_page_at_a_time(tmp_path):
    """Never the whole run: a page holds at most MAX_PAGE rows, the index keeps no raw
    sample (only where each line sits), and a transcript reads its own line."""
    from report_fixtures import Q, base_sample

    from evalpipe.view.runs import MAX_PAGE

    samples = []
    for i in range(2000):
        s = base_sample("a1" if i % 2 else "a2", "42" if i % 4 == 1 else "7")
        s["question_id"] = f"{s['question_id']}-{i}"
        samples.append(s)
    questions = [type(Q["a1"])(**{**Q[q].to_dict(), "id": f"{q}-{i}"})
                 for i in range(2000) for q in (("a1",) if i % 2 else ("a2",))]
    path = write_run(tmp_path / "big", samples, run_id="big", questions=questions)
    index = Outputs(tmp_path).get("big")
    page = index.page(offset=1500, limit=10_000)
    assert page["matched"] == 2000 and len(page["rows"]) == MAX_PAGE
    assert page["rows"][0]["qid"] == "a2-1500"
    assert index.page(result="correct")["matched"] == 500
    run, _ = index.run_data()
    assert run.samples == []
    one = index.sample(1999)
    assert one["sample"]["qid"] == "a1-1999"
    assert len(json.dumps(one)) < 20_000 < (path / "samples.jsonl").stat().st_size


# -- in the browser ------------------------------------------------------------------------

_browser = playwright_or_skip


def expect(locator):
    """Playwright's own polling (evaluating a string would break the page's CSP)."""
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(locator)


@pytest.fixture()
def page(server):
    sync_playwright = _browser()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.errors = []
            page.requests = []
            page.on("pageerror", lambda e: page.errors.append(str(e)))
            page.on("dialog", lambda d: (page.errors.append("dialog: " + d.message),
                                         d.dismiss()))
            page.on("console", lambda m: m.type == "error" and page.errors.append(m.text))
            page.on("request", lambda r: page.requests.append(r.url))
            yield page
            assert page.errors == []
            assert all(u.startswith(server.url) for u in page.requests), page.requests
        finally:
            browser.close()


def test_browser_lists_runs_and_compares_two_with_a_known_flip(server, page):
    page.goto(server.url)
    page.wait_for_selector("table.runs tbody tr")
    assert page.locator("table.runs tbody tr").count() == 3
    assert "finished (latest)" in page.locator("table.runs tbody tr").nth(1).inner_text()
    page.check("input[data-run=run-b]")
    page.check("input[data-run=run-a]")
    page.click("#compare")
    page.wait_for_selector("#verdict")
    assert page.url.endswith("#/compare/run-a/run-b")  # the older run is A
    section = page.locator("section", has=page.locator("h2", has_text=TOOLS))
    text = section.inner_text()
    assert "right → wrong (1): a1" in text and "wrong → right (0)" in text
    assert "correct" in section.locator("table.moves").inner_text()
    assert "wall ms (under load)" in section.locator("table.cost-changes").inner_text()
    # the flipped question opens run B's browser on it
    section.locator(".flips a", has_text="a1").click()
    page.wait_for_selector("#sample-body tr.sample-row")
    assert page.locator("#sample-body tr.sample-row").count() == 1
    assert page.input_value("#f-cell") == TOOLS
    assert page.evaluate("document.documentElement.scrollWidth") <= 1400


def test_browser_run_page_filters_pages_and_opens_a_transcript(server, page):
    page.goto(server.url + "#/run/run-a")
    page.wait_for_selector("#sample-body tr.sample-row")
    assert page.text_content("#sample-count") == "1–12 of 12 matching of 12 samples"
    assert "models: tiny-135m" in page.text_content("#facts")
    assert page.locator("#tables table.cost").count() == 1
    page.select_option("#f-cell", TOOLS)
    expect(page.locator("#sample-count")).to_have_text("1–6 of 6 matching of 12 samples")
    page.select_option("#f-category", "wrong_plan")
    expect(page.locator("#sample-body tr.sample-row")).to_have_count(1)
    page.locator("#sample-body tr.sample-row").first.click()
    page.wait_for_selector("#sample-body tr.detail .transcript")
    text = page.locator("#sample-body tr.detail .transcript").inner_text()
    assert "wrong_plan / wrong_arguments" in text
    assert "the calls do not match the plan: wrong_arguments" in text  # the rung's reason
    assert "ladder facts" in text and "tool call" in text
    assert page.evaluate("document.documentElement.scrollWidth") <= 1400


def test_browser_shows_a_hostile_reply_as_text(server, page):
    page.goto(server.url + "#/run/run-b?q=5%20*%206&cell=" + BASE)
    expect(page.locator("#sample-body tr.sample-row")).to_have_count(1)
    row = page.locator("#sample-body tr.sample-row").first
    assert "<script>alert(1)</script>" in row.inner_text()
    row.click()
    detail = page.locator("#sample-body tr.detail")
    detail.wait_for()
    text = detail.inner_text()
    assert "<script>alert(1)</script><img src=x onerror=alert(2)>" in text
    assert "\\u001b[31m" in text and "\\u202eevil" in text  # shown, not obeyed
    assert "\x1b" not in text and "\u202e" not in text
    assert page.locator("#main script, #main img:not(.plot)").count() == 0


def test_browser_follows_a_run_that_is_writing(outputs, server, page):
    page.goto(server.url + "#/run/run-live")
    page.wait_for_selector("#progress")
    shown = page.text_content("#progress")
    assert shown.startswith("running: ") and "samples written so far" in shown
    count = api(server, "/api/runs/run-live")["samples"]  # what the page shows once loaded
    expect(page.locator("#sample-body tr.sample-row")).to_have_count(count, timeout=30_000)
    with open(outputs / "run-live" / "samples.jsonl", "a") as f:
        f.write(json.dumps(samples_a("run-live")[11]) + "\n")
    expect(page.locator("#sample-body tr.sample-row")).to_have_count(count + 1, timeout=30_000)
    assert f"running: {count + 1} " in page.text_content("#progress")


def test_the_url_is_printed_on_127_0_0_1_by_default(outputs):
    srv = ViewServer(Outputs(outputs), port=0)
    try:
        assert srv.url == f"http://127.0.0.1:{srv.server_address[1]}/"
        assert srv.server_address[0] == "127.0.0.1"
    finally:
        srv.server_close()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(srv.url, timeout=5)
