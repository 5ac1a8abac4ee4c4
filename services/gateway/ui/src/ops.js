// Operator operations: each asks for confirmation in the page's dialog, then calls the
// API; a 4xx shows the API's own message.

import { h, flash, confirmDialog } from './util.js';

/**
 * Asks, then runs `call(input)`; `done(result)` after a success. `input` names a JSON
 * text field to ask for (its parsed value is passed to `call`).
 */
export async function operate({ title, text, input, inputValue, call, done }) {
  const answer = await confirmDialog({ title, text, input, inputValue });
  if (answer === null) return;
  let value;
  if (input) {
    try {
      value = answer.trim() ? JSON.parse(answer) : {};
    } catch (e) {
      flash(`${input} is not JSON: ${e.message}`);
      return;
    }
  }
  try {
    const result = await call(value);
    flash(`${title}: done`, 'ok');
    if (done) await done(result);
  } catch (e) {
    flash(`${title} refused${e.status ? ` (${e.status})` : ''}: ${e.message}`);
  }
}

export function opButton(label, attrs, op) {
  return h('button', { ...attrs, class: `op ${attrs.class || ''}`, 'data-op': label, onclick: () => operate(op) }, label);
}
