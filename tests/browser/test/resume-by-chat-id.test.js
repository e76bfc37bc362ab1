// useChat({ resume: true }) with no client code: the AI SDK's resume calls the transport's
// reconnect with the *chat* id, and GET /api/chat/<chatId>/stream follows that chat's run in
// progress. The app is fixtures/resume-app.jsx (the real @ai-sdk/react, ai and @ai-sdk/workflow of
// web/), bundled here and served at the server's origin by the browser's request routing; its API
// requests go to the real server.
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, test } from 'node:test';

import {
  REPO_ROOT, checkPrerequisites, openBrowser, referenceReply, sendMessage, startServer, waitForPage, wordCount,
} from '../lib/helpers.js';

const PROMPT = 'Tell me about durable runs';
const WEB_MODULES = path.join(REPO_ROOT, 'web', 'node_modules');
let server;
let browser;
let bundle;

before(async () => {
  checkPrerequisites();
  const esbuild = await import(path.join(WEB_MODULES, 'esbuild', 'lib', 'main.js'));
  const built = await esbuild.build({
    entryPoints: [path.join(REPO_ROOT, 'tests', 'browser', 'fixtures', 'resume-app.jsx')],
    nodePaths: [WEB_MODULES], // the page's own packages
    bundle: true,
    write: false,
    jsx: 'automatic',
    format: 'esm',
    define: { 'process.env.NODE_ENV': '"production"' },
    logLevel: 'warning',
  });
  bundle = built.outputFiles[0].text;
  // ~45 words at 0.15 s a word: the reply streams for about 7 s, time enough to reload mid-way.
  server = await startServer({ demoDelay: 0.15 });
  browser = await openBrowser(server.base);
  await browser.page.route(`${server.base}/fixture/**`, (route) => {
    const url = new URL(route.request().url());
    if (url.pathname === '/fixture/app.js') {
      return route.fulfill({ status: 200, contentType: 'text/javascript', body: bundle });
    }
    return route.fulfill({
      status: 200,
      contentType: 'text/html',
      body: '<!doctype html><html><body><div id="app"></div><script type="module" src="/fixture/app.js"></script></body></html>',
    });
  });
});

after(async () => {
  const errors = browser?.errors() ?? [];
  await browser?.close();
  await server?.stop();
  assert.deepEqual(errors, [], 'no errors in the page console');
});

const streamGets = (id) => browser.requests.filter(
  (r) => r.method === 'GET' && r.url.startsWith(`${server.base}/api/chat/${id}/stream?startIndex=`),
);

test('a reload mid-stream resumes the reply by chat id, with no client code', { timeout: 90_000 }, async () => {
  const { page } = browser;
  const chatId = 'chat-resume-1';
  const reference = referenceReply(server.base, PROMPT);
  await page.goto(`${server.base}/fixture/index.html?chat=${chatId}`);
  // On load, useChat's resume asks for the chat's stream: a chat with no run has nothing to resume.
  await waitForPage(page, (s) => s.status === 'ready' && streamGets(chatId).length === 1, 'the first resume, a no-op');
  await sendMessage(page, PROMPT);
  const before = await waitForPage(
    page, (s) => s.status === 'streaming' && wordCount(s.assistants[0]?.text ?? '') >= 6, 'a few streamed words',
  );
  assert.ok(wordCount(before.assistants[0].text) < 30, 'reloading well before the reply is complete');

  await page.reload();
  const resumed = await waitForPage(
    page,
    (s) => s.status === 'streaming' && s.assistants.length === 1 && wordCount(s.assistants[0].text) > 0,
    'the reply resumed after the reload',
  );
  const expected = await reference;
  assert.ok(resumed.assistants[0].text.length < expected.length, 'the run was still live when the page resumed it');
  const done = await waitForPage(page, (s) => s.status === 'ready', 'the resumed reply finished', 30_000);
  assert.equal(done.assistants.length, 1, 'exactly one assistant message');
  assert.equal(done.assistants[0].text, expected, 'the text is the uninterrupted reply');
  assert.equal(done.assistants[0].id, before.assistants[0].id, 'the same assistant message id (start.messageId)');
  // The resumes named the chat, never a run: the load's, then the reload's.
  assert.equal(streamGets(chatId).length, 2);
  assert.deepEqual(browser.requests.filter((r) => r.url.includes('/stream?') && !r.url.includes(chatId)), []);
});

test('a reload after the reply ended has nothing to resume and adds nothing', { timeout: 60_000 }, async () => {
  const { page } = browser;
  const chatId = 'chat-resume-2';
  await page.goto(`${server.base}/fixture/index.html?chat=${chatId}`);
  await waitForPage(page, (s) => s.status === 'ready' && streamGets(chatId).length === 1, 'the first resume');
  await sendMessage(page, 'What is the weather in Paris?');
  await waitForPage(page, (s) => s.status === 'ready' && s.assistants.length === 1, 'the reply finished', 30_000);
  const answered = page.waitForResponse((r) => r.url().startsWith(`${server.base}/api/chat/${chatId}/stream?`));
  await page.reload();
  const response = await answered;
  assert.equal(response.status(), 200);
  assert.equal(await response.text(), 'data: {"type":"finish"}\n\ndata: [DONE]\n\n');
  const after = await waitForPage(page, (s) => s.status === 'ready' && streamGets(chatId).length === 2, 'ready again');
  assert.deepEqual(after.messages, [], 'no message added (this app keeps none)');
});
