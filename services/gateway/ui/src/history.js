// The history table of a run, paged with `next` (GET /api/workflow/{id}/history).

import { api } from './api.js';
import { h, fmtTime, flash } from './util.js';

const LIMIT = 200;

export function historyTable(id, runId) {
  const tbody = h('tbody');
  const more = h('button', { hidden: true }, 'Load more');
  const wrap = h('div', { class: 'history' },
    h('table', { id: 'history' }, h('thead', {}, h('tr', {}, h('th', {}, '#'), h('th', {}, 'Time'), h('th', {}, 'Event'), h('th', {}, 'Attributes'))), tbody),
    more);
  let after = 0;
  const load = async () => {
    try {
      const page = await api.history(id, runId, after, LIMIT);
      for (const e of page.events || []) {
        const text = JSON.stringify(e.attributes);
        tbody.append(h('tr', { dataset: { event: e.type } },
          h('td', {}, e.eventId), h('td', {}, fmtTime(e.time)), h('td', {}, e.type),
          h('td', {}, text.length > 160
            ? h('details', {}, h('summary', {}, `${text.slice(0, 160)}…`), h('pre', { class: 'json' }, JSON.stringify(e.attributes, null, 2)))
            : h('code', {}, text))));
        after = e.eventId;
      }
      more.hidden = page.next === null || page.next === undefined;
      if (!more.hidden) after = page.next;
    } catch (e) {
      flash(`History: ${e.message}`);
    }
  };
  more.addEventListener('click', load);
  load();
  return wrap;
}
