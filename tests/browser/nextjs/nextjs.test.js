// The Next.js example (examples/nextjs, built by `next build`) in Chromium against the local kit in
// token mode: the browser talks only to the Next.js app, whose route handler adds the bearer token;
// a weather turn (tool card, answer), an approval, Stop, and a reload mid-reply that resumes it.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, test } from 'node:test';

import {
  checkPrerequisites, freePort, openBrowser, referenceReply, REPO_ROOT, screenshot, sendMessage, startServer, WAIT_MS,
  waitForPage, wordCount,
} from '../lib/helpers.js';

const APP = path.join(REPO_ROOT, 'examples', 'nextjs');
const TOKEN = 'nextjs-example-token-0123456789';
const LONG = 'Tell me about durable runs';
let kit;
let next;
let browser;

/** `next start` of the built example on a free port, pointed at `upstream`; resolves once it answers. */
async function startNext(upstream) {
  if (!existsSync(path.join(APP, '.next', 'BUILD_ID'))) throw new Error('the example is not built: run `make test-nextjs`');
  const port = await freePort();
  const child = spawn(process.execPath, [path.join(APP, 'node_modules', 'next', 'dist', 'bin', 'next'), 'start',
    '-H', '127.0.0.1', '-p', String(port)], {
    cwd: APP,
    detached: true, // its own process group: next start runs the server in a child process
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, NEXT_TELEMETRY_DISABLED: '1', DURABLE_HARNESS_URL: upstream, DURABLE_HARNESS_TOKEN: TOKEN },
  });
  let output = '';
  child.stdout.setEncoding('utf8').on('data', (d) => { output += d; });
  child.stderr.setEncoding('utf8').on('data', (d) => { output += d; });
  const exited = new Promise((resolve) => child.on('exit', resolve));
  const base = `http://127.0.0.1:${port}`;
  const stop = async () => {
    try { process.kill(-child.pid, 'SIGTERM'); } catch { /* gone */ }
    await Promise.race([exited, sleep(5000)]);
    try { process.kill(-child.pid, 'SIGKILL'); } catch { /* gone */ }
  };
  for (let i = 0; i < 300 && child.exitCode == null; i++) {
    try {
      if ((await fetch(base, { signal: AbortSignal.timeout(2000) })).ok) return { base, stop, logs: () => output };
    } catch { /* not listening yet */ }
    await sleep(100); // polling a starting process: there is no event to wait for
  }
  await stop();
  throw new Error(`next start did not come up on ${base}\n${output}`);
}

/** The example's page, read from its DOM and localStorage. */
function readExample(page) {
  return page.evaluate(() => {
    const messages = [...document.querySelectorAll('#messages > article')].map((article) => ({
      role: article.dataset.role,
      id: article.dataset.messageId,
      text: [...article.querySelectorAll('[data-part="text"]')].map((p) => p.textContent).join(''),
      tools: [...article.querySelectorAll('[data-part="tool"]')].map((card) => ({
        name: card.dataset.tool, state: card.dataset.state, output: card.querySelector('[data-field="output"]')?.textContent,
      })),
    }));
    return {
      status: document.getElementById('status')?.dataset.status,
      statusText: document.getElementById('status')?.textContent,
      assistants: messages.filter((m) => m.role === 'assistant'),
      users: messages.filter((m) => m.role === 'user'),
      storedRun: JSON.parse(localStorage.getItem('nextjs-example:run') ?? 'null'),
    };
  });
}

/** waitForPage on the example's page. */
const waitFor = (page, predicate, description, timeout = WAIT_MS) => waitForPage(page, predicate, description, timeout, readExample);

async function newChat(page) {
  await page.goto(next.base);
  await page.getByRole('button', { name: 'New chat' }).click();
  return waitFor(page, (s) => s.status === 'ready' && s.assistants.length === 0, 'an empty chat');
}

before(async () => {
  checkPrerequisites({ page: false }); // the kit's own page is off: the Next.js app is the page
  const hash = createHash('sha256').update(TOKEN).digest('hex');
  // ~45 words at 0.15 s a word: a long reply streams for about 7 s, time enough to reload mid-way.
  kit = await startServer({ demoDelay: 0.15, env: { AUTH_MODE: 'token', AUTH_TOKEN_HASHES: `next:${hash}`, SERVE_WEB_PAGE: '0' } });
  next = await startNext(kit.base);
  browser = await openBrowser(next.base);
  browser.headers = [];
  browser.context.on('request', (request) => browser.headers.push(request.headers()));
});

after(async () => {
  const errors = browser?.errors(/status of 404/) ?? []; // the unknown run's resume GET
  await browser?.close();
  await next?.stop();
  await kit?.stop();
  assert.deepEqual(errors, [], 'no errors in the page console');
});

test('a turn: the tool card and the answer, through the route handler that adds the token', { timeout: 90_000 }, async () => {
  const { page } = browser;
  await newChat(page);
  await sendMessage(page, 'What is the weather in Paris?');
  const done = await waitFor(page, (s) => s.status === 'ready' && s.assistants[0]?.tools[0]?.state === 'output-available'
    && s.assistants[0].text.length > 0, 'the tool result and the answer');
  assert.equal(done.assistants.length, 1);
  assert.equal(done.assistants[0].tools[0].name, 'get_weather');
  assert.equal(JSON.parse(done.assistants[0].tools[0].output).city, 'Paris');
  assert.equal(done.storedRun, null, 'the run is forgotten once its stream finished');
  await screenshot(page, 'nextjs-turn.png');
  // The browser only ever spoke to the Next.js app, and never with a token: the kit is in token
  // mode, so the turn went through because the route handler added it.
  assert.deepEqual(browser.foreign(), []);
  assert.ok(browser.requests.some((r) => r.method === 'POST' && r.url === `${next.base}/api/chat`));
  assert.ok(browser.headers.every((h) => h.authorization == null));
  assert.equal((await fetch(`${kit.base}/api/chat`, { method: 'POST', body: '{}' })).status, 401, 'the kit wants a token');
  // Nothing the browser can load holds the token (it is read at run time, on the server only).
  const statics = path.join(APP, '.next', 'static');
  for (const file of readdirSync(statics, { recursive: true, withFileTypes: true })) {
    if (file.isFile()) assert.ok(!readFileSync(path.join(file.parentPath, file.name), 'utf8').includes(TOKEN), file.name);
  }
  assert.ok(!(await page.content()).includes(TOKEN));
  // The proxy forwards only what the chat needs.
  assert.equal((await fetch(`${next.base}/api/runs`)).status, 404);
});

test('an approval: Approve runs the tool and the reply goes on in the same message', { timeout: 90_000 }, async () => {
  const { page } = browser;
  await newChat(page);
  await sendMessage(page, 'Save a note: buy milk');
  await waitFor(page, (s) => s.assistants[0]?.tools[0]?.state === 'approval-requested', 'the approval request');
  await page.getByRole('button', { name: 'Approve' }).click();
  const done = await waitFor(page, (s) => s.status === 'ready' && s.assistants[0]?.tools[0]?.state === 'output-available',
    'the approved call ran');
  assert.equal(done.assistants.length, 1, 'the continuation is in the same assistant message');
  assert.equal(readdirSync(kit.notesDir).length, 1, 'the note was written');
});

test('a reload mid-reply resumes it by the run id, without losing or duplicating a word', { timeout: 90_000 }, async () => {
  const { page } = browser;
  const reference = referenceReply(next.base, LONG); // the uninterrupted reply (deterministic demo model)
  await newChat(page);
  await sendMessage(page, LONG);
  const before = await waitFor(page, (s) => s.status === 'streaming' && s.storedRun != null
    && wordCount(s.assistants[0]?.text ?? '') >= 6, 'a few streamed words and the run id stored');
  const runId = before.storedRun;
  assert.ok(wordCount(before.assistants[0].text) < 30, 'reloading well before the reply is complete');
  await page.reload();
  const resumed = await waitFor(page, (s) => s.status === 'streaming' && s.assistants.length === 1
    && s.assistants[0].text.length > before.assistants[0].text.length, 'the resumed reply streaming on');
  assert.ok(resumed.assistants[0].text.startsWith(before.assistants[0].text));
  const done = await waitFor(page, (s) => s.status === 'ready' && s.storedRun == null, 'the resumed reply finished', 30_000);
  assert.equal(done.users.length, 1);
  assert.equal(done.assistants.length, 1, 'exactly one assistant message');
  assert.equal(done.assistants[0].text, await reference, 'the text is the uninterrupted reply');
  const gets = browser.requests.filter((r) => r.method === 'GET' && r.url.startsWith(`${next.base}/api/chat/${runId}/stream`));
  assert.deepEqual(gets.map((r) => new URL(r.url).searchParams.get('startIndex')), ['0']);
  await screenshot(page, 'nextjs-resumed.png');
});

test('Stop cancels the run on the server', { timeout: 90_000 }, async () => {
  const { page } = browser;
  await newChat(page);
  await sendMessage(page, LONG);
  const streaming = await waitFor(page, (s) => s.status === 'streaming' && s.storedRun != null, 'the reply streaming');
  await page.getByRole('button', { name: 'Stop' }).click();
  await waitFor(page, (s) => s.status === 'ready' && s.storedRun == null, 'the stream ended');
  const res = await fetch(`${kit.base}/api/runs/${streaming.storedRun}`, { headers: { authorization: `Bearer ${TOKEN}` } });
  assert.equal((await res.json()).status, 'cancelled');
});

test('a stored run the server does not know: the resume fails once and the run is forgotten', { timeout: 90_000 }, async () => {
  const { page } = browser;
  await newChat(page);
  const unknown = `wrun_${'0'.repeat(26)}`;
  await page.evaluate((runId) => {
    const chat = { id: 'chat-unknown-run', messages: [{ id: 'u1', role: 'user', parts: [{ type: 'text', text: 'Hello' }] }] };
    localStorage.setItem('nextjs-example:chat', JSON.stringify(chat));
    localStorage.setItem('nextjs-example:run', JSON.stringify(runId));
  }, unknown);
  await page.reload();
  const failed = await waitFor(page, (s) => s.status === 'error' && s.storedRun == null, 'the error, and the run forgotten');
  assert.match(failed.statusText, /404/);
  assert.equal(failed.users.length, 1, 'the history is kept');
  const gets = browser.requests.filter((r) => r.method === 'GET' && r.url.includes(`/api/chat/${unknown}/stream`));
  assert.equal(gets.length, 1, 'asked once, no retry loop');
  await page.reload();
  await waitFor(page, (s) => s.status === 'ready' && s.users.length === 1, 'ready after a reload, nothing to resume');
  assert.equal(browser.requests.filter((r) => r.url.includes(`/api/chat/${unknown}/stream`)).length, 1);
});
