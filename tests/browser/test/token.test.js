// The optional API token: without it a token-mode server answers 401 and the page says so; with
// it (Settings, kept in localStorage) the POST and the resume GET both carry Authorization: Bearer.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, before, test } from 'node:test';

import { checkPrerequisites, openBrowser, screenshot, sendMessage, startServer, waitForPage, wordCount } from '../lib/helpers.js';

const TOKEN = 'browser-test-token-0123456789';
let server;
let browser;

before(async () => {
  checkPrerequisites();
  const hash = createHash('sha256').update(TOKEN).digest('hex');
  server = await startServer({ demoDelay: 0.1, env: { AUTH_MODE: 'token', AUTH_TOKEN_HASHES: `tester:${hash}` } });
  browser = await openBrowser(server.base);
  browser.context.on('request', (request) => {
    if (request.url().includes('/api/')) {
      browser.apiAuth ??= [];
      browser.apiAuth.push({ method: request.method(), url: request.url(), authorization: request.headers().authorization });
    }
  });
});

after(async () => {
  const errors = browser?.errors(/status of 401/) ?? [];
  await browser?.close();
  await server?.stop();
  assert.deepEqual(errors, [], 'no errors in the page console');
});

test('the token field authorizes sending and resuming', { timeout: 90_000 }, async () => {
  const { page } = browser;
  await page.goto(`${server.base}/`);
  await waitForPage(page, (s) => s.status === 'ready', 'status ready');

  await sendMessage(page, 'Hello without a token');
  const denied = await waitForPage(page, (s) => s.status === 'error', 'an error status');
  assert.match(denied.statusText, /^Error \(HTTP 401\): .*Set an API token in Settings\.$/);
  assert.ok(await page.getByRole('button', { name: 'Dismiss' }).isVisible());
  await screenshot(page, 'browser-token-401.png');
  await page.getByRole('button', { name: 'Dismiss' }).click();
  await waitForPage(page, (s) => s.status === 'ready', 'the error dismissed');

  await page.getByText('Settings').click();
  await page.getByLabel('API token').fill(TOKEN);
  assert.equal(await page.evaluate(() => localStorage.getItem('durable-harness:token')), JSON.stringify(TOKEN));

  await sendMessage(page, 'Hello with a token');
  const midway = await waitForPage(
    page,
    (s) => s.status === 'streaming' && s.storedRun != null && wordCount(s.assistants.at(-1)?.text ?? '') >= 3,
    'the reply streaming',
  );
  const { runId } = JSON.parse(midway.storedRun);
  await page.reload();
  const done = await waitForPage(
    page,
    (s) => s.status === 'ready' && s.storedRun == null && /several slices\)\.$/.test(s.assistants.at(-1)?.text ?? ''),
    'the resumed reply finished',
    30_000,
  );
  assert.equal(done.assistants.length, 1);
  assert.match(done.assistants[0].text, /^You said: "Hello with a token"\./);
  const resumeGets = browser.apiAuth.filter((r) => r.method === 'GET' && r.url.includes(`/api/chat/${runId}/stream`));
  assert.equal(resumeGets.length, 1);
  assert.equal(resumeGets[0].authorization, `Bearer ${TOKEN}`);
  const posts = browser.apiAuth.filter((r) => r.method === 'POST' && r.url.endsWith('/api/chat'));
  assert.deepEqual(posts.map((r) => r.authorization), [undefined, `Bearer ${TOKEN}`]);
  assert.equal(await page.getByLabel('API token').inputValue(), TOKEN, 'the token survives the reload');
});
