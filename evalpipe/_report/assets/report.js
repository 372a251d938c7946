// The static report's sample browser: every sample sits in the page, filtered here.
(function () {
'use strict';
const {el, str, transcript} = window.EvalpipeTranscript;
const DATA = JSON.parse(document.getElementById('sample-data').textContent);
const BLOCKS = JSON.parse(document.getElementById('prompt-data').textContent);
const PAGE = Number(document.getElementById('samples').dataset.page);
let limit = PAGE;
const $ = id => document.getElementById(id);
function fill(select, values) {
  for (const v of values) select.appendChild(el('option', {value: v}, v));
}
const uniq = key => [...new Set(DATA.map(s => s[key]))].sort();
fill($('f-cell'), uniq('cell')); fill($('f-suite'), uniq('suite'));
fill($('f-category'), uniq('category'));
function matches(s) {
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
function render() {
  const body = $('sample-body');
  body.textContent = '';
  const shown = DATA.filter(matches);
  $('sample-count').textContent = shown.length + ' of ' + DATA.length + ' samples';
  for (const s of shown.slice(0, limit)) {
    const tr = el('tr', {class: 'sample-row'},
      el('td', {}, s.cell), el('td', {}, s.suite), el('td', {}, s.qid),
      el('td', {class: s.exact ? 'ok' : 'bad'}, s.exact ? '✓' : '✗'),
      el('td', {}, s.category + (s.subtype ? ' / ' + s.subtype : '')),
      el('td', {}, str(s.final_answer).slice(0, 120)));
    tr.addEventListener('click', () => {
      const next = tr.nextElementSibling;
      if (next && next.classList.contains('detail')) { next.remove(); return; }
      tr.after(el('tr', {class: 'detail'}, el('td', {colspan: '6'}, transcript(s, BLOCKS))));
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
