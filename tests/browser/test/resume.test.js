// (c) Reload mid-stream: the page keeps the history and the active run id in localStorage and,
// after the reload, resumes the run (Chat.resumeStream() -> GET /api/chat/<runId>/stream). The
// result is exactly one assistant message whose text is the uninterrupted reply. The same holds
// for a reload during the continuation after an approval: the run's start.messageId (the
// persisted assistant id) makes the resumed continuation replace that message in place.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import {
  checkPrerequisites, openBrowser, referenceReply, screenshot, sendMessage, startServer, waitForPage, wordCount,
} from '../lib/helpers.js';

const PROMPT = 'Tell me about durable runs';
let server;
let browser;

before(async () => {
  checkPrerequisites();
  // ~45 words at 0.15 s a word: the reply streams for about 7 s, time enough to reload mid-way.
  server = await startServer({ demoDelay: 0.15 });
  browser = await openBrowser(server.base);
});

after(async () => {
  const errors = browser?.errors(/status of 404/) ?? []; // the unknown-run test's GET
  await browser?.close();
  await server?.stop();
  assert.deepEqual(errors, [], 'no errors in the page console');
});

const streamGets = (runId) => browser.requests.filter(
  (r) => r.method === 'GET' && r.url.startsWith(`${server.base}/api/chat/${runId}/stream?startIndex=`),
);

test('a reload mid-stream resumes the reply without losing or duplicating a word', { timeout: 90_000 }, async () => {
  const { page } = browser;
  // The same turn through the API (deterministic demo model), read in parallel with the page.
  const reference = referenceReply(server.base, PROMPT);

  await page.goto(`${server.base}/`);
  await waitForPage(page, (s) => s.status === 'ready', 'status ready');
  await sendMessage(page, PROMPT);
  const before = await waitForPage(
    page,
    (s) => s.status === 'streaming' && s.storedRun != null && wordCount(s.assistants[0]?.text ?? '') >= 6,
    'a few streamed words and the run id in localStorage',
  );
  const { runId } = JSON.parse(before.storedRun);
  assert.match(runId, /^wrun_[0-9a-z]{26}$/);
  assert.ok(wordCount(before.assistants[0].text) < 30, 'reloading well before the reply is complete');
  // What is stored while streaming is the history as POSTed: no half-streamed assistant message.
  assert.deepEqual(before.storedChat.messages.map((m) => m.role), ['user']);
  await screenshot(page, 'browser-c-before-reload.png');

  await page.reload();
  const resumed = await waitForPage(
    page,
    (s) => s.status === 'streaming' && s.assistants.length === 1
      && s.assistants[0].text.length > before.assistants[0].text.length,
    'the resumed reply caught up and streaming on after the reload',
  );
  assert.ok(resumed.assistants[0].text.startsWith(before.assistants[0].text));
  assert.match(resumed.statusText, /resumed/);
  await screenshot(page, 'browser-c-resuming.png');
  const expected = await reference;
  assert.ok(wordCount(expected) >= 40, expected);
  assert.ok(resumed.assistants[0].text.length < expected.length, 'the run was still live when the page resumed it');
  assert.deepEqual(streamGets(runId).map((r) => new URL(r.url).searchParams.get('startIndex')), ['0']);

  const done = await waitForPage(
    page,
    (s) => s.status === 'ready' && s.storedRun == null,
    'the resumed reply finished',
    30_000,
  );
  assert.equal(done.users.length, 1);
  assert.equal(done.users[0].text, PROMPT);
  assert.equal(done.assistants.length, 1, 'exactly one assistant message');
  assert.equal(done.assistants[0].text, expected, 'the text is the uninterrupted reply');
  assert.equal(done.assistants[0].id, before.assistants[0].id, 'the same assistant message id (start.messageId)');
  assert.equal(done.messages.length, 2);
  await screenshot(page, 'browser-c-resumed.png');
  assert.deepEqual(await browser.cspViolations(), []);

  // The finished chat was saved: another reload shows it as it is, without asking the server.
  const getsBefore = streamGets(runId).length;
  await page.reload();
  const reloaded = await waitForPage(page, (s) => s.status === 'ready' && s.messages.length === 2, 'the saved chat');
  assert.equal(reloaded.assistants[0].text, expected);
  assert.equal(streamGets(runId).length, getsBefore);
  assert.deepEqual(browser.foreign(), []);
});

test('a reload during the continuation after an approval resumes into the same message', { timeout: 90_000 }, async () => {
  const { page } = browser;
  await page.getByRole('button', { name: 'New chat' }).click();
  await waitForPage(page, (s) => s.messages.length === 0 && s.status === 'ready', 'an empty chat');

  await sendMessage(page, 'Save a note: buy milk');
  const asked = await waitForPage(
    page,
    (s) => s.status === 'ready' && s.assistants[0]?.tools[0]?.state === 'approval-requested',
    'the call waiting for approval',
  );
  await page.getByRole('button', { name: 'Approve' }).click();
  const midway = await waitForPage(
    page,
    (s) => s.status === 'streaming' && s.storedRun != null && wordCount(s.assistants[0]?.text ?? '') >= 2,
    'the continuation streaming its answer',
  );
  const { runId } = JSON.parse(midway.storedRun);
  // The stored history is the one the continuation was POSTed with: the approval answered.
  const storedTool = midway.storedChat.messages.at(-1).parts.find((p) => p.type === 'tool-save_note');
  assert.equal(storedTool.state, 'approval-responded');

  await page.reload();
  const done = await waitForPage(
    page,
    (s) => s.status === 'ready' && s.storedRun == null && s.assistants[0]?.text.endsWith('(This is the demo model.)'),
    'the resumed continuation finished',
    30_000,
  );
  assert.equal(streamGets(runId).length, 1);
  assert.equal(done.assistants.length, 1, 'exactly one assistant message');
  assert.equal(done.assistants[0].id, asked.assistants[0].id, 'replaced in place: the same message id');
  assert.deepEqual(done.assistants[0].tools.map((t) => [t.name, t.state]), [['save_note', 'output-available']]);
  assert.equal(done.assistants[0].text, 'The tool returned: {"saved": "buy-milk.txt", "bytes": 9}. (This is the demo model.)');
  await screenshot(page, 'browser-c-continuation-resumed.png');
});

test('a stored run the server does not know ends in an error, not an endless reconnect', { timeout: 60_000 }, async () => {
  const { page } = browser;
  const saved = await waitForPage(page, (s) => s.status === 'ready' && s.messages.length === 2, 'the previous chat');
  await page.evaluate(() => localStorage.setItem('durable-harness:run', JSON.stringify({ runId: `wrun_${'0'.repeat(26)}`, chatId: 'x' })));
  await page.reload();
  const failed = await waitForPage(page, (s) => s.status === 'error', 'an error status');
  assert.equal(failed.statusText, `Error (HTTP 404): run 'wrun_${'0'.repeat(26)}' not found`);
  assert.equal(failed.storedRun, null, 'the unknown run is forgotten');
  assert.deepEqual(failed.messages.map((m) => m.id), saved.messages.map((m) => m.id), 'the saved history is kept');
  assert.equal(streamGets(`wrun_${'0'.repeat(26)}`).length, 1, 'one GET, no retry loop');
  assert.ok(await page.getByRole('button', { name: 'Reconnect' }).isHidden());
  await screenshot(page, 'browser-c-unknown-run.png');
  await page.getByRole('button', { name: 'Dismiss' }).click();
  await waitForPage(page, (s) => s.status === 'ready', 'the error dismissed');
});

test('Stop cancels the run on the server: its stream ends and nothing resumes after a reload', { timeout: 60_000 }, async () => {
  const { page } = browser;
  await page.getByRole('button', { name: 'New chat' }).click();
  await waitForPage(page, (s) => s.messages.length === 0 && s.status === 'ready', 'an empty chat');
  await sendMessage(page, 'A reply to stop');
  const midway = await waitForPage(
    page,
    (s) => s.status === 'streaming' && s.storedRun != null && wordCount(s.assistants[0]?.text ?? '') >= 3,
    'the reply streaming',
  );
  const { runId } = JSON.parse(midway.storedRun);
  await page.getByRole('button', { name: 'Stop' }).click();
  const stopped = await waitForPage(page, (s) => s.status === 'stopped' && s.storedRun == null, 'the stream ended, stopped');
  const run = await (await fetch(`${server.base}/api/runs/${runId}`)).json();
  assert.equal(run.status, 'cancelled');
  assert.ok(wordCount(stopped.assistants[0].text) < 40, 'the reply was cut short');
  await page.reload();
  const reloaded = await waitForPage(page, (s) => s.status === 'ready' && s.messages.length === 2, 'the saved chat');
  assert.equal(reloaded.assistants[0].text, stopped.assistants[0].text);
  assert.equal(streamGets(runId).length, 0, 'nothing to resume');
});
