// An assistant's text renders as Markdown (bold, code, lists, links), and HTML in the model's
// text is shown as text: no element, no handler, nothing executed. The server's agent is
// tests/browser/agents.py:markdown_agent, whose reply holds both.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { checkPrerequisites, openBrowser, screenshot, sendMessage, startServer, waitForPage } from '../lib/helpers.js';

let server;
let browser;

before(async () => {
  checkPrerequisites();
  server = await startServer({ agent: 'tests.browser.agents:markdown_agent' });
  browser = await openBrowser(server.base);
});

after(async () => {
  const errors = browser?.errors() ?? [];
  await browser?.close();
  await server?.stop();
  assert.deepEqual(errors, [], 'no errors in the page console');
});

test('Markdown renders, and HTML in the model\'s text stays text', { timeout: 60_000 }, async () => {
  const { page } = browser;
  await page.goto(`${server.base}/`);
  await waitForPage(page, (s) => s.status === 'ready', 'status ready');
  await sendMessage(page, 'Show me some **Markdown** <b>please</b>');
  await waitForPage(page, (s) => s.status === 'ready' && /bad link/.test(s.assistants[0]?.text ?? ''), 'the whole reply');

  const reply = page.locator('article[data-role="assistant"] [data-part="text"]');
  const seen = await reply.evaluate((node) => ({
    strong: [...node.querySelectorAll('strong')].map((e) => e.textContent),
    code: [...node.querySelectorAll('code')].map((e) => e.textContent.trim()),
    pre: [...node.querySelectorAll('pre')].map((e) => e.textContent.trim()),
    items: [...node.querySelectorAll('ul > li')].map((e) => e.textContent),
    links: [...node.querySelectorAll('a')].map((a) => ({ text: a.textContent, href: a.getAttribute('href'), rel: a.rel, target: a.target })),
    elements: [...node.querySelectorAll('*')].map((e) => e.tagName.toLowerCase()),
    handlers: [...node.querySelectorAll('*')].flatMap((e) => [...e.attributes].map((a) => a.name)).filter((n) => n.startsWith('on')),
    text: node.textContent,
    pwned: window.pwned,
  }));
  assert.deepEqual(seen.strong, ['bold text']);
  assert.deepEqual(seen.code, ['inline code', 'fenced code']);
  assert.deepEqual(seen.pre, ['fenced code']);
  assert.deepEqual(seen.items, ['first item', 'second item with a link']);
  const [docs, bad] = seen.links;
  assert.deepEqual(docs, { text: 'a link', href: 'https://example.com/docs', rel: 'noopener noreferrer nofollow', target: '_blank' });
  assert.equal(bad.text, 'a bad link');
  assert.ok(!/^\s*javascript:/i.test(bad.href ?? ''), `the javascript: URL is not a link target (${bad.href})`);
  // The HTML is there, as the characters the model wrote, and made no element.
  assert.ok(seen.text.includes('<script>window.pwned = \'script\'</script>'), seen.text);
  assert.ok(seen.text.includes('<img src="x" onerror="window.pwned = \'img\'">'), seen.text);
  for (const tag of ['script', 'img', 'b', 'iframe', 'style']) assert.ok(!seen.elements.includes(tag), `no <${tag}> element`);
  assert.deepEqual(seen.handlers, [], 'no event handler attribute');
  assert.equal(seen.pwned, undefined, 'nothing in the reply ran');
  // The user's own text is shown as typed (not as Markdown).
  const user = await page.locator('article[data-role="user"] [data-part="text"]').evaluate((n) => ({ text: n.textContent, tags: n.querySelectorAll('*').length }));
  assert.deepEqual(user, { text: 'Show me some **Markdown** <b>please</b>', tags: 0 });
  // Clicking the bad link does nothing either.
  await page.getByRole('link', { name: 'a bad link' }).click({ noWaitAfter: true }).catch(() => {});
  assert.equal(await page.evaluate(() => window.pwned), undefined);
  assert.deepEqual(await browser.cspViolations(), [], 'nothing was even tried against the CSP');
  await screenshot(page, 'browser-markdown.png');
});
