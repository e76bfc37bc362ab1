// (a) The page streams a reply: text appears while the run is still streaming, then the whole
// reply is there, with the status line following along. Nothing is fetched from outside.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import {
  checkPrerequisites, openBrowser, readPage, referenceReply, screenshot, sendMessage, startServer, waitForPage, WAIT_MS,
} from '../lib/helpers.js';

const PROMPT = 'Hello from the browser test';
let server;
let browser;

before(async () => {
  checkPrerequisites();
  server = await startServer({ demoDelay: 0.03 });
  browser = await openBrowser(server.base);
});

after(async () => {
  const errors = browser?.errors() ?? [];
  await browser?.close();
  await server?.stop();
  assert.deepEqual(errors, [], 'no errors in the page console');
});

test('the page loads from the server and makes no request elsewhere', { timeout: 60_000 }, async () => {
  const response = await browser.page.goto(`${server.base}/`);
  assert.equal(response.status(), 200);
  assert.match(response.headers()['content-type'], /^text\/html/);
  await waitForPage(browser.page, (s) => s.status === 'ready', 'status ready');
  assert.equal(await browser.page.title(), 'durable-harness chat');
  // the empty state offers the demo prompts
  assert.ok(await browser.page.getByRole('button', { name: 'Save a note: buy milk' }).isVisible());
  assert.deepEqual(browser.foreign(), []);
});

test('a sent message streams its reply into one assistant message', { timeout: 60_000 }, async () => {
  const { page } = browser;
  const expected = await referenceReply(server.base, PROMPT);
  assert.ok(expected.length > 100, expected);

  await sendMessage(page, PROMPT);
  const partial = await waitForPage(
    page,
    (s) => s.status === 'streaming' && s.assistants.length === 1 && s.assistants[0].text.length > 0,
    'the first words of the reply while the run is streaming',
  );
  assert.ok(partial.assistants[0].text.length < expected.length, 'text was seen before the reply was complete');
  assert.ok(expected.startsWith(partial.assistants[0].text), `${partial.assistants[0].text} is a prefix of the reply`);
  assert.match(partial.statusText, /^Streaming \(run wrun_[0-9a-z]{26}\)/);
  assert.ok(partial.storedRun, 'the active run id is kept in localStorage while it streams');
  await screenshot(page, 'browser-a-streaming.png');

  const done = await waitForPage(
    page,
    (s) => s.status === 'ready' && s.assistants[0]?.text === expected,
    'the whole reply and status ready',
    WAIT_MS,
  );
  assert.equal(done.users.length, 1);
  assert.equal(done.users[0].text, PROMPT);
  assert.equal(done.assistants.length, 1);
  assert.equal(done.statusText, 'Ready');
  assert.equal(done.storedRun, null, 'the run id is cleared when the stream ends');
  assert.deepEqual(done.storedChat.messages.map((m) => m.role), ['user', 'assistant']);
  assert.equal(await page.getByRole('textbox', { name: 'Message' }).inputValue(), '');
  await screenshot(page, 'browser-a-stream.png');

  const chatPosts = browser.requests.filter((r) => r.method === 'POST' && r.url === `${server.base}/api/chat`);
  assert.equal(chatPosts.length, 1);
  assert.deepEqual(browser.foreign(), []);
});

test('a weather question shows the reasoning, the tool card and the answer', { timeout: 60_000 }, async () => {
  const { page } = browser;
  await sendMessage(page, 'What is the weather in Paris?');
  const done = await waitForPage(
    page,
    (s) => s.status === 'ready' && s.assistants.length === 2 && /in Paris\./.test(s.assistants[1].text),
    'the weather answer',
  );
  const [, weather] = done.assistants;
  assert.match(weather.reasoning, /I will call get_weather/);
  assert.deepEqual(weather.tools.map((t) => [t.name, t.state]), [['get_weather', 'output-available']]);
  assert.equal(JSON.parse(weather.tools[0].output).city, 'Paris');
  // reasoning is shown, but subdued (muted colour, italic)
  const style = await page.locator('[data-part="reasoning"]').last().evaluate((node) => {
    const css = getComputedStyle(node);
    return { fontStyle: css.fontStyle, color: css.color, text: getComputedStyle(document.body).color };
  });
  assert.equal(style.fontStyle, 'italic');
  assert.notEqual(style.color, style.text);
  await screenshot(page, 'browser-a-weather.png');
  // the same chat on a phone-sized screen in dark mode
  await page.setViewportSize({ width: 390, height: 800 });
  await page.emulateMedia({ colorScheme: 'dark' });
  assert.equal(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth), true, 'no sideways scrolling');
  await screenshot(page, 'browser-a-weather-narrow-dark.png');
  assert.deepEqual(browser.foreign(), []);
});

test('the React page runs under the server\'s CSP without a violation (and the CSP is enforced)', { timeout: 60_000 }, async () => {
  const { page } = browser;
  const response = await page.reload();
  const csp = response.headers()['content-security-policy'];
  assert.match(csp, /script-src 'self';/);
  assert.match(csp, /style-src 'self';/);
  const state = await waitForPage(page, (s) => s.status === 'ready' && s.assistants.length === 2, 'the saved chat rendered');
  assert.deepEqual(state.assistants[1].tools.map((t) => t.state), ['output-available']);
  assert.deepEqual(await browser.cspViolations(), [], 'rendering the chat, tool card and reasoning needs nothing the CSP forbids');
  // The control, in a second tab (whose console the errors check does not read): an inline style
  // is refused, and the recorder sees it.
  const probe = await browser.context.newPage();
  try {
    await probe.goto(`${server.base}/`);
    await probe.evaluate(() => {
      const style = document.createElement('style');
      style.textContent = 'body { outline: 1px solid red; }';
      document.head.append(style);
    });
    await probe.waitForFunction(() => window.__cspViolations.length > 0, null, { timeout: WAIT_MS });
    assert.deepEqual(await probe.evaluate(() => window.__cspViolations), ['style-src-elem blocked inline']);
  } finally {
    await probe.close();
  }
});
