// Small DOM and formatting helpers.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

/** Epoch ms, ISO text or nothing → a readable local time. */
export function fmtTime(v) {
  const ms = toMs(v);
  if (!ms) return '';
  return new Date(ms).toLocaleString(undefined, { hour12: false });
}

export function toMs(v) {
  if (v === undefined || v === null || v === '' || v === 0) return null;
  if (typeof v === 'number') return v;
  const n = Number(v);
  if (!Number.isNaN(n)) return n || null;
  const t = Date.parse(v);
  return Number.isNaN(t) ? null : t;
}

export function fmtDuration(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return '';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 3600000) return `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
  return `${Math.floor(ms / 3600000)} h ${Math.round((ms % 3600000) / 60000)} min`;
}

export function fmtBytes(n) {
  if (n === null || n === undefined) return '';
  if (n < 1024) return `${n} B`;
  if (n < 1048576) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1048576).toFixed(1)} MiB`;
}

export function statusBadge(status) {
  return h('span', { class: `badge s-${(status || 'NOT_REACHED').toLowerCase()}` }, status || 'not reached');
}

export function json(v) {
  return h('pre', { class: 'json' }, JSON.stringify(v, null, 2));
}

let flashTimer;
/**
 * Shows a message in the banner (errors stay until the next one). Errors of pages
 * closed for the sign-in form (their calls answered 401) are not shown over it.
 */
export function flash(message, kind = 'error') {
  if (kind === 'error' && document.body.classList.contains('signing-in')) return;
  const el = document.getElementById('flash');
  el.textContent = message;
  el.className = kind;
  el.hidden = false;
  clearTimeout(flashTimer);
  if (kind !== 'error') flashTimer = setTimeout(() => { el.hidden = true; }, 4000);
}

export function clearFlash() {
  document.getElementById('flash').hidden = true;
}

/**
 * Asks for confirmation in the page's dialog; resolves to null when cancelled, else to
 * the input's text ('' when there is no input).
 */
export function confirmDialog({ title, text, input, inputValue = '' }) {
  const dlg = document.getElementById('confirm');
  document.getElementById('confirm-title').textContent = title;
  document.getElementById('confirm-text').textContent = text;
  const label = document.getElementById('confirm-input-label');
  const area = document.getElementById('confirm-input');
  label.hidden = !input;
  document.getElementById('confirm-input-name').textContent = input || '';
  area.value = inputValue;
  return new Promise((resolve) => {
    dlg.addEventListener('close', () => {
      resolve(dlg.returnValue === 'ok' ? (input ? area.value : '') : null);
    }, { once: true });
    dlg.returnValue = '';
    dlg.showModal();
  });
}
