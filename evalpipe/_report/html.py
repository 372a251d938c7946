"""One self-contained HTML report: tables, plots (base64 PNG), a per-sample browser.

Nothing is fetched at view time: CSS and JS are inline, plots are data: URIs,
sample data sits in a <script type="application/json"> block. The browser
builds every element with textContent, so model output can never inject markup.
"""

from __future__ import annotations

import base64
import html
import json
from typing import Any

from evalpipe.prompts import block_texts
from evalpipe._report.build import MAIN_METRICS, metric_label
from evalpipe._report.load import RunData
from evalpipe._report.render import (
    COST_NOTE,
    accuracy_grid,
    audit_grid,
    category_grid,
    cost_grid,
    repeats_grid,
)
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


def sample_view(scored: dict[str, Any], sample: dict[str, Any] | None, question) -> dict[str, Any]:
    """What the browser shows for one sample (JSON-able)."""
    sample = sample or {}
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
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _json_script(data: Any) -> str:
    text = json.dumps(data, ensure_ascii=False, default=str)
    # a JSON string may hold "</script>" or "<!--"; escaping "<" keeps the block closed
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#222;
 background:#fafafa}
header{background:#263238;color:#fff;padding:12px 24px}
header h1{margin:0;font-size:1.3em}
nav a{color:#b2dfdb;margin-right:14px}
main{padding:12px 24px}
section{background:#fff;border:1px solid #e0e0e0;border-radius:6px;padding:8px 16px;
 margin:14px 0}
table{border-collapse:collapse;font-size:13px;margin:8px 0}
th,td{border-bottom:1px solid #e0e0e0;padding:4px 8px;text-align:right;vertical-align:top}
th:first-child,td:first-child{text-align:left}
th{background:#eceff1}
img.plot{max-width:100%;border:1px solid #eee;margin:6px 0}
.filters{display:flex;flex-wrap:wrap;gap:10px;align-items:center;margin:8px 0}
.filters label{font-size:13px}
#samples td,#samples th{text-align:left}
#samples tr.sample-row{cursor:pointer}
#samples tr.sample-row:hover{background:#f1f8e9}
.ok{color:#2e7d32;font-weight:600}.bad{color:#c62828;font-weight:600}
.transcript{background:#fcfcfc;padding:8px 12px;font-size:13px}
.msg{border-left:4px solid #90a4ae;margin:6px 0;padding:4px 8px;background:#fff}
.msg.system{border-color:#9e9e9e}.msg.user{border-color:#1565c0}
.msg.assistant{border-color:#2e7d32}.msg.tool{border-color:#ef6c00}
.role{font-weight:700;font-size:12px;text-transform:uppercase;color:#555}
pre{white-space:pre-wrap;word-break:break-word;margin:4px 0;font-size:12px}
.chunk{border:1px solid #ddd;margin:4px 0;padding:4px 8px;background:#fff}
.chunk.gold{border:2px solid #2e7d32;background:#f1f8e9}
.badge{display:inline-block;font-size:11px;padding:1px 6px;border-radius:8px;
 background:#eceff1;margin-right:4px}
.badge.gold{background:#2e7d32;color:#fff}
.kv td{text-align:left;border:none;padding:1px 8px}
"""

JS = r"""
(function(){
const DATA = JSON.parse(document.getElementById('sample-data').textContent);
const BLOCKS = JSON.parse(document.getElementById('prompt-data').textContent);
const promptOf = t => (t.prompt_blocks && t.prompt_blocks.length &&
  t.prompt_blocks.every(b => b in BLOCKS)) ? t.prompt_blocks.map(b => BLOCKS[b]).join('') : null;
DATA.forEach((s, i) => { s.i = i; });
const PAGE = %PAGE%;
let limit = PAGE;
const $ = id => document.getElementById(id);
function el(tag, attrs, ...kids){
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v; else e.setAttribute(k, v);
  }
  for (const kid of kids) {
    if (kid === null || kid === undefined) continue;
    e.appendChild(typeof kid === 'string' ? document.createTextNode(kid) : kid);
  }
  return e;
}
function str(v){ return (v === null || v === undefined) ? '' :
  (typeof v === 'string' ? v : JSON.stringify(v, null, 1)); }
function fill(select, values){
  for (const v of values) select.appendChild(el('option', {value: v}, v));
}
const uniq = key => [...new Set(DATA.map(s => s[key]))].sort();
fill($('f-cell'), uniq('cell')); fill($('f-suite'), uniq('suite'));
fill($('f-category'), uniq('category'));
function matches(s){
  const c = $('f-cell').value, su = $('f-suite').value, ca = $('f-category').value,
        r = $('f-result').value, q = $('f-text').value.trim().toLowerCase();
  if (c && s.cell !== c) return false;
  if (su && s.suite !== su) return false;
  if (ca && s.category !== ca) return false;
  if (r === 'correct' && !s.exact) return false;
  if (r === 'wrong' && (s.exact || s.infra)) return false;
  if (q && !(str(s.qid) + ' ' + str(s.question) + ' ' + str(s.final_answer))
        .toLowerCase().includes(q)) return false;
  return true;
}
function transcript(s){
  const box = el('div', {class: 'transcript'});
  const kv = el('table', {class: 'kv'});
  const row = (k, v) => kv.appendChild(el('tr', {}, el('td', {}, el('b', {}, k)),
                                                     el('td', {}, str(v))));
  row('question', s.question); row('gold answer', s.gold);
  if (s.aliases.length) row('aliases', s.aliases.join(' | '));
  row('final answer', s.final_answer); row('extracted', s.extracted);
  row('category', s.category + (s.subtype ? ' / ' + s.subtype : ''));
  if (s.why) {  // why the ladder decided so: the rung, its reason, the facts it read
    row('why', 'rung ' + s.why.rung + ': ' + s.why.reason +
        (s.extraction ? ' (answer read by: ' + s.extraction + ')' : ''));
    if (s.why.plan) row('plan steps', s.why.plan);
    row('ladder facts', Object.entries(s.why.facts || {})
        .filter(([, v]) => v !== null && v !== false).map(([k, v]) => v === true ? k
        : k + '=' + v).join(', '));
  }
  if (s.flags.length) row('flags', s.flags.join(', '));
  row('stop reason', s.stop_reason);
  if (s.error) row('error', s.error);
  if (s.gold_calls) row('gold plan', s.gold_calls);
  if (s.retrieval) row('retrieval', s.retrieval);
  row('cost', s.cost);
  box.appendChild(kv);
  box.appendChild(el('h4', {}, 'Transcript'));
  for (const m of s.messages) {
    const div = el('div', {class: 'msg ' + (m.role || '')},
      el('div', {class: 'role'}, (m.role || '?') + (m.name ? ' · ' + m.name : '') +
         (m.tool_call_id ? ' · ' + m.tool_call_id : '')),
      el('pre', {}, str(m.content)));
    for (const c of (m.tool_calls || [])) {
      const f = c.function || c;
      div.appendChild(el('div', {class: 'toolcall'}, el('span', {class: 'badge'}, 'tool call'),
        (f.name || '?') + ' ' + str(f.arguments) + (c.id ? '  [' + c.id + ']' : '')));
    }
    box.appendChild(div);
  }
  if (s.turns.some(t => (t.parse_errors || []).length || t.tool_events.length)) {
    box.appendChild(el('h4', {}, 'Turns'));
    for (const t of s.turns) {
      const d = el('div', {class: 'msg'}, el('div', {class: 'role'},
        'turn ' + t.index + ' · ' + str(t.finish_reason) + ' · ' + str(t.prompt_tokens) +
        ' prompt / ' + str(t.completion_tokens) + ' completion tokens'));
      for (const p of (t.parse_errors || [])) d.appendChild(el('div', {class: 'bad'},
        'parse error: ' + str(p.kind) + ': ' + str(p.message)));
      for (const e of t.tool_events) d.appendChild(el('div', {},
        el('span', {class: 'badge'}, e.error ? 'tool error' : 'tool result'),
        e.name + ' ' + str(e.arguments) + ' → ' +
        (e.error ? e.error + ': ' + str(e.error_message) : str(e.result))));
      box.appendChild(d);
    }
  }
  if (s.turns.some(t => promptOf(t) !== null)) {
    box.appendChild(el('h4', {}, 'What the model saw and said, turn by turn'));
    for (const t of s.turns) {
      const p = promptOf(t);
      const det = el('details', {class: 'msg'}, el('summary', {}, 'turn ' + t.index +
        ' prompt (' + (p === null ? 'not stored' : p.length + ' characters') + ')'),
        el('pre', {}, p === null ? '' : p));
      box.appendChild(det);
      box.appendChild(el('div', {class: 'msg assistant'}, el('div', {class: 'role'},
        'turn ' + t.index + ' reply'), el('pre', {}, str(t.raw))));
    }
  }
  if (s.retrieved.length) {
    box.appendChild(el('h4', {}, 'Retrieved chunks (' +
      s.retrieved.filter(c => c.gold).length + ' cover a gold passage)'));
    for (const c of s.retrieved) {
      box.appendChild(el('div', {class: 'chunk' + (c.gold ? ' gold' : '')},
        c.gold ? el('span', {class: 'badge gold'}, 'gold') : null,
        el('span', {class: 'badge'}, c.source + ' #' + str(c.rank)),
        c.doc + ' [' + c.start + ', ' + c.end + ')' +
        (c.score !== null && c.score !== undefined ? ' score ' + str(c.score) : ''),
        el('pre', {}, str(c.text))));
    }
  }
  if (s.gold_passages.length) row('gold passages', s.gold_passages.map(
    g => g.doc + ' [' + g.start + ', ' + g.end + ')').join('; '));
  return box;
}
function render(){
  const body = $('sample-body');
  body.textContent = '';
  const shown = DATA.filter(matches);
  $('sample-count').textContent = shown.length + ' of ' + DATA.length + ' samples';
  for (const s of shown.slice(0, limit)) {
    const tr = el('tr', {class: 'sample-row', 'data-index': String(DATA.indexOf(s))},
      el('td', {}, s.cell), el('td', {}, s.suite), el('td', {}, s.qid),
      el('td', {class: s.exact ? 'ok' : 'bad'}, s.exact ? '✓' : '✗'),
      el('td', {}, s.category + (s.subtype ? ' / ' + s.subtype : '')),
      el('td', {}, str(s.final_answer).slice(0, 120)));
    tr.addEventListener('click', () => {
      const next = tr.nextElementSibling;
      if (next && next.classList.contains('detail')) { next.remove(); return; }
      const td = el('td', {colspan: '6'}, transcript(s));
      tr.after(el('tr', {class: 'detail'}, td));
    });
    body.appendChild(tr);
  }
  $('more').style.display = shown.length > limit ? '' : 'none';
}
for (const id of ['f-cell', 'f-suite', 'f-category', 'f-result'])
  $(id).addEventListener('change', () => { limit = PAGE; render(); });
$('f-text').addEventListener('input', () => { limit = PAGE; render(); });
$('more').addEventListener('click', () => { limit += PAGE; render(); });
render();
})();
"""


def render_html(run: RunData, data: dict[str, Any], plots: dict[str, bytes] | None = None,
                max_samples: int | None = MAX_SAMPLES) -> str:
    """The whole page. At most `max_samples` samples go into the browser (in run order;
    None: all); the page says when some were left out. The tables always cover all."""
    k = data["k"]
    parts = []
    for metric, _, proportion in MAIN_METRICS:
        header, rows = accuracy_grid(data, metric, proportion)
        parts.append(f"<h3>{html.escape(metric_label(metric, k))}</h3>"
                     + _table_html(header, rows, "acc"))
    header, rows = category_grid(data)
    cat_html = _table_html(header, rows, "categories")
    header, rows = cost_grid(data)
    cost_html = _table_html(header, rows, "cost")
    noise_html = ""
    if any(r["repeats"] > 1 for r in data.get("repeats") or []):
        header, rows = repeats_grid(data)
        flips = "".join(f"<li>{html.escape(r['cell_id'])}: "
                        f"{html.escape(', '.join(r['flipping']))}</li>"
                        for r in data["repeats"] if r["flipping"])
        noise_html += ("<h3>Repeats</h3><p>pass^k: all of k repeats right; pass@k: at least "
                       "one; flip rate: questions whose repeats disagree; noise floor: the "
                       "smallest detectable difference in exact match.</p>"
                       + _table_html(header, rows, "repeats")
                       + (f"<p>Questions that flip:</p><ul>{flips}</ul>" if flips else ""))
    if data.get("audit"):
        header, rows = audit_grid(data)
        noise_html += ("<h3>Determinism audit</h3><p>Recorded turns generated again: share "
                       "with the same reply and the same verdict.</p>"
                       + _table_html(header, rows, "audit"))
    plot_html = "".join(
        f'<figure><img class="plot" alt="{html.escape(name)}" '
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
    title = f"evalpipe report: {data['run_id']}"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title><style>{CSS}</style></head>
<body>
<header><h1>{html.escape(title)}</h1>
<nav><a href="#accuracy">Accuracy</a><a href="#categories">Failure categories</a>
<a href="#cost">Cost</a><a href="#plots">Plots</a><a href="#browser">Samples</a></nav></header>
<main>
<section id="accuracy"><h2>Accuracy per cell and suite</h2>
<p>rate (hits/n) [95% interval]: Wilson for proportions, Student t for recall@{k}
(mean of per-question recall). Infrastructure errors are kept out of every rate.
Scorer version {html.escape(str(data.get('scorer_version')))}.</p>
{''.join(parts)}</section>
<section id="categories"><h2>Failure categories</h2>{cat_html}</section>
<section id="cost"><h2>Cost per sample (means)</h2>
<p>{html.escape(COST_NOTE)}</p>
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
<table id="samples"><thead><tr><th>cell</th><th>suite</th><th>question</th><th>exact</th>
<th>category</th><th>final answer</th></tr></thead><tbody id="sample-body"></tbody></table>
<button id="more" type="button">Show more</button>
</section></main>
<script type="application/json" id="sample-data">{_json_script(views)}</script>
<script type="application/json" id="prompt-data">{_json_script(prompt_blocks)}</script>
<script>{JS.replace("%PAGE%", str(PAGE_SIZE))}</script>
</body></html>
"""
