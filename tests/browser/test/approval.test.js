// (b) A tool call that needs approval: the page shows the call with Approve / Deny buttons, the
// click answers it (addToolApprovalResponse + sendAutomaticallyWhen), and the continuation run
// streams into the SAME assistant message: the tool card gets its output, then the answer text.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { checkPrerequisites, openBrowser, screenshot, sendMessage, startServer, waitForPage } from '../lib/helpers.js';

let server;
let browser;

before(async () => {
  checkPrerequisites();
  server = await startServer({ demoDelay: 0.02 });
  browser = await openBrowser(server.base);
});

after(async () => {
  const errors = browser?.errors() ?? [];
  await browser?.close();
  await server?.stop();
  assert.deepEqual(errors, [], 'no errors in the page console');
});

const noteFiles = () => {
  try {
    return readdirSync(server.notesDir);
  } catch {
    return [];
  }
};

test('approve a save_note call with the button and see the continuation in the same message', { timeout: 60_000 }, async () => {
  const { page } = browser;
  await page.goto(`${server.base}/`);
  await waitForPage(page, (s) => s.status === 'ready', 'status ready');

  await sendMessage(page, 'Save a note: buy milk');
  const asked = await waitForPage(
    page,
    (s) => s.status === 'ready' && s.assistants[0]?.tools[0]?.state === 'approval-requested',
    'the save_note call waiting for approval',
  );
  assert.equal(asked.assistants.length, 1);
  assert.equal(asked.assistants[0].tools[0].name, 'save_note');
  assert.match(asked.statusText, /waiting for your approval/);
  assert.equal(asked.storedRun, null, 'the paused run ended with finish');
  assert.deepEqual(noteFiles(), [], 'nothing ran before the approval');
  const card = page.getByRole('region', { name: /Tool call save_note/ });
  assert.match(await card.textContent(), /"text": "buy milk"/);
  await screenshot(page, 'browser-b-approval-requested.png');
  // The same card in dark mode: the page follows the system colour scheme.
  const background = () => page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  const light = await background();
  await page.emulateMedia({ colorScheme: 'dark' });
  assert.notEqual(await background(), light, 'dark mode changes the colours');
  await screenshot(page, 'browser-b-approval-requested-dark.png');
  await page.emulateMedia({ colorScheme: 'light' });

  const assistantId = asked.assistants[0].id;
  await card.getByRole('button', { name: 'Approve' }).click();

  const done = await waitForPage(
    page,
    (s) => s.status === 'ready' && s.assistants.length === 1 && s.assistants[0].tools[0]?.state === 'output-available'
      && s.assistants[0].text.includes('(This is the demo model.)'),
    'the tool output and the answer text after approving',
  );
  const [assistant] = done.assistants;
  assert.equal(assistant.id, assistantId, 'the continuation streamed into the same assistant message');
  assert.equal(assistant.tools.length, 1);
  assert.deepEqual(JSON.parse(assistant.tools[0].output), { saved: 'buy-milk.txt', bytes: 9 });
  assert.equal(assistant.text, 'The tool returned: {"saved": "buy-milk.txt", "bytes": 9}. (This is the demo model.)');
  assert.equal(done.users.length, 1);
  assert.equal(done.statusText, 'Ready');
  assert.equal(await page.getByRole('button', { name: 'Approve' }).count(), 0);
  assert.equal(readFileSync(path.join(server.notesDir, 'buy-milk.txt'), 'utf8'), 'buy milk\n');
  await screenshot(page, 'browser-b-approved.png');
  assert.deepEqual(await browser.cspViolations(), []);

  // Two POSTs: the turn, then the history with the approval response.
  const posts = browser.requests.filter((r) => r.method === 'POST' && r.url === `${server.base}/api/chat`);
  assert.equal(posts.length, 2);
  assert.deepEqual(browser.foreign(), []);
});

test('deny a call: the card shows it was denied and the tool never runs', { timeout: 60_000 }, async () => {
  const { page } = browser;
  await page.getByRole('button', { name: 'New chat' }).click();
  await waitForPage(page, (s) => s.messages.length === 0 && s.status === 'ready', 'an empty chat');
  await sendMessage(page, 'Save a note: never written');
  await waitForPage(page, (s) => s.assistants[0]?.tools[0]?.state === 'approval-requested', 'the call waiting for approval');
  await page.getByRole('button', { name: 'Deny' }).click();
  const done = await waitForPage(
    page,
    (s) => s.status === 'ready' && s.assistants[0]?.tools[0]?.state === 'output-denied' && s.assistants[0].text.length > 0,
    'the denied card and the answer',
  );
  assert.equal(done.assistants.length, 1);
  assert.match(done.assistants[0].text, /did not run save_note/);
  assert.deepEqual(noteFiles().filter((f) => f.startsWith('never')), []);
  await screenshot(page, 'browser-b-denied.png');
});
