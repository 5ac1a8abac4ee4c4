// The timeline (Gantt) of a run's tasks: per node, queue wait (scheduled → start) and
// run time (start → end, or now while it runs), on one time axis.

import { h, fmtDuration } from './util.js';
import { STATUS_COLOURS } from './graph.js';

const SVG = 'http://www.w3.org/2000/svg';
function s(tag, attrs, ...kids) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  for (const c of kids) el.append(c);
  return el;
}

export function renderTimeline(graph, onSelect) {
  const now = Date.now();
  const rows = graph.nodes
    .filter((n) => n.scheduledTime)
    .sort((a, b) => a.scheduledTime - b.scheduledTime || (a.startTime || 0) - (b.startTime || 0));
  if (!rows.length) return h('p', { class: 'empty' }, 'No task has been scheduled yet.');
  const t0 = Math.min(...rows.map((n) => n.scheduledTime));
  const t1 = Math.max(...rows.map((n) => n.endTime || (n.startTime || n.scheduledTime) && (n.status && isEnded(n.status) ? (n.endTime || n.startTime || n.scheduledTime) : now)));
  const span = Math.max(t1 - t0, 1);
  const labelW = 180; const barW = 640; const rowH = 20; const top = 22;
  const x = (t) => labelW + ((t - t0) / span) * barW;
  const svg = s('svg', { width: labelW + barW + 10, height: top + rows.length * rowH + 4, class: 'gantt', role: 'img' });
  svg.append(s('text', { x: labelW, y: 12, class: 'axis' }, '0'));
  svg.append(s('text', { x: labelW + barW, y: 12, class: 'axis', 'text-anchor': 'end' }, fmtDuration(span)));
  rows.forEach((n, i) => {
    const y = top + i * rowH;
    const start = n.startTime || (isEnded(n.status) ? n.endTime : now);
    const end = n.endTime || now;
    const g = s('g', { class: 'row', 'data-node': n.id });
    g.addEventListener('click', () => onSelect(n.id));
    const wait = (start || now) - n.scheduledTime;
    const run = n.startTime ? end - n.startTime : 0;
    g.append(s('title', {}, `${n.id}: queue wait ${fmtDuration(wait)}, run ${fmtDuration(run)}`));
    g.append(s('text', { x: 4, y: y + 14, class: 'lbl' }, n.id.length > 26 ? `${n.id.slice(0, 25)}…` : n.id));
    g.append(s('rect', { x: x(n.scheduledTime), y: y + 4, width: Math.max(x(start || now) - x(n.scheduledTime), 1), height: 12, class: 'wait' }));
    if (n.startTime) {
      g.append(s('rect', { x: x(n.startTime), y: y + 2, width: Math.max(x(end) - x(n.startTime), 2), height: 16, fill: STATUS_COLOURS[n.status] || '#888' }));
    }
    svg.append(g);
  });
  return h('div', { class: 'gantt-wrap' },
    h('div', { class: 'legend' }, h('span', { class: 'key wait' }), ' queue wait (scheduled → start) ', h('span', { class: 'key run' }), ' run time (start → end)'),
    svg);
}

function isEnded(status) {
  return status && !['SCHEDULED', 'IN_PROGRESS'].includes(status);
}
