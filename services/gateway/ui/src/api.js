// The gateway's REST API (API.md), as the UI uses it. Errors carry the API's message.

export class ApiError extends Error {
  constructor(status, body) {
    const message = (body && (body.message || body.code)) || `HTTP ${status}`;
    super(message);
    this.status = status;
    this.body = body;
  }
}

async function request(method, path, body) {
  const init = { method, headers: {} };
  if (body !== undefined) {
    init.headers['content-type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const res = await fetch(path, init);
  const text = await res.text();
  let parsed = text;
  if ((res.headers.get('content-type') || '').includes('json') && text) {
    try { parsed = JSON.parse(text); } catch { /* keep the text */ }
  }
  if (!res.ok) {
    throw new ApiError(res.status, typeof parsed === 'object' ? parsed : { message: text || res.statusText });
  }
  return parsed;
}

const enc = encodeURIComponent;
const q = (params) => {
  const s = Object.entries(params)
    .filter(([, v]) => v !== undefined && v !== null && v !== '')
    .map(([k, v]) => `${enc(k)}=${enc(v)}`)
    .join('&');
  return s ? `?${s}` : '';
};

export const api = {
  search: (params) => request('GET', `/api/workflow/search${q(params)}`),
  definitions: () => request('GET', '/api/metadata/workflow'),
  stats: (name) => request('GET', `/api/metadata/workflow/${enc(name)}/stats`),
  workflow: (id) => request('GET', `/api/workflow/${enc(id)}?includeTasks=true`),
  runs: (id) => request('GET', `/api/workflow/${enc(id)}/runs`),
  graph: (id, runId) => request('GET', `/api/workflow/${enc(id)}/graph${q({ runId })}`),
  history: (id, runId, after, limit) =>
    request('GET', `/api/workflow/${enc(id)}/history${q({ runId, after, limit })}`),
  uiConfig: () => request('GET', '/api/ui/config'),
  task: (taskId) => request('GET', `/api/tasks/${enc(taskId)}`),
  taskLogs: (taskId) => request('GET', `/api/tasks/${enc(taskId)}/log`),
  terminate: (id, reason) => request('DELETE', `/api/workflow/${enc(id)}${q({ reason })}`),
  pause: (id) => request('PUT', `/api/workflow/${enc(id)}/pause`),
  resume: (id) => request('PUT', `/api/workflow/${enc(id)}/resume`),
  retry: (id) => request('POST', `/api/workflow/${enc(id)}/retry`),
  restart: (id) => request('POST', `/api/workflow/${enc(id)}/restart`),
  skip: (id, ref, body) => request('PUT', `/api/workflow/${enc(id)}/skiptask/${enc(ref)}`, body),
  reset: (id, body) => request('POST', `/api/workflow/${enc(id)}/reset`, body),
  signal: (id, name, payload) => request('POST', `/api/workflow/${enc(id)}/signal/${enc(name)}`, payload),
};
