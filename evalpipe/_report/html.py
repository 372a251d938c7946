"""One self-contained HTML report: tables, plots (base64 PNG), a per-sample browser.

Nothing is fetched at view time: CSS and JS are inline, plots are data: URIs,
sample data sits in a <script type="application/json"> block. Every value from the run
reaches the page through escape.html_text (elements, attributes) or escape.json_script
(the data blocks); the browser builds every element of the sample browser with
textContent, so model output can never inject markup.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping
from importlib import resources
from typing import Any

from evalpipe._report.build import MAIN_METRICS, metric_label
from evalpipe._report.escape import HTML, html_text, json_script
from evalpipe._report.load import RunData
from evalpipe._report.render import (
    COST_NOTE,
    accuracy_grid,
    audit_grid,
    category_grid,
    cost_grid,
    facts_line,
    noise_floor_line,
    repeats_grid,
    report_notes,
)
from evalpipe.prompts import block_texts
from evalpipe.records import SampleRecord, ScoredSample
from evalpipe.scoring.retrieval_metrics import covers

PAGE_SIZE = 200
MAX_SAMPLES = 20_000  # transcripts embedded in one file; more makes a slow, huge page


def _chunk_rows(chunks: list[dict[str, Any]], gold: list[dict[str, Any]], source: str
                ) -> list[dict[str, Any]]:
    out = []
    for c in chunks:
        if not isinstance(c, dict) or not {"doc", "start", "end"} <= c.keys():
            continue
        try:
            is_gold = any(covers(c, g) for g in gold)
        except (TypeError, ValueError, KeyError):
            is_gold = False
        out.append({"rank": c.get("rank"), "doc": c.get("doc"), "start": c.get("start"),
                    "end": c.get("end"), "score": c.get("score"), "text": c.get("text", ""),
                    "source": c.get("source", source), "gold": is_gold})
    return out


def sample_view(scored: ScoredSample, raw: SampleRecord | None, question) -> dict[str, Any]:
    """What the browser shows for one sample (JSON-able); `raw`: its line of samples.jsonl."""
    sample: Mapping[str, Any] = raw or {}
    gold_passages = list(getattr(question, "gold_passages", None) or [])
    retrieved = _chunk_rows(sample.get("retrieved") or [], gold_passages, "prepend")
    seen = {(r["doc"], r["start"], r["end"], r["source"]) for r in retrieved}
    turns = []
    for t in sample.get("turns") or []:
        events = t.get("tool_events") or []
        for e in events:  # hits of a search tool are retrieved chunks too
            if e.get("name") == "search_site" and isinstance(e.get("result"), list):
                for r in _chunk_rows(e["result"], gold_passages, "tool"):
                    if (r["doc"], r["start"], r["end"], "tool") not in seen:
                        seen.add((r["doc"], r["start"], r["end"], "tool"))
                        retrieved.append(r)
        turns.append({k: t.get(k) for k in ("index", "raw", "parse_errors", "finish_reason",
                                              "prompt_tokens", "completion_tokens",
                                              "prefill_ms", "decode_ms", "repaired",
                                              "prompt_blocks")}
                     | {"tool_events": [{k: e.get(k) for k in ("name", "arguments", "result",
                                                              "error", "error_message")}
                                        for e in events]})
    return {
        "cell": scored.get("cell_id"), "suite": scored.get("suite"),
        "qid": scored.get("question_id"), "category": scored.get("category"),
        "subtype": scored.get("subtype"), "flags": scored.get("flags") or [],
        "exact": bool(scored.get("exact")), "infra": bool(scored.get("infra")),
        "extracted": scored.get("extracted"), "plan_exact": scored.get("plan_exact"),
        "why": scored.get("why"), "extraction": scored.get("extraction"),
        "format_valid": scored.get("format_valid"), "retrieval": scored.get("retrieval"),
        "cost": scored.get("cost"),
        "question": getattr(question, "question", None),
        "gold": getattr(question, "answer", None),
        "aliases": list(getattr(question, "aliases", None) or []),
        "answer_type": getattr(question, "answer_type", None),
        "gold_calls": getattr(question, "gold_calls", None),
        "gold_passages": gold_passages,
        "final_answer": sample.get("final_answer"), "reasoning": sample.get("reasoning"),
        "stop_reason": sample.get("stop_reason"), "error": sample.get("error"),
        "messages": sample.get("messages") or [], "turns": turns, "retrieved": retrieved,
    }


def _table_html(header: list[str], rows: list[list[str]], cls: str = "") -> str:
    head = "".join(f"<th>{html_text(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html_text(c)}</td>" for c in row) + "</tr>"
                   for row in rows)
    return (f'<div class="scroll"><table class="{cls}"><thead><tr>{head}</tr></thead>'
            f'<tbody>{body}</tbody></table></div>')


def asset(name: str) -> str:
    """A file of evalpipe/_report/assets (CSS and JS shared with `evalpipe view`)."""
    return (resources.files("evalpipe._report") / "assets" / name).read_text(encoding="utf-8")


def inline_markdown(text: str) -> str:
    """Escaped text with Markdown `code` spans as <code>: for evalpipe's own prose
    (COST_NOTE), written once for the Markdown report and read here too."""
    parts = html.escape(text).split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick stays as it is
        return html.escape(text)
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def _facts_html(data: dict[str, Any]) -> str:
    """The line under the title: config, models, date, commit, status."""
    return " · ".join(f"{html_text(k)}: {html_text(v)}" for k, v in facts_line(data))


def render_html(run: RunData, data: dict[str, Any], plots: dict[str, bytes] | None = None,
                max_samples: int | None = MAX_SAMPLES) -> str:
    """The whole page. At most `max_samples` samples go into the browser (in run order;
    None: all); the page says when some were left out. The tables always cover all."""
    k = data["k"]
    parts = []
    for metric, _, proportion in MAIN_METRICS:
        header, rows = accuracy_grid(data, metric, proportion)
        parts.append(f"<h3>{html_text(metric_label(metric, k))}</h3>"
                     + _table_html(header, rows, "acc"))
    header, rows = category_grid(data)
    cat_html = _table_html(header, rows, "categories")
    header, rows = cost_grid(data)
    cost_html = _table_html(header, rows, "cost")
    noise_html = ""
    if any(r["repeats"] > 1 for r in data.get("repeats") or []):
        header, rows = repeats_grid(data)
        flips = "".join(f"<li>{html_text(r['cell_id'])}: "
                        f"{html_text(', '.join(map(str, r['flipping'])))}</li>"
                        for r in data["repeats"] if r["flipping"])
        noise_html += ("<h3>Repeats</h3><p>pass^k: all of k repeats right; pass@k: at least "
                       "one; flip rate: questions whose repeats disagree; noise floor: the "
                       "smallest detectable difference in exact match.</p>"
                       + _table_html(header, rows, "repeats")
                       + (f"<p>Questions that flip:</p><ul>{flips}</ul>" if flips else ""))
    elif data.get("repeats"):
        noise_html += f"<p>{html_text(noise_floor_line(data))}</p>"
    if data.get("audit"):
        header, rows = audit_grid(data)
        noise_html += ("<h3>Determinism audit</h3><p>Recorded turns generated again: share "
                       "with the same reply and the same verdict.</p>"
                       + _table_html(header, rows, "audit"))
    plot_html = "".join(
        f'<figure><img class="plot" alt="{html_text(name)}" '
        f'src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}"></figure>'
        for name, png in (plots or {}).items()) or "<p>No plots (matplotlib not installed).</p>"

    def key(s):
        return s.get("cell_id"), s.get("question_id"), s.get("repeat") or 0

    by_key = {key(s): s for s in run.samples}
    scored = run.scores.get("samples", [])
    kept = scored if max_samples is None else scored[:max_samples]
    views = [sample_view(sc, by_key.get(key(sc)),
                         run.questions.get(sc["question_id"])) for sc in kept]
    # The exact prompts: each block's text once, joined per turn by the browser.
    texts = block_texts(run.samples)
    used = {b for v in views for t in v["turns"] for b in t.get("prompt_blocks") or ()}
    prompt_blocks = {b: texts[b] for b in used if b in texts}
    left_out = (f'<p class="bad">The browser holds the first {len(kept)} of {len(scored)} '
                "samples (--max-samples); the tables cover all of them.</p>"
                if len(kept) < len(scored) else "")
    notes = "".join(f'<p class="warn">{n}</p>' for n in report_notes(data, HTML))
    title = f"evalpipe report: {data['run_id']}"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html_text(title)}</title><style>{asset("report.css")}</style></head>
<body>
<header><h1>{html_text(title)}</h1>
<p class="facts">{_facts_html(data)}</p>
<nav><a href="#accuracy">Accuracy</a><a href="#categories">Failure categories</a>
<a href="#cost">Cost</a><a href="#plots">Plots</a><a href="#browser">Samples</a></nav></header>
<main>
{notes}
<section id="accuracy"><h2>Accuracy per cell and suite</h2>
<p>rate (hits/n) [95% interval]: Wilson for proportions, Student t for recall@{html_text(k)}
(mean of per-question recall). Infrastructure errors are kept out of every rate.
Scorer version {html_text(data.get('scorer_version'))}.</p>
{''.join(parts)}</section>
<section id="categories"><h2>Failure categories</h2>{cat_html}</section>
<section id="cost"><h2>Cost per sample (means)</h2>
<p>{inline_markdown(COST_NOTE)}</p>
{cost_html}</section>
{f'<section id="noise"><h2>Noise</h2>{noise_html}</section>' if noise_html else ''}
<section id="plots"><h2>Plots</h2>{plot_html}</section>
<section id="browser"><h2>Samples</h2>{left_out}
<div class="filters">
<label>cell <select id="f-cell"><option value="">all</option></select></label>
<label>suite <select id="f-suite"><option value="">all</option></select></label>
<label>category <select id="f-category"><option value="">all</option></select></label>
<label>result <select id="f-result"><option value="">all</option>
<option value="correct">correct</option><option value="wrong">wrong</option></select></label>
<label>search <input id="f-text" type="search" placeholder="id, question, answer"></label>
<span id="sample-count"></span></div>
<table id="samples" data-page="{PAGE_SIZE}"><colgroup><col class="w-cell">
<col class="w-suite"><col class="w-qid"><col class="w-exact"><col class="w-category">
<col class="w-answer"></colgroup><thead><tr><th>cell</th><th>suite</th><th>question</th>
<th>exact</th><th>category</th><th>final answer</th></tr></thead>
<tbody id="sample-body"></tbody></table>
<button id="more" type="button">Show more</button>
</section></main>
<script type="application/json" id="sample-data">{json_script(views)}</script>
<script type="application/json" id="prompt-data">{json_script(prompt_blocks)}</script>
<script>{asset("transcript.js")}</script>
<script>{asset("report.js")}</script>
</body></html>
"""
