// The sign-in form, shown instead of a page when the gateway wants a token (its
// /api/ui/config says `auth: true`, or a call answered 401). The token is checked with
// one read before it is kept for the session.

import { checkToken, setToken } from './api.js';
import { h } from './util.js';

/** Whether the sign-in form is what the page shows now. */
export function signingIn() {
  return document.body.classList.contains('signing-in');
}

/**
 * Shows the form in `root` (a form already shown is kept, with what the user typed);
 * `notice` says why it is asked again; `onSignedIn()` runs once a token is accepted
 * and kept.
 */
export function showSignIn(root, { notice, onSignedIn }) {
  document.body.classList.add('signing-in');
  const shown = root.querySelector('#sign-in');
  if (shown) {
    if (notice) setNotice(shown.querySelector('#sign-in-notice'), notice);
    return;
  }
  const input = h('input', {
    type: 'password', id: 'token-input', name: 'token', autocomplete: 'off',
    spellcheck: 'false', required: true, placeholder: 'weft_…',
  });
  const button = h('button', { type: 'submit', id: 'sign-in-button' }, 'Sign in');
  const error = h('p', { id: 'sign-in-error', class: 'error', role: 'alert', hidden: true });
  const noticeLine = h('p', { id: 'sign-in-notice', class: 'note', hidden: true });
  if (notice) setNotice(noticeLine, notice);
  const form = h('form', { id: 'sign-in-form', onsubmit: async (e) => {
    e.preventDefault();
    const token = input.value.trim();
    if (!token) return;
    button.disabled = true;
    error.hidden = true;
    try {
      await checkToken(token);
    } catch (err) {
      error.textContent = refusal(err);
      error.hidden = false;
      button.disabled = false;
      input.select();
      return;
    }
    setToken(token);
    document.body.classList.remove('signing-in');
    onSignedIn();
  } },
  h('label', {}, h('span', {}, 'Access token'), input), button, error);
  root.replaceChildren(h('section', { class: 'sign-in', id: 'sign-in' },
    h('h1', {}, 'Sign in'),
    noticeLine,
    h('p', {}, 'This gateway requires an access token. An administrator creates one with ',
      h('code', {}, 'weft token create NAME --scope read'), ' (add ', h('code', {}, 'operate'),
      ' to act on runs from here). It is kept in this tab until you sign out or close it.'),
    form));
  input.focus();
}

function setNotice(el, text) {
  el.textContent = text;
  el.hidden = false;
}

/** Why a token was not accepted, as the error line says it. */
function refusal(err) {
  if (err.status === 401) return `The gateway refused this token: ${err.message}`;
  if (err.status === 403) return `This token cannot read runs (the web UI needs the scope read): ${err.message}`;
  return `The token could not be checked: ${err.message}`;
}
