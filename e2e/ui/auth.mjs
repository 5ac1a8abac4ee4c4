// Drives Weft's web UI in headless Chromium on a gateway with authentication on
// (issue 15): the page asks for a token, a wrong one shows the error, the right one
// shows the runs; the run page lists who operated on the run; a reload keeps the
// session; a token the gateway stops accepting brings the form back; sign out.
//
// Run by e2e/tests/it/ui.rs, which starts the services (WEFT_ADMIN_TOKEN set), the run
// and its operation; inputs come from the environment:
//   WEFT_UI_URL       the gateway, e.g. http://127.0.0.1:8080
//   WEFT_UI_WORKFLOW  the workflow id of a run an operator terminated with a reason
//   WEFT_UI_TOKEN     a token with the scope read, to sign in with
//   WEFT_UI_OPERATOR  the name of the token that terminated the run
//   WEFT_UI_REASON    the reason it gave
//   WEFT_UI_OUT       a directory for screenshots and the browser's console log
//   WEFT_CHROMIUM     the browser (default /usr/bin/chromium)
// Prints `RESULT <json>` and exits 0 on success; exits 1 with the reason otherwise.

import { chromium } from 'playwright-core';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const base = must('WEFT_UI_URL');
const workflowId = must('WEFT_UI_WORKFLOW');
const token = must('WEFT_UI_TOKEN');
const operator = must('WEFT_UI_OPERATOR');
const reason = must('WEFT_UI_REASON');
const out = must('WEFT_UI_OUT');
const executablePath = process.env.WEFT_CHROMIUM || '/usr/bin/chromium';
// A bound on each wait (debug builds on two shared cores), not a timing assertion.
const BOUND = Number(process.env.WEFT_UI_BOUND_MS || 90_000);

function must(name) {
  const v = process.env[name];
  if (!v) { console.error(`${name} is not set`); process.exit(2); }
  return v;
}

function step(msg) { console.log(`step: ${msg}`); }

function check(cond, msg) { if (!cond) throw new Error(msg); }

const stored = (page) => page.evaluate(() => sessionStorage.getItem('weft.token'));

async function signInForm(page) {
  await page.waitForSelector('#sign-in-form', { timeout: BOUND });
  check(await page.getAttribute('#token-input', 'type') === 'password', 'the token field is not a password field');
  check(await page.locator('#runs').count() === 0, 'the runs are shown without a token');
}

async function signIn(page, value) {
  await page.fill('#token-input', value);
  await page.click('#sign-in-button');
}

async function main() {
  fs.mkdirSync(out, { recursive: true });
  check(fs.existsSync(executablePath), `no browser at ${executablePath}: install Debian's chromium (apt-get install -y chromium)`);
  const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'weft-ui-chromium-'));
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath,
    headless: true,
    viewport: { width: 1400, height: 1000 },
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const console_ = fs.createWriteStream(path.join(out, 'console.log'));
  const page = context.pages()[0] || await context.newPage();
  page.on('console', (m) => console_.write(`${m.type()}: ${m.text()}\n`));
  page.on('pageerror', (e) => console_.write(`pageerror: ${e.stack || e}\n`));
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  // The API calls made while signed in, and the Authorization each carried.
  let signedIn = false;
  const calls = [];
  page.on('request', (r) => {
    const url = new URL(r.url());
    if (signedIn && url.pathname.startsWith('/api/') && url.pathname !== '/api/ui/config') {
      calls.push({ path: url.pathname, authorization: r.headers().authorization || null });
    }
  });
  try {
    // 1. The page asks for a token; a wrong one is refused, and nothing is kept.
    step('open the UI: the sign-in form');
    await page.goto(`${base}/`);
    await signInForm(page);
    check(await page.isHidden('#sign-out'), 'sign out is offered before signing in');
    await page.screenshot({ path: path.join(out, '1-sign-in.png'), fullPage: true });
    step('a wrong token');
    await signIn(page, 'weft_not_a_token');
    await page.waitForSelector('#sign-in-error:not([hidden])', { timeout: BOUND });
    const error = (await page.textContent('#sign-in-error')).trim();
    check(/refused this token/.test(error), `the error line says: ${error}`);
    check(await stored(page) === null, 'a refused token was kept');
    await page.screenshot({ path: path.join(out, '2-refused.png'), fullPage: true });

    // 2. The right token: the runs, and every call carries it.
    step('the right token: the runs');
    signedIn = true;
    await signIn(page, token);
    const row = `#runs tr[data-workflow-id="${workflowId}"]`;
    await page.waitForSelector(row, { timeout: BOUND });
    check(await stored(page) === token, 'the token is not kept in sessionStorage');
    check(await page.isVisible('#sign-out'), 'no sign out control');
    check(await page.locator('#sign-in').count() === 0, 'the form is still shown');

    // 3. The run page: who terminated it, and why.
    step('the run page lists the operation');
    await page.click(`${row} a.run-link`);
    const op = '#operations tr[data-action="workflow.terminate"]';
    await page.waitForSelector(op, { timeout: BOUND });
    const who = (await page.textContent(`${op} td.who`)).trim();
    check(who === operator, `the operation's token: ${who}, expected ${operator}`);
    const why = (await page.textContent(`${op} td.op-reason`)).trim();
    check(why === reason, `the operation's reason: ${why}, expected ${reason}`);
    check((await page.textContent(`${op} td:first-child`)).trim() !== '', 'the operation has no time');
    await page.waitForFunction(() => document.querySelector('#app').dataset.runStatus === 'TERMINATED', null, { timeout: BOUND });
    await page.screenshot({ path: path.join(out, '3-operations.png'), fullPage: true });

    // 4. A reload keeps the session.
    step('reload: still signed in');
    await page.reload();
    await page.waitForSelector(op, { timeout: BOUND });
    check(await page.locator('#sign-in').count() === 0, 'a reload asked for the token again');

    const bearer = `Bearer ${token}`;
    const authorizedCalls = calls.filter((c) => c.authorization === bearer).length;
    const others = calls.filter((c) => c.authorization !== bearer);
    check(others.length === 0, `calls without the token: ${JSON.stringify(others)}`);
    check(calls.some((c) => c.path.endsWith('/audit')), 'the audit was not asked for');

    // 5. A token the gateway refuses now (as a revoked one): the form, with why.
    step('a refused session token brings the form back');
    signedIn = false;
    await page.evaluate(() => sessionStorage.setItem('weft.token', 'weft_revoked'));
    await page.reload();
    await signInForm(page);
    await page.waitForSelector('#sign-in-notice:not([hidden])', { timeout: BOUND });
    const notice = (await page.textContent('#sign-in-notice')).trim();
    check(/no longer accepts/.test(notice), `the notice says: ${notice}`);
    check(await stored(page) === null, 'the refused token was kept');
    check(await page.isHidden('#flash'), `an error banner over the form: ${await page.textContent('#flash')}`);
    // Signing in again goes back to the page the address names.
    await signIn(page, token);
    await page.waitForSelector(op, { timeout: BOUND });

    // 6. Sign out: the form, nothing kept.
    step('sign out');
    await page.click('#sign-out');
    await signInForm(page);
    check(await stored(page) === null, 'sign out kept the token');
    check(await page.isHidden('#sign-out'), 'sign out is still offered');
    await page.screenshot({ path: path.join(out, '4-signed-out.png'), fullPage: true });

    check(errors.length === 0, `page errors: ${errors.join('; ')}`);
    console.log(`RESULT ${JSON.stringify({ authorizedCalls })}`);
  } catch (e) {
    await page.screenshot({ path: path.join(out, 'failure.png'), fullPage: true }).catch(() => {});
    const flash = await page.textContent('#flash').catch(() => '');
    throw new Error(`${e.message}\n  page: ${page.url()}\n  banner: ${flash}\n  screenshots and console: ${out}`);
  } finally {
    await context.close();
    fs.rmSync(userDataDir, { recursive: true, force: true });
  }
}

main().catch((e) => { console.error(`FAILED: ${e.message}`); process.exit(1); });
