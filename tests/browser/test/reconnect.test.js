// (d) The connection goes away mid-reply and the page reconnects by itself, with backoff:
// * a dropped connection: the POST's stream breaks off and the transport's reconnect GET fails
//   ("Failed to fetch"); the page says it is reconnecting and, once the network is back, replays
//   the run from chunk 0 onto the history as it was POSTed: the reply ends up whole, once, in the
//   same assistant message;
// * the server killed (SIGKILL) and started again on the same data while the page is open: the
//   page reconnects to the restarted server, which goes on with the run, and the message completes.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';

import {
  checkPrerequisites, openBrowser, referenceReply, screenshot, sendMessage, startServer, waitForPage,
} from '../lib/helpers.js';

let server;
let browser;
const dirs = [];

before(async () => {
  checkPrerequisites();
  server = await startServer({ demoDelay: 0.02 });
  browser = await openBrowser(server.base);
});

after(async () => {
  // The GETs this test fails, and those to the server while it was down.
  const errors = browser?.errors(/net::ERR_(INTERNET_DISCONNECTED|CONNECTION_REFUSED|CONNECTION_RESET|EMPTY_RESPONSE|INCOMPLETE_CHUNKED_ENCODING)|Error in chat POST stream/) ?? [];
  await browser?.close();
  await server?.stop();
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  assert.deepEqual(errors, [], 'no errors in the page console');
});

const streamGets = (base, runId) => browser.requests.filter(
  (r) => r.method === 'GET' && r.url.startsWith(`${base}/api/chat/${runId}/stream?startIndex=`),
);

test('a dropped connection: the page reconnects by itself, no word lost or doubled', { timeout: 90_000 }, async () => {
  const { page } = browser;
  const prompt = 'Tell me about dropped connections';
  const reference = referenceReply(server.base, prompt);
  await page.goto(`${server.base}/`);
  await waitForPage(page, (s) => s.status === 'ready', 'status ready');
  // The POST's stream breaks off after its first ten events (no finish), and every stream GET
  // finds the network gone: a real "Failed to fetch" in the page, again at each reconnect.
  await page.route(`${server.base}/api/chat`, async (route) => {
    const response = await route.fetch();
    const events = (await response.text()).split('\n\n').filter(Boolean);
    assert.ok(events.length > 20, 'the reply is long enough to break off');
    await route.fulfill({ response, body: `${events.slice(0, 10).join('\n\n')}\n\n` });
  });
  await page.route(/\/api\/chat\/[^/]+\/stream/, (route) => route.abort('internetdisconnected'));
  try {
    await sendMessage(page, prompt);
    const dropped = await waitForPage(page, (s) => s.status === 'reconnecting', 'the page reconnecting');
    assert.match(dropped.statusText, /^Connection lost \(Error: Failed to fetch\)\. Reconnecting in \d+ s…$/);
    assert.ok(dropped.storedRun, 'the run is still active, and kept');
    assert.deepEqual(dropped.storedChat.messages.map((m) => m.role), ['user'], 'the history as POSTed');
    const { runId } = JSON.parse(dropped.storedRun);
    // It tries again by itself (and fails while the network is down), waiting longer each time.
    const tries = streamGets(server.base, runId).length;
    await waitForPage(page, () => streamGets(server.base, runId).length >= tries + 2, 'two more tries by the page itself', 30_000);
    await screenshot(page, 'browser-d-dropped.png');

    await page.unrouteAll({ behavior: 'wait' });
    const getsBefore = streamGets(server.base, runId).length;
    const done = await waitForPage(page, (s) => s.status === 'ready' && s.storedRun == null, 'the reply finished after the reconnect', 60_000);
    assert.equal(done.assistants.length, 1, 'exactly one assistant message');
    const run = await (await fetch(`${server.base}/api/runs/${runId}`)).json();
    assert.equal(done.assistants[0].id, run.messageId, 'the run\'s assistant message id');
    assert.equal(done.assistants[0].text, await reference, 'the text is the uninterrupted reply');
    const replays = streamGets(server.base, runId).slice(getsBefore);
    assert.deepEqual(replays.map((r) => new URL(r.url).searchParams.get('startIndex')), ['0']);
  } finally {
    await page.unrouteAll();
  }
});

test('the server killed and restarted on the same data: the page reconnects and the message completes', { timeout: 120_000 }, async () => {
  const { page } = browser;
  const prompt = 'Tell me about restarts';
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'dh-browser-restart-'));
  dirs.push(dataDir);
  await server.stop();
  // 0.1 s a word: the reply streams for a few seconds, time enough to kill the server mid-way.
  server = await startServer({ demoDelay: 0.1, dataDir });
  const { port, base } = server;
  const reference = await referenceReply(base, prompt);
  await page.goto(`${base}/`);
  await page.getByRole('button', { name: 'New chat' }).click();
  await waitForPage(page, (s) => s.status === 'ready' && s.messages.length === 0, 'an empty chat');

  await sendMessage(page, prompt);
  const midway = await waitForPage(page, (s) => s.status === 'streaming' && s.storedRun != null && s.assistants[0]?.text.length > 0, 'the reply streaming');
  await server.kill();
  const cut = await waitForPage(page, (s) => s.status === 'reconnecting', 'the page reconnecting to the killed server');
  assert.equal(cut.storedRun, midway.storedRun, 'the server was killed mid-reply: the run had not ended');
  const { runId } = JSON.parse(midway.storedRun);

  server = await startServer({ demoDelay: 0.1, dataDir, port });
  const done = await waitForPage(page, (s) => s.status === 'ready' && s.storedRun == null, 'the reply finished on the restarted server', 90_000);
  assert.equal(done.assistants.length, 1, 'exactly one assistant message');
  assert.equal(done.assistants[0].id, midway.assistants[0].id, 'the same assistant message id');
  assert.equal(done.assistants[0].text, reference, 'the text is the uninterrupted reply');
  const run = await (await fetch(`${base}/api/runs/${runId}`)).json();
  assert.equal(run.status, 'finished');
  await screenshot(page, 'browser-d-restarted.png');
});
