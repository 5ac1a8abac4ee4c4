// The gateway's REST API (API.md), as the UI uses it. Errors carry the API's message.
//
// Authentication (issue 15): the token the user signed in with is kept in
// sessionStorage (gone when the tab closes, never shared with other tabs or sites) and
// sent as `Authorization: Bearer` on every call. A 401 tells the app (see
// `onUnauthenticated`), which asks for a token again.

const TOKEN_KEY = 'weft.token';

export class ApiError extends Error {
  constructor(status, body) {
    const message = (body && (body.message || body.code)) || `HTTP ${status}`;
    super(message);
    this.status = status;
    this.body = body;
  }
}

/** The token of this session, or null. */
export function getToken() {
  try { return sessionStorage.getItem(TOKEN_KEY); } catch { return null; }
}

export function setToken(token) {
  sessionStorage.setItem(TOKEN_KEY, token);
}

export function clearToken() {
  try { sessionStorage.removeItem(TOKEN_KEY); } catch { /* storage unavailable: nothing kept */ }
}

let unauthenticated = () => {};
/**
 * `handler(error, token)` runs when a call answers 401, before the call's promise
 * rejects; `token` is the one the call carried (null: none).
 */
export function onUnauthenticated(handler) {
  unauthenticated = handler;
}

async function send(method, path, body, token) {
  const init = { method, headers: {} };
  if (token) init.headers.authorization = `Bearer ${token}`;
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

async function request(method, path, body) {
  const token = getToken();
  try {
    return await send(method, path, body, token);
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) unauthenticated(e, token);
    throw e;
  }
}

/**
 * Checks a token before keeping it: resolves when the gateway accepts it for reading
 * runs (what every page does), rejects with the ApiError otherwise (401: refused; 403:
 * valid, but without the `read` scope).
 */
export async function checkToken(token) {
  await send('GET', '/api/workflow/search?start=0&size=1', undefined, token);
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
  audit: (id) => request('GET', `/api/workflow/${enc(id)}/audit`),
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
