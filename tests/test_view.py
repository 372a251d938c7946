"""evalpipe view: the JSON API over an outputs folder, and the page in headless Chromium.

Three runs: A and B (finished; in B one question flips right -> wrong and one reply
is hostile: a script tag, ANSI colour codes and a right-to-left override), and a
run still writing (status running, no scores.json, a torn last line). The browser
tests need Debian's chromium (.ci/setup-browser.sh) and the playwright package, and
skip with the reason otherwise; never `playwright install`."""

from __future__ import annotations

import contextlib
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
    run = index.report().run
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


@contextlib.contextmanager
def browser_page(server, allowed_errors=()):
    """A Chromium page that may load only from `server`; any script error, dialog or
    console error (other than `allowed_errors`) fails the test."""
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
            assert [e for e in page.errors if not any(a in e for a in allowed_errors)] == []
            assert all(u.startswith(server.url) for u in page.requests), page.requests
        finally:
            browser.close()


@pytest.fixture()
def page(server):
    with browser_page(server) as page:
        yield page


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
    path = outputs / "run-live" / "samples.jsonl"
    text = path.read_text()  # the writer cuts a torn last line before it appends
    path.write_text(text[:text.rindex("\n") + 1] + json.dumps(samples_a("run-live")[11]) + "\n")
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


# -- damaged runs, vanished runs -----------------------------------------------------------

def _set(data: dict, dotted: str, value) -> None:
    *path, last = dotted.split(".")
    for key in path:
        data = data.setdefault(key, {})
    data[last] = value


# field -> a value of the wrong type (or range), for every field the list and pages read
WRONG_FIELDS = [
    ("run_id", 7), ("config", ["k"]), ("config.name", {"a": 1}), ("config.models", "tiny"),
    ("config.models", [7]), ("config.models", [{"id": ["x"]}]), ("config.models", [{}]),
    ("config.match", 1), ("config.k", "3"), ("config.k", 0), ("config_source", 1),
    ("started", 20250101), ("finished", ["x"]), ("ended", {}), ("git_commit", 123),
    ("status", {"s": 1}), ("error", ["e"]), ("warnings", "boom"), ("warnings", [1]),
    ("questions", "six"), ("questions", -1), ("questions", True), ("cells", []),
    (f"cells.{BASE}", "x"), (f"cells.{BASE}.settings", []),
    (f"cells.{BASE}.settings.model", 5), (f"cells.{BASE}.facets", {"model": 5}),
    (f"cells.{BASE}.fingerprint", 1), (f"cells.{BASE}.served", "x"), ("repeats", [1]),
    ("repeats.seeds", "0"),
]
# run -> (what to write, the file and the words its reason must name)
MANIFESTS = {f"manifest-{i}": (("field", f, v), "manifest.json", f"field '{f}")
             for i, (f, v) in enumerate(WRONG_FIELDS)}
MANIFESTS |= {
    "manifest-list": (("json", [1, 2]), "manifest.json", "expected an object, got a list"),
    "manifest-string": (("json", "a run"), "manifest.json", "got text"),
    "manifest-number": (("json", 7), "manifest.json", "got a number"),
    "manifest-null": (("json", None), "manifest.json", "got null"),
    "manifest-empty": (("json", {}), "manifest.json", "field 'run_id' is missing"),
    "manifest-no-config": (("json", {"run_id": "x"}), "manifest.json",
                           "field 'config' is missing"),
    "manifest-not-json": (("bytes", b'{"run_id": "x", "con'), "manifest.json", "not JSON"),
    "manifest-not-utf8": (("bytes", b'{"run_id": "\xff"}'), "manifest.json", "not UTF-8"),
}
SCORES = {
    "scores-list": (("json", []), "scores.json", "expected an object"),
    "scores-not-json": (("bytes", b'{"groups": ['), "scores.json", "not JSON"),
    "scores-no-groups": (("drop", "groups"), "scores.json", "field 'groups' is missing"),
    "scores-groups-object": (("field", "groups", {}), "scores.json", "field 'groups'"),
    "scores-samples-text": (("field", "samples", "all"), "scores.json", "field 'samples'"),
    "scores-sample-number": (("field", "samples", [7]), "scores.json", "field 'samples[0]'"),
    "scores-sample-no-cell": (("sample", "cell_id", None), "scores.json",
                              "field 'samples[0].cell_id'"),
    "scores-sample-exact-text": (("sample", "exact", "yes"), "scores.json",
                                 "field 'samples[0].exact'"),
    "scores-sample-cost-list": (("sample", "cost", []), "scores.json",
                                "field 'samples[0].cost'"),
    "scores-group-rates-list": (("group", "rates", []), "scores.json",
                                "field 'groups[0].rates'"),
    "scores-group-rate-text": (("group", "rates", {"exact": {"rate": "high", "n": 4}}),
                               "scores.json", "field 'groups[0].rates.exact.rate'"),
    "scores-k-text": (("field", "k", "3"), "scores.json", "field 'k'"),
}
SAMPLES = {  # found when the run is opened (the list reads no samples of a finished run)
    "samples-bad-line": (("line", b'{"cell_id": "x", "question_'), "samples.jsonl", "line 2"),
    "samples-not-utf8": (("line", b'{"cell_id": "\xff\xfe"}'), "samples.jsonl", "line 2"),
    "samples-a-list": (("line", b"[1, 2]"), "samples.jsonl", "line 2: expected an object"),
    "samples-no-cell": (("line", b'{"question_id": "a1"}'), "samples.jsonl",
                        "line 2: field 'cell_id' is missing"),
    "samples-repeat-text": (("line", b'{"cell_id": "c", "question_id": "a1", "repeat": "1"}'),
                            "samples.jsonl", "line 2: field 'repeat'"),
    "questions-bad-line": (("questions", b'{"id": "a1", "quest'), "questions.jsonl", "line 2"),
}
DAMAGED = MANIFESTS | SCORES | SAMPLES


def _damage(path: Path, how: tuple) -> None:
    kind, *args = how
    manifest = json.loads((path / "manifest.json").read_text())
    scores = json.loads((path / "scores.json").read_text())
    if kind == "field" and path.name.startswith("manifest"):
        _set(manifest, args[0], args[1])
    elif kind == "json" and path.name.startswith("manifest"):
        manifest = args[0]
    elif kind == "bytes" and path.name.startswith("manifest"):
        (path / "manifest.json").write_bytes(args[0])
        return
    elif kind == "json":
        scores = args[0]
    elif kind == "bytes":
        (path / "scores.json").write_bytes(args[0])
        return
    elif kind == "drop":
        del scores[args[0]]
    elif kind == "field":
        scores[args[0]] = args[1]
    elif kind == "sample":
        scores["samples"][0][args[0]] = args[1]
    elif kind == "group":
        scores["groups"][0][args[0]] = args[1]
    elif kind in ("line", "questions"):
        name = "samples.jsonl" if kind == "line" else "questions.jsonl"
        lines = (path / name).read_bytes().splitlines(keepends=True)
        (path / name).write_bytes(lines[0] + args[0] + b"\n" + b"".join(lines[1:]))
        return
    (path / "manifest.json").write_text(json.dumps(manifest))
    (path / "scores.json").write_text(json.dumps(scores))


@pytest.fixture(scope="module")
def damaged_outputs(tmp_path_factory):
    """A good run beside one damaged run of each kind."""
    root = tmp_path_factory.mktemp("damaged")
    _finish(write_run(root / "good", samples_a("good"), run_id="good"),
            "2025-01-01T10:00:00+0000")
    for name, (how, _, _) in DAMAGED.items():
        path = write_run(root / name, samples_a(name), run_id=name)
        _finish(path, "2025-01-02T10:00:00+0000")
        _damage(path, how)
    return root


@pytest.fixture(scope="module")
def damaged_server(damaged_outputs):
    warned: list[str] = []
    srv = ViewServer(Outputs(damaged_outputs), port=0, warn=warned.append)
    srv.warned = warned
    srv.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def test_the_list_leaves_out_each_damaged_run_names_why_and_warns_once(damaged_outputs):
    warned: list[str] = []
    srv = ViewServer(Outputs(damaged_outputs), port=0, warn=warned.append)
    srv.start()
    try:
        for _ in range(2):  # listed twice: warned once
            listing = api(srv, "/api/runs")
    finally:
        srv.shutdown()
        srv.server_close()
    # a finished run's samples are read when it is opened: until then it is listed
    assert sorted(r["id"] for r in listing["runs"]) == sorted(["good", *SAMPLES])
    shown = {d["id"]: d["problem"] for d in listing["damaged"]}
    assert set(shown) == set(MANIFESTS) | set(SCORES)
    for name in shown:
        _, file, words = DAMAGED[name]
        assert shown[name].startswith(f"{file}: ") and words in shown[name], (name, shown[name])
        assert sum(f"run {name!r} cannot be shown: {shown[name]}" in w for w in warned) == 1


@pytest.mark.parametrize("name", list(DAMAGED))
def test_every_page_of_a_damaged_run_answers_what_is_wrong(damaged_server, name):
    _, file, words = DAMAGED[name]
    for path in (f"/api/runs/{name}", f"/api/runs/{name}/samples", f"/api/runs/{name}/samples/0",
                 f"/api/runs/{name}/plots/exact.png", f"/api/compare?a=good&b={name}"):
        status, kind, body = get(damaged_server, path)
        assert status == 500 and kind.startswith("application/json"), (path, status, body)
        answer = json.loads(body)
        assert answer["run"] == name and answer["damaged"].startswith(file), (path, answer)
        assert words in answer["damaged"] and "Traceback" not in answer["error"], answer
    if name in SAMPLES:  # once opened, the list knows too
        assert name in {d["id"] for d in api(damaged_server, "/api/runs")["damaged"]}
    assert not any(w.startswith("error:") for w in damaged_server.warned)


def test_a_repaired_run_is_listed_again(tmp_path):
    path = write_run(tmp_path / "run", samples_a("run"), run_id="run")
    good = (path / "samples.jsonl").read_bytes()
    _damage(path, ("line", b"[1, 2]"))
    srv = ViewServer(Outputs(tmp_path), port=0)
    srv.start()
    try:
        assert get(srv, "/api/runs/run")[0] == 500
        assert [d["id"] for d in api(srv, "/api/runs")["damaged"]] == ["run"]
        (path / "samples.jsonl").write_bytes(good)
        assert api(srv, "/api/runs/run")["samples"] == 12
        listing = api(srv, "/api/runs")
        assert [r["id"] for r in listing["runs"]] == ["run"] and listing["damaged"] == []
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.mark.parametrize("deleted", ["folder", "manifest.json", "samples.jsonl"])
def test_a_run_deleted_while_viewed_answers_404(tmp_path, deleted):
    import shutil

    for name in ("keep", "gone"):
        _finish(write_run(tmp_path / name, samples_a(name), run_id=name),
                "2025-01-01T10:00:00+0000")
    srv = ViewServer(Outputs(tmp_path), port=0)
    srv.start()
    try:
        for path in ("/api/runs/gone", "/api/runs/gone/samples", "/api/runs/gone/samples/0"):
            assert get(srv, path)[0] == 200, path  # open, indexed, shown
        if deleted == "folder":
            shutil.rmtree(tmp_path / "gone")
        else:
            (tmp_path / "gone" / deleted).unlink()
        gone = ["/api/runs/gone/samples/0"]
        if deleted != "samples.jsonl":  # the run itself is gone
            gone += ["/api/runs/gone", "/api/runs/gone/samples",
                     "/api/runs/gone/plots/exact.png", "/api/compare?a=keep&b=gone"]
        for path in gone:
            status, _, body = get(srv, path)
            assert status == 404, (path, status, body)
            assert "gone" in json.loads(body)["error"] or path.startswith("/api/compare")
        ids = [r["id"] for r in api(srv, "/api/runs")["runs"]]
        assert ids == (["keep"] if deleted != "samples.jsonl" else ["keep", "gone"])
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_query_the_api_cannot_read_is_400_with_what_it_expected(server):
    for path, words in (("/api/runs/run-a/samples?limit=many", "limit='many'"),
                        ("/api/compare?a=run-a", "compare needs two runs")):
        status, _, body = get(server, path)
        assert status == 400 and words in json.loads(body)["error"], (path, body)
    assert get(server, "/api/runs/run-a/samples/-1")[0] == 404


# -- --host: the address it was given, and no other name ------------------------------------

def _machine_address() -> str | None:
    """A non-loopback IPv4 address of this machine, or None."""
    import ipaddress
    import socket

    found = []
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.1", 9))  # nothing is sent: the kernel picks the source
        found.append(s.getsockname()[0])
    with contextlib.suppress(OSError):
        found += [a[4][0] for a in socket.getaddrinfo(socket.gethostname(), None,
                                                      socket.AF_INET)]
    return next((ip for ip in found if not ipaddress.ip_address(ip).is_loopback), None)


def ask(port: int, host: str | None, address: str = "127.0.0.1", path: str = "/api/runs"):
    """GET `path` from address:port with this Host header (None: no Host header)."""
    conn = http.client.HTTPConnection(address, port, timeout=60)
    conn.putrequest("GET", path, skip_host=True)
    if host is not None:
        conn.putheader("Host", host)
    conn.endheaders()
    res = conn.getresponse()
    res.read()
    conn.close()
    return res.status


@pytest.fixture(scope="module")
def wide(outputs):
    srv = ViewServer(Outputs(outputs), host="0.0.0.0", port=0)
    srv.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _hosts_to_allow(port: int) -> list[str]:
    import socket

    name = socket.gethostname()
    allowed = [f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "localhost",
               f"{name}:{port}", f"{name.upper()}.:{port}", f"app.localhost:{port}",
               f"10.9.8.7:{port}", "10.9.8.7:8080", f"[2001:db8::1]:{port}"]  # NAT, mapped port
    ip = _machine_address()
    return allowed + ([f"{ip}:{port}", ip] if ip else [])


def _forged(port: int) -> list[str | None]:
    import socket

    name = socket.gethostname()
    return [f"evil.example:{port}", "evil.example", f"{name}.evil.example:{port}",
            f"127.0.0.1.nip.io:{port}", f"localhost.evil.example:{port}", "", None,
            f"evil.example:{port}:1", f"[::1]x:{port}", f"localhost:{port}x"]


def test_bound_to_every_address_it_answers_the_machine_and_refuses_forged_names(wide):
    port = wide.server_address[1]
    allowed, forged = _hosts_to_allow(port), _forged(port)
    assert {h: ask(port, h) for h in allowed} == dict.fromkeys(allowed, 200)
    assert {h: ask(port, h) for h in forged} == dict.fromkeys(forged, 421)
    ip = _machine_address()
    if ip:  # through the machine's real address, as another machine reaches it
        assert ask(port, f"{ip}:{port}", address=ip) == 200
        assert ask(port, f"evil.example:{port}", address=ip) == 421


def test_bound_to_loopback_it_answers_loopback_names_only(server):
    import socket

    port = server.server_address[1]
    assert ask(port, f"localhost:{port}") == ask(port, f"[::1]:{port}") == 200
    for host in (f"10.9.8.7:{port}", f"{socket.gethostname()}:{port}", f"evil.example:{port}"):
        assert ask(port, host) == 421, host


def test_bound_to_one_address_it_answers_that_address_and_allowed_names(outputs):
    ip = _machine_address()
    if ip is None:
        pytest.skip("this machine has no address but loopback")
    srv = ViewServer(Outputs(outputs), host=ip, port=0, allow_hosts=("evals.example.org",))
    srv.start()
    try:
        port = srv.server_address[1]
        assert srv.url == f"http://{ip}:{port}/"
        for host in (f"{ip}:{port}", f"evals.example.org:{port}", f"EVALS.example.org.:{port}"):
            assert ask(port, host, address=ip) == 200, host
        for host in _forged(port):
            assert ask(port, host, address=ip) == 421, host
    finally:
        srv.shutdown()
        srv.server_close()


def test_an_ipv6_address_is_served(outputs):
    import socket

    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError as exc:
        pytest.skip(f"no IPv6 loopback on this machine: {exc}")
    srv = ViewServer(Outputs(outputs), host="::1", port=0)
    srv.start()
    try:
        port = srv.server_address[1]
        assert srv.url == f"http://[::1]:{port}/"
        assert ask(port, f"[::1]:{port}", address="::1") == 200
        assert ask(port, f"evil.example:{port}", address="::1") == 421
    finally:
        srv.shutdown()
        srv.server_close()


def test_the_cli_on_0_0_0_0_serves_other_machines_and_warns(outputs):
    """`evalpipe view --host 0.0.0.0`, the real command: reachable through the machine's
    own address, forged names refused, and the no-login warning printed."""
    with _view_cli_on_every_address(outputs) as (ip, port, first, err):
        assert first.startswith("evalpipe view: http://0.0.0.0:"), first
        with urllib.request.urlopen(f"http://{ip}:{port}/api/runs", timeout=60) as res:
            assert res.status == 200
            assert {r["id"] for r in json.loads(res.read())["runs"]} == {
                "run-a", "run-b", "run-live"}
        assert ask(port, f"evil.example:{port}", address=ip) == 421
    assert "warning: the viewer has no login" in err[0]


@contextlib.contextmanager
def _view_cli_on_every_address(outputs):
    """The real `evalpipe view OUTPUTS --host 0.0.0.0` on a free port: yields this
    machine's own address, the port, the first line printed, and a list that holds the
    command's stderr once it has stopped (skips where the machine has only loopback)."""
    import subprocess
    import sys

    ip = _machine_address()
    if ip is None:
        pytest.skip("this machine has no address but loopback")
    proc = subprocess.Popen([sys.executable, "-m", "evalpipe", "view", str(outputs), "--host",
                             "0.0.0.0", "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    err: list[str] = []
    try:
        first = proc.stdout.readline()
        yield ip, int(first.split()[2].rstrip("/").rsplit(":", 1)[1]), first, err
    finally:
        proc.terminate()
        err.append(proc.communicate(timeout=60)[1])


def test_browser_lists_the_runs_and_warns_of_each_damaged_one(damaged_outputs):
    srv = ViewServer(Outputs(damaged_outputs), port=0)
    srv.start()
    # the run page of a damaged run answers 500: the browser logs the failed load
    try:
        with browser_page(srv, allowed_errors=("500 (Internal Server Error)",)) as page:
            page.goto(srv.url)
            page.wait_for_selector("table.runs tbody tr")
            assert page.locator("table.runs tbody tr").count() == 1 + len(SAMPLES)
            warnings = page.locator("#damaged p.warn")
            assert warnings.count() == len(MANIFESTS) + len(SCORES)
            text = page.locator("#damaged").inner_text()
            assert "warning: manifest-list: manifest.json: expected an object, got a list" in text
            assert "scores-sample-exact-text: scores.json: field 'samples[0].exact'" in text
            page.goto(srv.url + "#/run/manifest-list")
            expect(page.locator("p.error")).to_contain_text(
                "run 'manifest-list' cannot be shown: manifest.json: expected an object")
            assert "Traceback" not in page.locator("#main").inner_text()
    finally:
        srv.shutdown()
        srv.server_close()


def test_browser_a_run_deleted_while_open_says_it_is_gone(tmp_path):
    """The run page open in Chromium, then the run's folder deleted: opening a transcript
    says that sample is not found, and loading the page again says the run is gone (the
    API's 404s). Before, the transcript was a 500 (FileNotFoundError) shown as an internal
    error."""
    import shutil

    for name in ("keep", "gone"):
        _finish(write_run(tmp_path / name, samples_a(name), run_id=name),
                "2025-01-01T10:00:00+0000")
    srv = ViewServer(Outputs(tmp_path), port=0)
    srv.start()
    try:
        # each failed load is logged by the browser: a 404, never a 500
        with browser_page(srv, allowed_errors=("404 (Not Found)",)) as page:
            page.goto(srv.url + "#/run/gone")
            page.wait_for_selector("#sample-body tr.sample-row")
            shutil.rmtree(tmp_path / "gone")
            page.locator("#sample-body tr.sample-row").first.click()
            expect(page.locator("p.error")).to_contain_text("not found: samples/0 of run 'gone'")
            page.reload()
            expect(page.locator("p.error")).to_contain_text(
                "no run 'gone' in this outputs folder (deleted?)")
            assert page.locator("#sample-body tr.sample-row").count() == 0
            assert "Traceback" not in page.locator("#main").inner_text()
    finally:
        srv.shutdown()
        srv.server_close()


def test_browser_opens_the_cli_on_0_0_0_0_through_the_machines_address(outputs):
    """`evalpipe view --host 0.0.0.0`, the real command, opened in Chromium through this
    machine's own address, as another machine opens it: the list and a run page load.
    Before, every request through that address was refused (421)."""
    from types import SimpleNamespace

    with _view_cli_on_every_address(outputs) as (ip, port, _, _):
        site = SimpleNamespace(url=f"http://{ip}:{port}/")
        with browser_page(site) as page:
            page.goto(site.url)
            page.wait_for_selector("table.runs tbody tr")
            assert page.locator("table.runs tbody tr").count() == 3
            page.goto(site.url + "#/run/run-a")
            page.wait_for_selector("#sample-body tr.sample-row")
            assert page.locator("#sample-body tr.sample-row").count() == 12
