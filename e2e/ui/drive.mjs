// Drives Weft's web UI in headless Chromium through one operator's session (issue 5):
// the list of runs, a run with a loop, a fork and a switch, its node statuses, a signal,
// a refused retry, a reset, pause, resume and skip from the UI (each through the confirm
// dialog), and the new run.
//
// Run by e2e/tests/it/ui.rs, which starts the services and the run; inputs come from
// the environment:
//   WEFT_UI_URL       the gateway, e.g. http://127.0.0.1:8080
//   WEFT_UI_WORKFLOW  the workflow id of a `ui_flow` run (mode a) waiting on its WAIT `approve`
//   WEFT_UI_WORKFLOW2 another (mode b), to terminate
//   WEFT_UI_OUT       a directory for screenshots and the browser's console log
//   WEFT_CHROMIUM     the browser (default /usr/bin/chromium)
// Prints `RESULT <json>` and exits 0 on success; exits 1 with the reason otherwise.

import { chromium } from 'playwright-core';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const base = must('WEFT_UI_URL');
const workflowId = must('WEFT_UI_WORKFLOW');
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

const node = (id) => `#nodes tr[data-node="${id}"]`;

async function nodeStatus(page, id) {
  await page.waitForSelector(node(id), { timeout: BOUND });
  return page.getAttribute(node(id), 'data-status');
}

async function waitStatus(page, id, statuses) {
  const want = Array.isArray(statuses) ? statuses : [statuses];
  await page.waitForFunction(([sel, want]) => {
    const el = document.querySelector(sel);
    return el && want.includes(el.dataset.status);
  }, [node(id), want], { timeout: BOUND, polling: 200 });
}

async function confirm(page, input) {
  await page.waitForSelector('dialog#confirm[open]', { timeout: BOUND });
  if (input !== undefined) await page.fill('#confirm-input', input);
  await page.click('#confirm-ok');
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
  page.on('dialog', (d) => d.accept());
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  try {
    // 1. The list: the run is there; the definition filter keeps it.
    step('open the list');
    await page.goto(`${base}/`);
    const row = `#runs tr[data-workflow-id="${workflowId}"]`;
    await page.waitForSelector(row, { timeout: BOUND });
    await page.waitForSelector('#filter-type option[value="ui_flow"]', { state: 'attached', timeout: BOUND });
    await page.selectOption('#filter-type', 'ui_flow');
    await page.check('input[name="status"][value="RUNNING"]');
    await page.click('#filters button[type="submit"]');
    await page.waitForFunction(() => location.hash.includes('type=ui_flow') && location.hash.includes('status=RUNNING'), null, { timeout: BOUND });
    await page.waitForSelector(row, { timeout: BOUND });
    check(await page.getAttribute(row, 'data-status') === 'RUNNING', 'the run is not RUNNING in the list');
    // The definition's statistics: the run counts.
    await page.waitForSelector('#stats [data-count]', { timeout: BOUND });
    check(Number(await page.getAttribute('#stats [data-count]', 'data-count')) >= 1, 'statistics count no run');
    await page.screenshot({ path: path.join(out, '1-list.png'), fullPage: true });

    // 2. The run: the loop's iterations, both fork branches, the branch taken.
    step('open the run');
    await page.click(`${row} a.run-link`);
    await page.waitForSelector('#nodes', { timeout: BOUND });
    await waitStatus(page, 'approve', ['IN_PROGRESS', 'SCHEDULED']);
    const expected = {
      f: 'COMPLETED', loop: 'COMPLETED', 'tick#1': 'COMPLETED', 'tick#2': 'COMPLETED',
      'tick#3': 'COMPLETED', side: 'COMPLETED', j: 'COMPLETED', pick: 'COMPLETED',
      chosen: 'COMPLETED', other: 'NOT_REACHED',
    };
    for (const [id, status] of Object.entries(expected)) {
      const got = await nodeStatus(page, id);
      check(got === status, `node ${id}: ${got}, expected ${status}`);
    }
    const oldRun = (await page.textContent('#run-id')).trim();
    // The run's trace id, linked to the trace viewer the gateway names (WEFT_TRACE_URL).
    await page.waitForSelector('#trace-id a', { timeout: BOUND });
    const traceId = (await page.textContent('#trace-id a')).trim();
    check(/^[0-9a-f]{32}$/.test(traceId), `trace id ${traceId}`);
    const traceHref = await page.getAttribute('#trace-id a', 'href');
    check(traceHref === `http://traces.example/trace/${traceId}`, `trace link ${traceHref}`);
    check(await page.getAttribute('#app', 'data-run-status') === 'RUNNING', 'the run page does not say RUNNING');
    // The flowchart drew every node, and the timeline has a bar for each reached one.
    const drawn = await page.evaluate(() => window.weftUi.chart.cy.nodes().length);
    const listed = await page.locator('#nodes tr[data-node]').count();
    check(drawn === listed && drawn >= 12, `flowchart has ${drawn} nodes, list ${listed}`);
    check(await page.locator('#timeline g.row[data-node="tick#3"]').count() === 1, 'tick#3 is not on the timeline');
    // The branch taken and the one not taken are drawn apart; the loop's iterations are linked.
    const edges = await page.evaluate(() => window.weftUi.chart.cy.edges().map((e) => ({
      from: e.source().id(), to: e.target().id(), classes: e.classes() })));
    const edge = (from, to) => edges.find((e) => e.from === from && e.to === to) || { classes: [] };
    check(edge('pick', 'chosen').classes.includes('branch_taken'), `pick → chosen: ${JSON.stringify(edges)}`);
    check(edge('pick', 'other').classes.includes('branch_not_taken'), 'pick → other is not drawn as not taken');
    check(edge('tick#1', 'tick#2').classes.includes('loop_back'), 'tick#1 → tick#2 is not a loop edge');
    // Zoom.
    const zoom0 = await page.evaluate(() => window.weftUi.chart.cy.zoom());
    await page.click('.zoom button[title="zoom in"]');
    check(await page.evaluate(() => window.weftUi.chart.cy.zoom()) > zoom0, 'zoom in did nothing');
    await page.click('.zoom button[title="fit"]');
    await page.waitForSelector('#history tr[data-event]', { timeout: BOUND });
    await page.screenshot({ path: path.join(out, '2-run.png'), fullPage: true });

    // 3. Tap the WAIT in the flowchart, signal it from its panel; the page follows live.
    step('signal the WAIT from the flowchart');
    // Scroll the flowchart into view, and let the scroll event reach Cytoscape (which
    // caches where its canvas is) before clicking on it.
    await page.evaluate(() => new Promise((done) => {
      document.getElementById('graph').scrollIntoView();
      requestAnimationFrame(() => requestAnimationFrame(done));
    }));
    const at = await page.evaluate(() => window.weftUi.chart.pagePosition('approve'));
    check(at, 'approve is not drawn');
    await page.mouse.click(at.x, at.y);
    await page.waitForSelector('#task-detail h2:text-is("approve")', { timeout: BOUND });
    await page.click('#task-detail button[data-op="Signal"]');
    await confirm(page, '{"ok": "from the UI"}');
    await waitStatus(page, 'approve', 'COMPLETED');
    await page.waitForFunction(() => document.querySelector('#app').dataset.runStatus === 'COMPLETED', null, { timeout: BOUND });
    await waitStatus(page, 'done', 'COMPLETED');

    // A refused operation shows the API's answer: nothing failed, so retry is a 409.
    step('retry a completed run: refused');
    await page.click('#run-ops button[data-op="Retry"]');
    await confirm(page);
    await page.waitForFunction(() => /Retry refused \(409\): \S/.test(document.querySelector('#flash').textContent), null, { timeout: BOUND });

    // 4. Reset to `chosen` from its panel: a new run, shown with the chain.
    step('reset to chosen');
    await page.click(`${node('chosen')} a.node-link`);
    await page.waitForSelector('#task-detail h2:text-is("chosen")', { timeout: BOUND });
    await page.waitForSelector('#task-detail .worker', { timeout: BOUND });
    // The heartbeat registry's view of the attempt (its worker registered it).
    await page.waitForSelector('#task-detail .heartbeat .hb-status', { timeout: BOUND });
    await page.click('#task-detail button[data-op="Reset to this task"]');
    await confirm(page);
    await page.waitForSelector('#run-chain li[data-current="true"]', { timeout: BOUND });
    const newRun = await page.getAttribute('#run-chain li[data-current="true"]', 'data-run-id');
    check(newRun && newRun !== oldRun, `no new run (old ${oldRun}, current ${newRun})`);
    await page.waitForFunction((r) => document.querySelector('#run-id').textContent.trim() === r, newRun, { timeout: BOUND });
    check(await page.locator('#run-chain li').count() === 2, 'the chain does not list two runs');
    // The new run re-ran `chosen` and waits on `approve` again, kept from the loop and fork.
    await waitStatus(page, 'approve', ['IN_PROGRESS', 'SCHEDULED']);
    await waitStatus(page, 'chosen', 'COMPLETED');
    for (const id of ['tick#3', 'side', 'j']) {
      check(await nodeStatus(page, id) === 'COMPLETED', `new run: ${id} is not COMPLETED`);
    }
    await page.screenshot({ path: path.join(out, '3-new-run.png'), fullPage: true });

    // Pause and resume the new run, then skip its WAIT: it completes.
    step('pause, resume, skip');
    await page.click('#run-ops button[data-op="Pause"]');
    await confirm(page);
    await page.waitForFunction(() => document.querySelector('#app').dataset.runStatus === 'PAUSED', null, { timeout: BOUND });
    await page.click('#run-ops button[data-op="Resume"]');
    await confirm(page);
    await page.waitForFunction(() => document.querySelector('#app').dataset.runStatus === 'RUNNING', null, { timeout: BOUND });
    await page.click(`${node('approve')} a.node-link`);
    await page.waitForSelector('#task-detail h2:text-is("approve")', { timeout: BOUND });
    await page.click('#task-detail button[data-op="Skip"]');
    await confirm(page, '{"ok": "skipped"}');
    await waitStatus(page, 'approve', 'SKIPPED');
    await waitStatus(page, 'done', 'COMPLETED');
    await page.waitForFunction(() => document.querySelector('#app').dataset.runStatus === 'COMPLETED', null, { timeout: BOUND });

    // 5. A second run (mode b): the other branch was taken; terminate it.
    step('terminate another run');
    await page.goto(`${base}/#/run/${encodeURIComponent(process.env.WEFT_UI_WORKFLOW2)}`);
    await waitStatus(page, 'approve', ['IN_PROGRESS', 'SCHEDULED']);
    check(await nodeStatus(page, 'other') === 'COMPLETED', 'mode b: other is not COMPLETED');
    check(await nodeStatus(page, 'chosen') === 'NOT_REACHED', 'mode b: chosen was reached');
    await page.click('#run-ops button[data-op="Terminate"]');
    await confirm(page, '"enough"');
    await page.waitForFunction(() => document.querySelector('#app').dataset.runStatus === 'TERMINATED', null, { timeout: BOUND });
    await waitStatus(page, 'approve', 'CANCELED');
    await page.goto(`${base}/#/run/${encodeURIComponent(workflowId)}`);
    await page.waitForSelector('#run-chain li', { timeout: BOUND });

    // 6. The old run is still there, read-only.
    step('open the old run');
    await page.click(`#run-chain li[data-run-id="${oldRun}"] a`);
    await page.waitForFunction((r) => document.querySelector('#app').dataset.runId === r, oldRun, { timeout: BOUND });
    await waitStatus(page, 'done', 'COMPLETED');
    check(await page.isDisabled('#run-ops button[data-op="Terminate"]'), 'operations are enabled on an old run');

    check(errors.length === 0, `page errors: ${errors.join('; ')}`);
    console.log(`RESULT ${JSON.stringify({ oldRun, newRun })}`);
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
