// Stop while a tool call runs: the status line says the reply was stopped (not "Ready"), and the
// tool card of the interrupted call says it was stopped (not "Running" for ever), after a reload too.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { checkPrerequisites, openBrowser, screenshot, sendMessage, startServer, waitForPage } from '../lib/helpers.js';

let server;
let browser;

before(async () => {
  checkPrerequisites();
  // Each long_step call works for 60 s: the call is still running when Stop is pressed.
  server = await startServer({ env: { LONG_STEP_SECONDS: '60' } });
  browser = await openBrowser(server.base);
});

after(async () => {
  const errors = browser?.errors() ?? [];
  await browser?.close();
  await server?.stop();
  assert.deepEqual(errors, [], 'no errors in the page console');
});

test('Stop during a tool call: a stopped state, and the card says the call was stopped', { timeout: 60_000 }, async () => {
  const { page } = browser;
  await page.goto(`${server.base}/`);
  await waitForPage(page, (s) => s.status === 'ready', 'status ready');
  await sendMessage(page, 'Run a long task');
  const running = await waitForPage(
    page,
    (s) => s.status === 'streaming' && s.assistants[0]?.tools.some((t) => t.state === 'input-available'),
    'the long_step call running',
  );
  assert.deepEqual(running.assistants[0].tools.map((t) => [t.name, t.label, t.stopped]), [['long_step', 'Running', false]]);
  const { runId } = JSON.parse(running.storedRun);

  await page.getByRole('button', { name: 'Stop' }).click();
  const stopped = await waitForPage(page, (s) => s.status === 'stopped', 'the stopped state');
  assert.match(stopped.statusText, /^Stopped/);
  assert.equal(stopped.storedRun, null, 'the run is over: nothing to resume');
  const [card] = stopped.assistants[0].tools;
  assert.equal(card.state, 'input-available', 'the call never got a result');
  assert.equal(card.stopped, true);
  assert.equal(card.label, 'Stopped');
  assert.match(card.note, /stopped before this call finished/);
  const run = await (await fetch(`${server.base}/api/runs/${runId}`)).json();
  assert.equal(run.status, 'cancelled');
  assert.ok(await page.getByRole('button', { name: 'Send' }).isEnabled());
  await screenshot(page, 'browser-stop.png');

  // After a reload the saved reply still shows the call as stopped (the page is simply ready).
  await page.reload();
  const reloaded = await waitForPage(page, (s) => s.status === 'ready' && s.assistants.length === 1, 'the saved chat');
  assert.deepEqual(reloaded.assistants[0].tools.map((t) => [t.label, t.stopped]), [['Stopped', true]]);

  // The next message clears the stopped state.
  await sendMessage(page, 'Hello again');
  const next = await waitForPage(page, (s) => s.status === 'ready' && s.assistants.length === 2, 'the next reply');
  assert.equal(next.statusText, 'Ready');
});
