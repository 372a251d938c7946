// One sample's transcript as DOM nodes, shared by the static HTML report and
// `evalpipe view`. Every piece of model, tool or file text goes into the page
// through text nodes (never innerHTML), and control and bidirectional-override
// characters are shown as escapes, so a reply cannot inject markup, colour the
// page with ANSI codes or reorder what is read.
(function (root) {
'use strict';
const HIDDEN = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;
function visible(text) {
  return String(text).replace(HIDDEN,
    c => '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0'));
}
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v; else e.setAttribute(k, v);
  }
  for (const kid of kids) {
    if (kid === null || kid === undefined) continue;
    e.appendChild(typeof kid === 'string' ? document.createTextNode(visible(kid)) : kid);
  }
  return e;
}
function str(v) {
  return (v === null || v === undefined) ? '' :
    (typeof v === 'string' ? v : JSON.stringify(v, null, 1));
}
function num(x, digits) {
  return (typeof x === 'number' && isFinite(x)) ? x.toLocaleString('en-US',
    {minimumFractionDigits: digits, maximumFractionDigits: digits}) : '-';
}
// A sample's cost in words: consumption first, then times (left out of cached replies).
function costText(c) {
  if (!c) return '';
  const parts = [num(c.prompt_tokens, 0) + ' prompt tokens',
                 num(c.completion_tokens, 0) + ' completion tokens',
                 num(c.turns, 0) + ' turn' + (c.turns === 1 ? '' : 's')];
  if (c.prefix_tokens) parts.push(num(c.prefix_tokens, 0) + ' from the shared prefix');
  if (c.cached_turns) parts.push(num(c.cached_turns, 0) + ' cached repl' +
                                 (c.cached_turns === 1 ? 'y' : 'ies') + ' (no times)');
  if (typeof c.prefill_compute_ms === 'number') parts.push('prefill compute ' +
                                                          num(c.prefill_compute_ms, 1) + ' ms');
  if (typeof c.ttft_ms === 'number') parts.push('first token ' + num(c.ttft_ms, 1) +
                                               ' ms under load');
  if (typeof c.wall_ms === 'number') parts.push('wall ' + num(c.wall_ms, 1) + ' ms under load');
  return parts.join(' · ');
}
function retrievalText(r) {
  if (!r) return '';
  return Object.entries(r).map(([k, v]) => k + ' ' +
    (typeof v === 'number' ? num(v, 3) : str(v))).join(' · ');
}
// s: a sample view (evalpipe._report.html.sample_view); blocks: prompt block id -> text.
function transcript(s, blocks) {
  const promptOf = t => (t.prompt_blocks && t.prompt_blocks.length &&
    t.prompt_blocks.every(b => b in blocks)) ? t.prompt_blocks.map(b => blocks[b]).join('') : null;
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
  if (s.retrieval) row('retrieval', retrievalText(s.retrieval));
  row('cost', costText(s.cost));
  box.appendChild(kv);
  box.appendChild(el('h4', {}, 'Transcript'));
  for (const m of s.messages) {
    const div = el('div', {class: 'msg ' + (['system', 'user', 'assistant', 'tool']
                                           .includes(m.role) ? m.role : '')},
      el('div', {class: 'role'}, str(m.role || '?') + (m.name ? ' · ' + str(m.name) : '') +
         (m.tool_call_id ? ' · ' + str(m.tool_call_id) : '')),
      el('pre', {}, str(m.content)));
    for (const c of (m.tool_calls || [])) {
      const f = c.function || c;
      div.appendChild(el('div', {class: 'toolcall'}, el('span', {class: 'badge'}, 'tool call'),
        str(f.name || '?') + ' ' + str(f.arguments) + (c.id ? '  [' + str(c.id) + ']' : '')));
    }
    box.appendChild(div);
  }
  if (s.turns.some(t => (t.parse_errors || []).length || t.tool_events.length)) {
    box.appendChild(el('h4', {}, 'Turns'));
    for (const t of s.turns) {
      const d = el('div', {class: 'msg'}, el('div', {class: 'role'},
        'turn ' + t.index + ' · ' + str(t.finish_reason) + ' · ' + str(t.prompt_tokens) +
        ' prompt / ' + str(t.completion_tokens) + ' completion tokens' +
        (t.cached ? ' · from the reply cache' : '')));
      for (const p of (t.parse_errors || [])) d.appendChild(el('div', {class: 'bad'},
        'parse error: ' + str(p.kind) + ': ' + str(p.message)));
      for (const e of t.tool_events) d.appendChild(el('div', {},
        el('span', {class: 'badge'}, e.error ? 'tool error' : 'tool result'),
        str(e.name) + ' ' + str(e.arguments) + ' → ' +
        (e.error ? str(e.error) + ': ' + str(e.error_message) : str(e.result))));
      box.appendChild(d);
    }
  }
  if (s.turns.some(t => promptOf(t) !== null)) {
    box.appendChild(el('h4', {}, 'What the model saw and said, turn by turn'));
    for (const t of s.turns) {
      const p = promptOf(t);
      box.appendChild(el('details', {class: 'msg'}, el('summary', {}, 'turn ' + t.index +
        ' prompt (' + (p === null ? 'not stored' : p.length + ' characters') + ')'),
        el('pre', {}, p === null ? '' : p)));
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
        el('span', {class: 'badge'}, str(c.source) + ' #' + str(c.rank)),
        str(c.doc) + ' [' + str(c.start) + ', ' + str(c.end) + ')' +
        (typeof c.score === 'number' ? ' score ' + num(c.score, 3) : ''),
        el('pre', {}, str(c.text))));
    }
  }
  if (s.gold_passages.length) row('gold passages', s.gold_passages.map(
    g => str(g.doc) + ' [' + str(g.start) + ', ' + str(g.end) + ')').join('; '));
  return box;
}
root.EvalpipeTranscript = {el, str, num, visible, transcript};
})(window);
