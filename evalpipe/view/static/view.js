// evalpipe view: the runs of an outputs folder, one run, or two runs compared.
// Everything shown comes from the server's JSON API and enters the page as text
// nodes (EvalpipeTranscript.el); nothing is assigned to innerHTML.
(function () {
'use strict';
const {el, str, num, transcript} = window.EvalpipeTranscript;
const $ = id => document.getElementById(id);
const PAGE = 100;
const POLL_MS = 2000;
let poll = null;  // the refresh timer of the page shown
let generation = 0;  // bumped on every navigation: late answers of an old page are dropped

async function api(path) {
  const r = await fetch(path, {headers: {'Accept': 'application/json'}});
  const data = await r.json();
  if (!r.ok) throw new Error(data.error || r.statusText);
  return data;
}
function qs(params) {
  return Object.entries(params).filter(([, v]) => v !== '' && v !== undefined && v !== null)
    .map(([k, v]) => encodeURIComponent(k) + '=' + encodeURIComponent(v)).join('&');
}
function pct(rate) { return (typeof rate === 'number') ? (100 * rate).toFixed(1) + '%' : '-'; }
// Markdown `code` spans of a note as <code>, the rest as text.
function markdown(text, cls) {
  const p = el('p', {class: cls || 'warn'});
  String(text).split('`').forEach((part, i) => p.appendChild(
    i % 2 ? el('code', {}, part) : document.createTextNode(part)));
  return p;
}
function table(header, rows, cls) {
  return el('div', {class: 'scroll'}, el('table', {class: cls || ''},
    el('thead', {}, el('tr', {}, ...header.map(h => el('th', {}, str(h))))),
    el('tbody', {}, ...rows.map(r => el('tr', {}, ...r.map(c =>
      c instanceof Node ? el('td', {}, c) : el('td', {}, str(c))))))));
}
function section(title, ...kids) {
  return el('section', {}, el('h2', {}, title), ...kids);
}
function setHeader(title, facts) {
  $('title').textContent = title ? '· ' + title : '';
  $('facts').textContent = facts || '';
}
function factsLine(run) {
  const commit = run.commit ? run.commit.slice(0, 12) +
    (run.commit.endsWith('-dirty') ? '-dirty' : '') : '';
  return [['config', [run.config_name, run.config_source ? '(' + run.config_source + ')' : '']
            .filter(Boolean).join(' ')],
          ['models', (run.models || []).join(', ')],
          ['started', (run.started || '').replace('T', ' ')], ['commit', commit],
          ['status', run.status]]
    .filter(([, v]) => v).map(([k, v]) => k + ': ' + v).join(' · ');
}
function show(...kids) {
  const main = $('main');
  main.textContent = '';
  for (const k of kids) main.appendChild(k);
}
function fail(err) { show(el('p', {class: 'error'}, String(err.message || err))); }
function schedule(fn) {
  clearTimeout(poll);
  const mine = generation;
  poll = setTimeout(() => { if (mine === generation) fn(); }, POLL_MS);
}

// -- the runs ------------------------------------------------------------------------------
async function runsPage() {
  const mine = generation;
  const data = await api('/api/runs');
  if (mine !== generation) return;
  setHeader('', data.root);
  const picked = new Set();
  const go = el('button', {type: 'button', id: 'compare', disabled: 'disabled'},
                'Compare the two selected runs');
  go.addEventListener('click', () => {
    const chosen = data.runs.filter(r => picked.has(r.id))
      .sort((x, y) => (x.started || '').localeCompare(y.started || ''));
    location.hash = '#/compare/' + encodeURIComponent(chosen[0].id) + '/' +
      encodeURIComponent(chosen[1].id);
  });
  const rows = data.runs.map(r => {
    const box = el('input', {type: 'checkbox', 'data-run': r.id});
    box.addEventListener('change', () => {
      if (box.checked) picked.add(r.id); else picked.delete(r.id);
      go.disabled = picked.size !== 2;
    });
    const e = r.exact;
    return [box, el('span', {class: 'status-' + r.status}, r.status + (r.latest ? ' (latest)' : '')),
      el('a', {href: '#/run/' + encodeURIComponent(r.id)}, r.id), str(r.config_name),
      (r.models || []).join(', '), (r.started || '').replace('T', ' '),
      (r.commit || '').slice(0, 12), num(r.samples, 0),
      e ? pct(e.rate) + ' (' + e.hits + '/' + e.n + ', ' + e.cells + ' cells)' : '-',
      r.best ? pct(r.best.rate) + ' ' + r.best.cell_id : '-'];
  });
  const damaged = data.damaged || [];
  show(...(damaged.length ? [section('Runs that cannot be shown (' + damaged.length + ')',
    el('div', {id: 'damaged'}, ...damaged.map(d =>
      el('p', {class: 'warn'}, 'warning: ' + d.id + ': ' + d.problem))))] : []),
    section('Runs (' + data.runs.length + ')',
    el('div', {class: 'toolbar'}, go, el('span', {class: 'muted'},
       'A is the older of the two, B the newer; differences are B - A.')),
    table(['', 'status', 'run', 'config', 'models', 'started', 'commit', 'samples',
           'exact match (all cells)', 'best cell'], rows, 'runs')));
  if (data.runs.some(r => r.status === 'running')) schedule(() => runsPage().catch(fail));
}

// The report's tables, formatted by the server as every report formats them.
function tablesSection(run) {
  const box = el('section', {id: 'tables'}, el('h2', {}, 'Tables'));
  for (const t of run.tables) {
    box.appendChild(el('h3', {}, t.title));
    if (t.id === 'cost') box.appendChild(markdown(run.cost_note, 'note'));
    box.appendChild(table(t.header, t.rows, t.id));
  }
  if (run.noise) box.appendChild(markdown(run.noise, 'note'));
  return box;
}

// -- one run -------------------------------------------------------------------------------
async function runPage(id, params) {
  const mine = generation;
  const run = await api('/api/runs/' + encodeURIComponent(id));
  if (mine !== generation) return;
  setHeader(id, factsLine(run.run));
  const state = {offset: 0, version: run.version, cell: params.cell || '',
                 suite: params.suite || '', category: params.category || '',
                 result: params.result || '', q: params.q || ''};
  const progress = run.run.status === 'running' ?
    el('p', {id: 'progress', class: 'status-running'}, 'running: ' + num(run.samples, 0) +
       (run.expected ? ' of ' + num(run.expected, 0) : '') + ' samples written so far') : null;
  const tables = tablesSection(run);
  const plots = section('Plots', ...(run.plots.length ? run.plots.map(name =>
    el('figure', {}, el('img', {class: 'plot', alt: name, src: '/api/runs/' +
       encodeURIComponent(id) + '/plots/' + encodeURIComponent(name) + '.png?v=' + run.version})))
    : [el('p', {}, 'No plots (matplotlib not installed, or nothing to plot).')]));
  const select = (name, values) => {
    const s = el('select', {id: 'f-' + name}, el('option', {value: ''}, 'all'),
      ...values.map(v => el('option', {value: v}, v)));
    s.value = state[name];
    s.addEventListener('change', () => { state[name] = s.value; state.offset = 0; load(); });
    return el('label', {}, name + ' ', s);
  };
  const result = select('result', ['correct', 'wrong']);
  const text = el('input', {id: 'f-text', type: 'search', placeholder: 'id, question, answer'});
  text.value = state.q;
  let typing = null;
  text.addEventListener('input', () => {
    clearTimeout(typing);
    typing = setTimeout(() => { state.q = text.value; state.offset = 0; load(); }, 250);
  });
  const count = el('span', {id: 'sample-count'});
  const prev = el('button', {type: 'button', id: 'prev'}, '← previous');
  const next = el('button', {type: 'button', id: 'next'}, 'next →');
  prev.addEventListener('click', () => { state.offset = Math.max(0, state.offset - PAGE); load(); });
  next.addEventListener('click', () => { state.offset += PAGE; load(); });
  const body = el('tbody', {id: 'sample-body'});
  const browser = section('Samples',
    el('div', {class: 'filters'}, select('cell', run.filters.cell),
       select('suite', run.filters.suite), select('category', run.filters.category), result,
       el('label', {}, 'search ', text)),
    el('div', {class: 'pager'}, prev, next, count),
    el('table', {id: 'samples'}, el('colgroup', {}, ...['cell', 'suite', 'qid', 'exact',
      'category', 'answer'].map(c => el('col', {class: 'w-' + c}))),
      el('thead', {}, el('tr', {}, ...['cell', 'suite', 'question', 'exact', 'category',
                                      'final answer'].map(h => el('th', {}, h)))), body));
  show(...[progress, ...run.notes.map(markdown), tables, plots, browser].filter(Boolean));
  const open = new Set();  // samples whose transcript is open stay open across refreshes

  async function load() {
    const page = await api('/api/runs/' + encodeURIComponent(id) + '/samples?' + qs({
      cell: state.cell, suite: state.suite, category: state.category, result: state.result,
      q: state.q, offset: state.offset, limit: PAGE}));
    if (mine !== generation) return;
    body.textContent = '';
    const last = Math.min(page.matched, state.offset + page.rows.length);
    count.textContent = (page.matched ? (state.offset + 1) + '–' + last + ' of ' : '') +
      page.matched + ' matching of ' + page.total + ' samples';
    prev.disabled = state.offset === 0;
    next.disabled = state.offset + PAGE >= page.matched;
    for (const r of page.rows) {
      const tr = el('tr', {class: 'sample-row', 'data-index': String(r.index)},
        el('td', {}, r.cell), el('td', {}, r.suite),
        el('td', {}, r.qid + (r.repeat ? ' #' + (r.repeat + 1) : '')),
        el('td', {class: r.exact ? 'ok' : 'bad'}, r.infra ? 'infra' : (r.exact ? '✓' : '✗')),
        el('td', {}, r.category + (r.subtype ? ' / ' + r.subtype : '')),
        el('td', {}, str(r.final_answer).slice(0, 120)));
      const toggle = async () => {
        const after = tr.nextElementSibling;
        if (after && after.classList.contains('detail')) {
          after.remove(); open.delete(r.index); return;
        }
        open.add(r.index);
        const s = await api('/api/runs/' + encodeURIComponent(id) + '/samples/' + r.index);
        tr.after(el('tr', {class: 'detail'}, el('td', {colspan: '6'},
                                                transcript(s.sample, s.blocks))));
      };
      tr.addEventListener('click', () => toggle().catch(fail));
      body.appendChild(tr);
      if (open.has(r.index)) toggle().catch(fail);
    }
  }
  await load();
  if (run.run.status === 'running') {
    const refresh = async () => {
      const now = await api('/api/runs/' + encodeURIComponent(id));
      if (mine !== generation) return;
      if (now.run.status !== 'running' || now.notes.length !== run.notes.length) {
        runPage(id, state).catch(fail);  // finished (or news): the whole page again
        return;
      }
      if (now.version !== state.version) {
        state.version = now.version;
        $('progress').textContent = 'running: ' + num(now.samples, 0) +
          (now.expected ? ' of ' + num(now.expected, 0) : '') + ' samples written so far';
        $('tables').replaceWith(tablesSection(now));
        await load();
      }
      schedule(() => refresh().catch(fail));
    };
    schedule(() => refresh().catch(fail));
  }
}

// -- two runs ------------------------------------------------------------------------------
async function comparePage(a, b) {
  const mine = generation;
  const c = await api('/api/compare?' + qs({a: a, b: b}));
  if (mine !== generation) return;
  setHeader('A: ' + a + '  →  B: ' + b, '');
  const runLink = (run, label) => el('p', {}, el('b', {}, label + ': '),
    el('a', {href: '#/run/' + encodeURIComponent(run.id)}, run.id), ' · ' + factsLine(run));
  const parts = [section('Runs', runLink(c.a, 'A (baseline)'), runLink(c.b, 'B'),
    el('p', {}, el('a', {href: '#/compare/' + encodeURIComponent(b) + '/' +
                         encodeURIComponent(a)}, 'swap A and B')),
    el('p', {id: 'verdict', class: c.verdict.includes('REGRESSION') ? 'bad' : 'ok'}, c.verdict),
    el('p', {class: 'muted'}, 'Paired over ' + c.questions + ' shared questions; B - A in ' +
       'points with a paired bootstrap 95% interval (docs/reports.md, "evalpipe compare").'),
    ...c.warnings.map(w => el('p', {class: 'warn'}, 'warning: ' + w)))];
  const sample = (run, cell, qid) => el('a', {href: '#/run/' + encodeURIComponent(run) + '?' +
    qs({cell: cell, q: qid})}, qid);
  const costs = Object.fromEntries(c.cost.map(x => [x.b_cell, x.fields]));
  for (const cell of c.cells) {
    const flips = (label, ids) => el('p', {class: 'flips'}, el('b', {}, label + ' (' +
      ids.length + '): '), ...(ids.length ? ids.map(q => cell.matched_by === 'pooled' ?
      el('span', {}, q + ' ') : sample(b, cell.b_cell, q)) : [el('span', {}, '-')]));
    const kids = [el('p', {class: 'muted'}, 'matched by ' + cell.matched_by + ', ' +
                      cell.pairs + ' pairs'),
      table(cell.header, cell.rows, 'metrics'),
      flips('right → wrong', cell.right_to_wrong), flips('wrong → right', cell.wrong_to_right)];
    if (cell.category_moves.length) {
      kids.push(el('h3', {}, 'Category moves (' + cell.unchanged + ' unchanged)'),
                table(['from', 'to', 'count'], cell.category_moves, 'moves'));
    }
    const cost = costs[cell.b_cell];
    if (cost && cell.matched_by !== 'pooled') {
      kids.push(el('h3', {}, 'Cost per sample (means)'), table(['', 'A', 'B', 'B / A'],
        cost.map(f => [f.label, num(f.a, f.field.includes('tokens') ? 0 : 1),
                       num(f.b, f.field.includes('tokens') ? 0 : 1),
                       f.ratio === null ? '-' : num(f.ratio, 2) + 'x']), 'cost-changes'));
    }
    parts.push(section(cell.title, ...kids));
  }
  show(...parts);
}

function route() {
  generation += 1;
  clearTimeout(poll);
  const [path, query] = location.hash.replace(/^#/, '').split('?');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  const params = Object.fromEntries(new URLSearchParams(query || ''));
  window.scrollTo(0, 0);
  if (parts[0] === 'run' && parts.length === 2) runPage(parts[1], params).catch(fail);
  else if (parts[0] === 'compare' && parts.length === 3) comparePage(parts[1], parts[2]).catch(fail);
  else runsPage().catch(fail);
}
window.addEventListener('hashchange', route);
route();
})();
