// (d) A dropped connection: the POST's stream breaks off and the transport's reconnect GET fails
// ("Failed to fetch"). The status line offers Reconnect, which replays the run from chunk 0 onto
// the history as it was POSTed: the reply ends up whole, once, in the same assistant message.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import {
  checkPrerequisites, openBrowser, referenceReply, screenshot, sendMessage, startServer, waitForPage,
} from '../lib/helpers.js';

let server;
let browser;

before(async () => {
  checkPrerequisites();
  server = await startServer({ demoDelay: 0.02 });
  browser = await openBrowser(server.base);
});

after(async () => {
  const errors = browser?.errors(/net::ERR_INTERNET_DISCONNECTED/) ?? []; // the GET this test fails
  await browser?.close();
  await server?.stop();
  assert.deepEqual(errors, [], 'no errors in the page console');
});

const streamGets = (runId) => browser.requests.filter(
  (r) => r.method === 'GET' && r.url.startsWith(`${server.base}/api/chat/${runId}/stream?startIndex=`),
);

test('a dropped connection: Reconnect replays the run onto the saved history, no word lost or doubled', { timeout: 90_000 }, async () => {
  const { page } = browser;
  const prompt = 'Tell me about dropped connections';
  const reference = referenceReply(server.base, prompt);
  await page.goto(`${server.base}/`);
  await waitForPage(page, (s) => s.status === 'ready', 'status ready');
  // The POST's stream breaks off after its first ten events (no finish), and the transport's
  // reconnect GET then finds the network gone: a real "Failed to fetch" in the page.
  await page.route(`${server.base}/api/chat`, async (route) => {
    const response = await route.fetch();
    const events = (await response.text()).split('\n\n').filter(Boolean);
    assert.ok(events.length > 20, 'the reply is long enough to break off');
    await route.fulfill({ response, body: `${events.slice(0, 10).join('\n\n')}\n\n` });
  });
  await page.route(/\/api\/chat\/[^/]+\/stream/, (route) => route.abort('internetdisconnected'));
  try {
    await sendMessage(page, prompt);
    const dropped = await waitForPage(page, (s) => s.status === 'error' && s.assistants.length === 1, 'the dropped connection');
    assert.equal(dropped.statusText, 'Error: Failed to fetch');
    assert.ok(dropped.assistants[0].text.length > 0, 'part of the reply arrived before the drop');
    assert.ok(dropped.storedRun, 'the run is still active, and kept');
    assert.deepEqual(dropped.storedChat.messages.map((m) => m.role), ['user'], 'the history as POSTed');
    assert.ok(await page.getByRole('button', { name: 'Reconnect' }).isVisible());
    await screenshot(page, 'browser-d-dropped.png');
    await page.unrouteAll({ behavior: 'wait' });

    const { runId } = JSON.parse(dropped.storedRun);
    const getsBefore = streamGets(runId).length;
    await page.getByRole('button', { name: 'Reconnect' }).click();
    const done = await waitForPage(page, (s) => s.status === 'ready' && s.storedRun == null, 'the reply finished after Reconnect', 30_000);
    assert.equal(done.assistants.length, 1, 'exactly one assistant message');
    assert.equal(done.assistants[0].id, dropped.assistants[0].id, 'the same assistant message id');
    assert.equal(done.assistants[0].text, await reference, 'the text is the uninterrupted reply');
    const replays = streamGets(runId).slice(getsBefore);
    assert.deepEqual(replays.map((r) => new URL(r.url).searchParams.get('startIndex')), ['0']);
  } finally {
    await page.unrouteAll();
  }
});
