// The list of runs: filters (status, definition, start time, free text) over
// GET /api/workflow/search, paged. The filters live in the URL (#/?status=...).

import { api } from './api.js';
import { h, fmtTime, toMs, fmtDuration, fmtBytes, statusBadge, flash } from './util.js';

export const STATUSES = ['RUNNING', 'PAUSED', 'COMPLETED', 'FAILED', 'TIMED_OUT', 'TERMINATED'];
const PAGE = 25;

/** Conductor's query subset from the filters. */
export function buildQuery(f) {
  const parts = [];
  if (f.status && f.status.length) parts.push(`status IN (${f.status.join(',')})`);
  if (f.type) parts.push(`workflowType = "${f.type.replace(/"/g, "")}"`);
  const from = f.from ? Date.parse(f.from) : NaN;
  const to = f.to ? Date.parse(f.to) : NaN;
  if (!Number.isNaN(from)) parts.push(`startTime > ${from}`);
  if (!Number.isNaN(to)) parts.push(`startTime < ${to}`);
  return parts.join(' AND ');
}

function readFilters(params) {
  return {
    status: (params.get('status') || '').split(',').filter(Boolean),
    type: params.get('type') || '',
    from: params.get('from') || '',
    to: params.get('to') || '',
    text: params.get('text') || '',
    start: Number(params.get('start') || 0),
  };
}

function writeFilters(f) {
  const p = new URLSearchParams();
  if (f.status.length) p.set('status', f.status.join(','));
  for (const k of ['type', 'from', 'to', 'text']) if (f[k]) p.set(k, f[k]);
  if (f.start) p.set('start', String(f.start));
  const s = p.toString();
  location.hash = s ? `#/?${s}` : '#/';
}

export async function renderList(root, params) {
  const f = readFilters(params);
  const statusBoxes = STATUSES.map((s) =>
    h('label', { class: 'chk' },
      h('input', { type: 'checkbox', name: 'status', value: s, checked: f.status.includes(s) }), s));
  const typeSelect = h('select', { name: 'type', id: 'filter-type' }, h('option', { value: '' }, 'any definition'));
  const form = h('form', { class: 'filters', id: 'filters', onsubmit: (e) => {
    e.preventDefault();
    const fd = new FormData(form);
    writeFilters({
      status: fd.getAll('status'),
      type: fd.get('type') || '',
      from: fd.get('from') || '',
      to: fd.get('to') || '',
      text: (fd.get('text') || '').trim(),
      start: 0,
    });
  } },
  h('fieldset', {}, h('legend', {}, 'Status'), statusBoxes),
  h('label', {}, 'Definition ', typeSelect),
  h('label', {}, 'Started after ', h('input', { type: 'datetime-local', name: 'from', value: f.from })),
  h('label', {}, 'before ', h('input', { type: 'datetime-local', name: 'to', value: f.to })),
  h('label', {}, 'Id or correlation ', h('input', { type: 'search', name: 'text', value: f.text, placeholder: 'workflowId / correlationId' })),
  h('button', { type: 'submit' }, 'Search'));

  const tbody = h('tbody', {}, h('tr', {}, h('td', { colspan: 7 }, 'Loading…')));
  const pager = h('div', { class: 'pager' });
  const openBox = h('form', { class: 'open', onsubmit: (e) => {
    e.preventDefault();
    const id = new FormData(e.target).get('id').trim();
    if (id) location.hash = `#/run/${encodeURIComponent(id)}`;
  } }, h('input', { name: 'id', placeholder: 'open a workflow id' }), h('button', {}, 'Open'));

  const stats = h('div', { id: 'stats', class: 'stats' });
  if (f.type) {
    api.stats(f.type).then((st) => stats.replaceChildren(statsView(st)))
      .catch((e) => stats.replaceChildren(h('p', { class: 'empty' }, `Statistics of ${f.type}: ${e.message}`)));
  }

  root.replaceChildren(
    h('section', {}, h('h1', {}, 'Runs'), openBox, form, stats,
      h('table', { class: 'runs', id: 'runs' },
        h('thead', {}, h('tr', {}, ['Workflow id', 'Definition', 'Status', 'Started', 'Ended', 'Duration', 'Correlation id'].map((c) => h('th', {}, c)))),
        tbody),
      pager));

  api.definitions().then((defs) => {
    const names = [...new Set((defs || []).map((d) => d.name))].sort();
    for (const n of names) typeSelect.append(h('option', { value: n, selected: n === f.type }, n));
  }).catch(() => { /* the filter still takes the current value */ });
  if (f.type && ![...typeSelect.options].some((o) => o.value === f.type)) {
    typeSelect.append(h('option', { value: f.type, selected: true }, f.type));
  }

  try {
    const res = await api.search({ start: f.start, size: PAGE, query: buildQuery(f), freeText: f.text || undefined });
    const rows = res.results || [];
    tbody.replaceChildren(...(rows.length ? rows.map(runRow)
      : [h('tr', {}, h('td', { colspan: 7, class: 'empty' }, 'No runs match.'))]));
    const total = res.totalHits ?? rows.length;
    pager.replaceChildren(
      h('span', {}, `${total ? f.start + 1 : 0}–${f.start + rows.length} of ${total}`),
      h('button', { disabled: f.start === 0, onclick: () => writeFilters({ ...f, start: Math.max(0, f.start - PAGE) }) }, '‹ Newer'),
      h('button', { disabled: f.start + rows.length >= total, onclick: () => writeFilters({ ...f, start: f.start + PAGE }) }, 'Older ›'));
  } catch (e) {
    tbody.replaceChildren(h('tr', {}, h('td', { colspan: 7, class: 'empty' }, `Search failed: ${e.message}`)));
    flash(`Search failed: ${e.message}`);
  }
}

function runRow(r) {
  const start = toMs(r.startTime);
  const end = toMs(r.endTime);
  const dur = start ? (end || Date.now()) - start : null;
  return h('tr', { dataset: { workflowId: r.workflowId, status: r.status } },
    h('td', {}, h('a', { href: `#/run/${encodeURIComponent(r.workflowId)}`, class: 'run-link' }, r.workflowId)),
    h('td', {}, `${r.workflowType ?? r.workflowName ?? ''} v${r.version ?? r.workflowVersion ?? ''}`),
    h('td', {}, statusBadge(r.status)),
    h('td', {}, fmtTime(r.startTime)),
    h('td', {}, fmtTime(r.endTime)),
    h('td', {}, fmtDuration(end && r.executionTime ? r.executionTime : dur)),
    h('td', {}, r.correlationId || ''));
}

/** GET /api/metadata/workflow/{name}/stats: recent runs of one definition. */
function statsView(st) {
  const pct = (p, fmt) => (p ? `p50 ${fmt(p.p50)} · p95 ${fmt(p.p95)} · p99 ${fmt(p.p99)}` : '—');
  return h('div', { dataset: { count: st.count } },
    h('h2', {}, `${st.name}: ${st.count} run${st.count === 1 ? '' : 's'} since ${fmtTime(st.since)}`),
    h('p', {}, Object.entries(st.byStatus || {}).map(([k, v]) => h('span', { class: 'stat' }, statusBadge(k), ` ${v} `))),
    h('dl', {},
      h('dt', {}, 'duration'), h('dd', {}, pct(st.durationMs, fmtDuration)),
      h('dt', {}, 'input size'), h('dd', {}, pct(st.inputBytes, fmtBytes)),
      h('dt', {}, 'output size'), h('dd', {}, pct(st.outputBytes, fmtBytes))));
}
