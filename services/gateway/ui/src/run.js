// A run's page: header and run chain, operation buttons and who operated on the run,
// the flowchart with the task detail panel, the node list, the timeline and the
// history. Polls while the run can still change (RUNNING, PAUSED).

import { api } from './api.js';
import { h, fmtTime, toMs, fmtDuration, fmtBytes, statusBadge, json, flash } from './util.js';
import { Flowchart } from './graph.js';
import { renderTimeline } from './timeline.js';
import { historyTable } from './history.js';
import { opButton } from './ops.js';

const POLL_MS = 1500;
const LIVE = ['RUNNING', 'PAUSED'];

export function renderRun(root, id, params) {
  const page = new RunPage(root, id, params.get('run') || null);
  page.start();
  return page;
}

class RunPage {
  constructor(root, id, runId) {
    this.root = root;
    this.id = id;
    this.wantedRun = runId;
    this.selected = null;
    this.version = null;
    this.timer = null;
    this.disposed = false;

    this.header = h('div', { class: 'run-header', id: 'run-header' });
    this.chain = h('div', { class: 'chain', id: 'run-chain' });
    this.opsBar = h('div', { class: 'ops', id: 'run-ops' });
    this.operations = h('div', { class: 'operations', id: 'operations', hidden: true });
    this.auditText = null;
    this.graphBox = h('div', { class: 'graph', id: 'graph' });
    this.detail = h('aside', { class: 'detail', id: 'task-detail' }, h('p', { class: 'empty' }, 'Select a task in the flowchart.'));
    this.nodeList = h('div', { id: 'node-list' });
    this.timeline = h('div', { id: 'timeline' });
    this.history = h('div', { id: 'history-box' });
    const zoom = h('div', { class: 'zoom' },
      h('button', { title: 'zoom in', onclick: () => this.chart.zoom(1.25) }, '+'),
      h('button', { title: 'zoom out', onclick: () => this.chart.zoom(0.8) }, '−'),
      h('button', { title: 'fit', onclick: () => this.chart.fit() }, 'fit'));
    root.replaceChildren(h('section', { class: 'run' },
      h('p', {}, h('a', { href: '#/' }, '‹ all runs')),
      this.header, this.chain, this.opsBar, this.operations,
      h('div', { class: 'flow' }, h('div', { class: 'graph-wrap' }, zoom, this.graphBox), this.detail),
      h('h2', {}, 'Tasks'), this.nodeList,
      h('h2', {}, 'Timeline'), this.timeline,
      h('h2', {}, 'History'), this.history));
    this.chart = new Flowchart(this.graphBox, (nodeId) => this.select(nodeId));
    window.weftUi = { page: this, chart: this.chart };
  }

  start() { this.refresh(); }

  dispose() {
    this.disposed = true;
    clearTimeout(this.timer);
    this.chart.destroy();
  }

  async refresh() {
    clearTimeout(this.timer);
    if (this.disposed) return;
    try {
      const [wf, runs] = await Promise.all([api.workflow(this.id), api.runs(this.id).catch(() => [])]);
      if (this.disposed) return;
      this.wf = wf;
      this.runs = Array.isArray(runs) ? runs : [];
      const current = this.runs.find((r) => r.current) || null;
      this.runId = this.wantedRun || wf.runId || (current && current.runId);
      this.isCurrent = !this.wantedRun || this.wantedRun === (wf.runId || (current && current.runId));
      const [graph, config] = await Promise.all([
        api.graph(this.id, this.wantedRun || undefined),
        this.config || api.uiConfig().catch(() => ({})),
      ]);
      if (this.disposed) return;
      this.config = config;
      this.graph = graph;
      this.renderHeader();
      this.renderChain();
      this.renderOps();
      this.chart.update(graph);
      this.renderNodes();
      this.timeline.replaceChildren(renderTimeline(graph, (nid) => this.select(nid)));
      if (graph.version !== this.version) {
        this.version = graph.version;
        this.history.replaceChildren(historyTable(this.id, graph.runId || this.runId));
        if (this.selected) this.select(this.selected);
      }
      this.root.dataset.runStatus = this.status();
      this.root.dataset.runId = graph.runId || this.runId || '';
      await this.loadAudit();
    } catch (e) {
      // Closed meanwhile (e.g. for the sign-in form, after a 401): nothing to say.
      if (this.disposed) return;
      flash(`Loading ${this.id}: ${e.message}`);
    }
    if (LIVE.includes(this.status()) && !this.disposed) {
      this.timer = setTimeout(() => this.refresh(), POLL_MS);
    }
  }

  /**
   * Who operated on the run (GET /api/workflow/{id}/audit, newest first). Hidden when
   * the token may not read it (403) or the gateway keeps no audit (404).
   */
  async loadAudit() {
    let entries;
    try {
      entries = await api.audit(this.id);
    } catch (e) {
      if (this.disposed) return;
      this.auditText = null;
      if (e.status === 403 || e.status === 404) {
        this.operations.hidden = true;
        this.operations.replaceChildren();
      } else {
        this.operations.hidden = false;
        this.operations.replaceChildren(h('h3', {}, 'Operations'), h('p', { class: 'empty' }, `Operations: ${e.message}`));
      }
      return;
    }
    if (this.disposed) return;
    const list = Array.isArray(entries) ? entries : [];
    // Polled with the run: redrawn only when it changed.
    const text = JSON.stringify(list);
    if (text === this.auditText) return;
    this.auditText = text;
    this.operations.hidden = false;
    this.operations.replaceChildren(h('h3', {}, 'Operations'), list.length
      ? h('table', { id: 'audit' },
        h('thead', {}, h('tr', {}, ['When', 'Who', 'What', 'Reason'].map((c) => h('th', {}, c)))),
        h('tbody', {}, list.map((a) => h('tr', { dataset: { action: a.action || '', token: a.token || '', status: String(a.status ?? '') } },
          h('td', {}, fmtTime(a.at)),
          h('td', { class: a.token ? 'who' : 'who anonymous' }, a.token || 'no token'),
          h('td', { class: 'what' }, a.action || '', a.target && a.target !== this.id ? ` · ${a.target}` : '',
            // Refusals are recorded too (an investigation wants them): said so.
            a.status && (a.status < 200 || a.status >= 300) ? h('span', { class: 'refused' }, ` (refused: ${a.status})`) : ''),
          h('td', { class: 'op-reason' }, a.reason || '')))))
      : h('p', { class: 'empty' }, 'None yet.'));
  }

  status() {
    if (this.isCurrent) return this.wf ? this.wf.status : '';
    // Before the first load (or after it failed) there are no runs yet.
    const r = (this.runs || []).find((x) => x.runId === this.runId);
    return r ? r.status : '';
  }

  renderHeader() {
    const wf = this.wf;
    const run = this.runs.find((x) => x.runId === this.runId) || {};
    const start = this.isCurrent ? wf.startTime : run.startTime;
    const end = this.isCurrent ? wf.endTime : run.endTime;
    const s = toMs(start);
    const e = toMs(end);
    this.header.replaceChildren(
      h('h1', {}, wf.workflowId),
      h('p', {},
        `${wf.workflowName} v${wf.workflowVersion} · `, statusBadge(this.status()), ' ',
        this.isCurrent && wf.subStatus ? h('span', { class: 'sub' }, wf.subStatus) : '',
        LIVE.includes(this.status()) ? h('span', { class: 'live' }, ' ● live') : ''),
      h('dl', {},
        h('dt', {}, 'run'), h('dd', { id: 'run-id' }, this.runId || ''),
        h('dt', {}, 'started'), h('dd', {}, fmtTime(start)),
        h('dt', {}, 'ended'), h('dd', {}, fmtTime(end)),
        h('dt', {}, 'duration'), h('dd', {}, s ? fmtDuration((e || Date.now()) - s) : ''),
        wf.correlationId ? [h('dt', {}, 'correlation'), h('dd', {}, wf.correlationId)] : [],
        this.traceLink(),
        this.isCurrent && wf.reasonForIncompletion ? [h('dt', {}, 'reason'), h('dd', { class: 'reason' }, wf.reasonForIncompletion)] : [],
        wf.parentWorkflowId ? [h('dt', {}, 'parent'), h('dd', {}, h('a', { href: `#/run/${encodeURIComponent(wf.parentWorkflowId)}` }, wf.parentWorkflowId))] : [],
        this.keptSignals()),
      this.isCurrent ? h('details', {}, h('summary', {}, 'input / output / variables'),
        h('div', { class: 'io' }, h('div', {}, h('h3', {}, 'input'), json(wf.input)), h('div', {}, h('h3', {}, 'output'), json(wf.output)), h('div', {}, h('h3', {}, 'variables'), json(wf.variables)))) : '');
  }

  /**
   * Signals the run keeps for a task it has not reached (docs/task-updates.md); once it
   * ended, those no task consumed.
   */
  keptSignals() {
    const kept = this.isCurrent ? this.wf.pendingSignals || [] : [];
    if (!kept.length) return [];
    const label = LIVE.includes(this.status()) ? 'signals kept' : 'signals unused';
    return [h('dt', {}, label), h('dd', { id: 'pending-signals' },
      kept.map((sig) => h('div', {}, h('code', {}, sig.name), ' ', JSON.stringify(sig.payload))))];
  }

  /** The run's trace id, linked to the trace viewer when the gateway names one. */
  traceLink() {
    const traceId = this.graph && this.graph.traceId;
    if (!traceId) return [];
    const template = this.config && this.config.traceUrl;
    const shown = template
      ? h('a', { href: template.replace('{traceId}', encodeURIComponent(traceId)), target: '_blank', rel: 'noopener' }, traceId)
      : traceId;
    return [h('dt', {}, 'trace'), h('dd', { id: 'trace-id' }, shown)];
  }

  renderChain() {
    if (this.runs.length <= 1) { this.chain.replaceChildren(); return; }
    this.chain.replaceChildren(h('h3', {}, 'Runs of this workflow'), h('ol', {}, this.runs.map((r) => h('li', {
      dataset: { runId: r.runId, current: r.current ? 'true' : 'false', status: r.status },
      class: r.runId === this.runId ? 'shown' : '',
    },
    h('a', { href: r.current ? `#/run/${encodeURIComponent(this.id)}` : `#/run/${encodeURIComponent(this.id)}?run=${r.runId}` }, r.runId.slice(0, 8)),
    ' ', statusBadge(r.status), ' ', fmtTime(r.startTime),
    r.resetFrom ? ` · reset from ${r.resetFrom.runId.slice(0, 8)} at ${r.resetFrom.taskRef}` : '',
    r.current ? ' (current)' : ''))));
  }

  renderOps() {
    const st = this.status();
    const id = this.id;
    const ended = !LIVE.includes(st);
    const refresh = () => this.refresh();
    const off = !this.isCurrent;
    this.opsBar.replaceChildren(
      opButton('Terminate', { class: 'danger', disabled: off || ended }, {
        title: 'Terminate', text: `Terminate ${id}? Running tasks are told to stop.`,
        input: 'reason (JSON string)', inputValue: '"terminated from the web UI"',
        call: (reason) => api.terminate(id, typeof reason === 'string' ? reason : undefined), done: refresh }),
      opButton('Pause', { disabled: off || st !== 'RUNNING' }, {
        title: 'Pause', text: `Pause ${id}? Nothing new is scheduled until it is resumed.`, call: () => api.pause(id), done: refresh }),
      opButton('Resume', { disabled: off || st !== 'PAUSED' }, {
        title: 'Resume', text: `Resume ${id}?`, call: () => api.resume(id), done: refresh }),
      opButton('Retry', { disabled: off }, {
        title: 'Retry', text: `Retry ${id} from its last failed task? A new run continues from there.`, call: () => api.retry(id), done: () => this.toCurrent() }),
      opButton('Restart', { disabled: off || !ended }, {
        title: 'Restart', text: `Restart ${id} from its first task? A new run starts.`, call: () => api.restart(id), done: () => this.toCurrent() }),
      off ? h('span', { class: 'note' }, 'An earlier run: operations apply to the current run.') : '');
  }

  toCurrent() {
    if (location.hash === `#/run/${encodeURIComponent(this.id)}`) {
      this.version = null;
      this.refresh();
    } else {
      location.hash = `#/run/${encodeURIComponent(this.id)}`;
    }
  }

  renderNodes() {
    const rows = this.graph.nodes.map((n) => h('tr', {
      dataset: { node: n.id, status: n.status || 'NOT_REACHED', type: n.type },
      class: n.id === this.selected ? 'selected' : '',
      onclick: () => this.select(n.id),
    },
    h('td', {}, h('a', { href: 'javascript:void 0', class: 'node-link' }, n.id)), h('td', {}, n.type), h('td', {}, statusBadge(n.status)),
    h('td', {}, n.iteration || ''), h('td', {}, n.attempt ?? ''),
    h('td', {}, n.startTime && n.scheduledTime ? fmtDuration(n.startTime - n.scheduledTime) : ''),
    h('td', {}, n.startTime ? fmtDuration((n.endTime || Date.now()) - n.startTime) : '')));
    this.nodeList.replaceChildren(h('table', { id: 'nodes' },
      h('thead', {}, h('tr', {}, ['Task', 'Type', 'Status', 'Iteration', 'Attempt', 'Queue wait', 'Run time'].map((c) => h('th', {}, c)))),
      h('tbody', {}, rows)));
  }

  async select(nodeId) {
    this.selected = nodeId;
    this.chart.select(nodeId);
    for (const tr of this.nodeList.querySelectorAll('tr[data-node]')) tr.classList.toggle('selected', tr.dataset.node === nodeId);
    const n = this.graph && this.graph.nodes.find((x) => x.id === nodeId);
    if (!n) return;
    const body = h('div', { class: 'task-body' }, h('p', { class: 'empty' }, n.taskId ? 'Loading…' : 'Not reached (yet).'));
    this.detail.replaceChildren(
      h('h2', {}, n.id), h('p', {}, n.type, ' · ', statusBadge(n.status)),
      h('dl', {},
        h('dt', {}, 'iteration'), h('dd', {}, n.iteration || '—'),
        h('dt', {}, 'attempt'), h('dd', {}, n.attempt ?? '—'),
        h('dt', {}, 'scheduled'), h('dd', {}, fmtTime(n.scheduledTime)),
        h('dt', {}, 'started'), h('dd', {}, fmtTime(n.startTime)),
        h('dt', {}, 'ended'), h('dd', {}, fmtTime(n.endTime)),
        h('dt', {}, 'queue wait'), h('dd', {}, n.startTime && n.scheduledTime ? fmtDuration(n.startTime - n.scheduledTime) : ''),
        h('dt', {}, 'run time'), h('dd', {}, n.startTime ? fmtDuration((n.endTime || Date.now()) - n.startTime) : ''),
        h('dt', {}, 'input / output'), h('dd', {}, `${fmtBytes(n.inputBytes)} / ${fmtBytes(n.outputBytes)}`),
        n.subWorkflowId ? [h('dt', {}, 'child'), h('dd', {}, h('a', { href: `#/run/${encodeURIComponent(n.subWorkflowId)}` }, n.subWorkflowId))] : []),
      this.taskOps(n), body);
    if (!n.taskId) return;
    try {
      // The current run's tasks come with the workflow; an earlier run's from the task API.
      const tasks = this.isCurrent && this.wf && Array.isArray(this.wf.tasks) ? this.wf.tasks : [];
      let t = tasks.find((x) => x.taskId === n.taskId);
      // Activities: the task API adds the heartbeat registry's view (last heartbeat,
      // progress details); a workflow's task list does not carry it.
      if (!t || !n.logical) t = await api.task(n.taskId).catch((e) => { if (t) return t; throw e; });
      if (this.selected !== nodeId) return;
      // The worker's log lines (POST /api/tasks/{taskId}/log), when it wrote any.
      const logs = h('div', { class: 'logs' });
      api.taskLogs(n.taskId).then((lines) => {
        if (!Array.isArray(lines) || !lines.length) return;
        logs.replaceChildren(h('h3', {}, 'Log'), h('table', {}, h('tbody', {}, lines.map((l) =>
          h('tr', {}, h('td', {}, fmtTime(l.createdTime)), h('td', {}, h('code', {}, l.log)))))));
      }).catch(() => { /* no log */ });
      // A loop task's referenceTaskName carries its iteration (`ref__2`), as Conductor's.
      const shownRef = n.iteration > 0 ? `${n.ref}__${n.iteration}` : n.ref;
      const attempts = tasks.filter((x) => x.referenceTaskName === shownRef && (x.iteration || 0) === (n.iteration || 0));
      body.replaceChildren(
        h('dl', {},
          h('dt', {}, 'task id'), h('dd', {}, t.taskId),
          h('dt', {}, 'worker'), h('dd', { class: 'worker' }, t.workerId || '—'),
          h('dt', {}, 'retry count'), h('dd', {}, t.retryCount ?? 0),
          t.reasonForIncompletion ? [h('dt', {}, 'error'), h('dd', { class: 'reason' }, t.reasonForIncompletion)] : []),
        attempts.length > 1 ? h('div', {}, h('h3', {}, 'Attempts'), h('table', { class: 'attempts' },
          h('thead', {}, h('tr', {}, ['#', 'Status', 'Worker', 'Started', 'Ended', 'Error'].map((c) => h('th', {}, c)))),
          h('tbody', {}, attempts.map((a) => h('tr', {},
            h('td', {}, (a.retryCount ?? 0) + 1), h('td', {}, statusBadge(a.status)), h('td', {}, a.workerId || ''),
            h('td', {}, fmtTime(a.startTime)), h('td', {}, fmtTime(a.endTime)), h('td', {}, a.reasonForIncompletion || '')))))) : '',
        logs,
        h('h3', {}, 'Input'), json(t.inputData),
        h('h3', {}, 'Output'), json(t.outputData),
        heartbeatSection(t.heartbeat));
    } catch (e) {
      body.replaceChildren(h('p', { class: 'empty' }, `Input and output of ${n.taskId}: ${e.message}. The history below has them.`));
    }
  }

  taskOps(n) {
    if (!this.isCurrent) return h('p', { class: 'note' }, 'Operations apply to the current run.');
    const id = this.id;
    const live = LIVE.includes(this.status());
    const pending = !n.status || ['SCHEDULED', 'IN_PROGRESS'].includes(n.status);
    const body = { taskRef: n.ref, reason: 'reset from the web UI' };
    if (n.iteration > 0) body.iteration = n.iteration;
    return h('div', { class: 'ops task-ops' },
      opButton('Reset to this task', { disabled: !n.status }, {
        title: 'Reset', text: `Reset ${id} to ${n.id}? A new run continues from this task; work after it runs again.`,
        call: () => api.reset(id, body), done: (newRun) => { flash(`New run ${newRun}`, 'ok'); this.toCurrent(); } }),
      opButton('Skip', { disabled: !live || !pending }, {
        title: 'Skip', text: `Skip ${n.ref} in ${id}? It ends SKIPPED with the output below and the run goes on.`,
        input: 'taskOutput (JSON)', inputValue: '{}',
        call: (taskOutput) => api.skip(id, n.ref, { taskOutput }), done: () => this.refresh() }),
      n.type === 'WAIT' ? opButton('Signal', { disabled: !live || !pending }, {
        title: 'Signal', text: `Send signal "${n.ref}" to ${id}? It completes the WAIT with the payload below.`,
        input: 'payload (JSON)', inputValue: '{}',
        call: (payload) => api.signal(id, n.ref, payload), done: () => this.refresh() }) : '');
  }
}

/** The heartbeat registry's view of a task's attempt: status, last beat, details. */
function heartbeatSection(hb) {
  if (!hb) return [];
  return h('div', { class: 'heartbeat' },
    h('h3', {}, 'Heartbeat'),
    h('dl', {},
      h('dt', {}, 'attempt'), h('dd', { class: 'hb-status' }, `${hb.attempt}: ${hb.status}`),
      h('dt', {}, 'last heartbeat'), h('dd', {}, hb.lastHeartbeatTime ? fmtTime(hb.lastHeartbeatTime) : '—'),
      h('dt', {}, 'timeout'), h('dd', {}, hb.timeoutSeconds ? `${hb.timeoutSeconds} s` : 'not watched'),
      hb.stopReason ? [h('dt', {}, 'stopped'), h('dd', { class: 'reason' }, hb.stopReason)] : []),
    hb.details != null ? [h('h3', {}, 'Progress details'), json(hb.details)] : []);
}
