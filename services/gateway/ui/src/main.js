// Weft's web UI: a hash router over two pages, the list of runs and a run.

import { renderList } from './list.js';
import { renderRun } from './run.js';
import { clearFlash } from './util.js';

let page = null;

function route() {
  if (page && page.dispose) page.dispose();
  page = null;
  clearFlash();
  const root = document.getElementById('app');
  const hash = location.hash.replace(/^#/, '') || '/';
  const [path, query] = hash.split('?');
  const params = new URLSearchParams(query || '');
  const m = path.match(/^\/run\/([^/]+)$/);
  if (m) {
    page = renderRun(root, decodeURIComponent(m[1]), params);
  } else {
    renderList(root, params);
  }
}

window.addEventListener('hashchange', route);
route();
