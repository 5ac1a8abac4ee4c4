// Weft's web UI: a hash router over two pages, the list of runs and a run, behind a
// sign-in form when the gateway wants a token.

import { api, getToken, clearToken, onUnauthenticated } from './api.js';
import { showSignIn, signingIn } from './auth.js';
import { renderList } from './list.js';
import { renderRun } from './run.js';
import { clearFlash } from './util.js';

const root = document.getElementById('app');
const signOutButton = document.getElementById('sign-out');
let page = null;
// Whether the gateway wants a token: from /api/ui/config, or learnt from a 401.
let authOn = false;

function closePage() {
  if (page && page.dispose) page.dispose();
  page = null;
}

function route() {
  closePage();
  clearFlash();
  showSession();
  if (authOn && !getToken()) {
    signIn();
    return;
  }
  document.body.classList.remove('signing-in');
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

/** The form instead of the page; once signed in, the page the URL names. */
function signIn(notice) {
  closePage();
  clearFlash();
  showSession();
  showSignIn(root, { notice, onSignedIn: route });
}

function showSession() {
  signOutButton.hidden = !getToken();
}

onUnauthenticated((e, token) => {
  authOn = true;
  // A call made before the token changed (a sign-in, a sign-out) says nothing of this session.
  if (token !== getToken()) return;
  if (!token) {
    if (!signingIn()) signIn();
    return;
  }
  // The token is refused now (expired, revoked): it is of no more use.
  clearToken();
  signIn(`The gateway no longer accepts this session's token (${e.message}). Sign in again.`);
});

signOutButton.addEventListener('click', () => {
  clearToken();
  if (authOn) signIn(); else route();
});

async function start() {
  try {
    const config = await api.uiConfig();
    authOn = Boolean(config && config.auth);
  } catch {
    // A gateway without the setting: a 401 will tell.
  }
  window.addEventListener('hashchange', route);
  route();
}

start();
