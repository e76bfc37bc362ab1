// A phone-width screen (375 px): tool cards are one line until opened (a call waiting for approval
// opens by itself, its buttons within the screen), nothing scrolls sideways, and the message box
// stays on screen and usable. The runs inspector at the same width does not scroll sideways either.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { checkPrerequisites, openBrowser, screenshot, sendMessage, startServer, waitForPage } from '../lib/helpers.js';

const WIDTH = 375;
let server;
let browser;

before(async () => {
  checkPrerequisites();
  server = await startServer();
  browser = await openBrowser(server.base);
  await browser.page.setViewportSize({ width: WIDTH, height: 740 });
});

after(async () => {
  const errors = browser?.errors() ?? [];
  await browser?.close();
  await server?.stop();
  assert.deepEqual(errors, [], 'no errors in the page console');
});

/** Sideways overflow of the document, and where the message box is, in CSS pixels. */
function layout(page) {
  return page.evaluate(() => {
    const box = document.getElementById('prompt')?.getBoundingClientRect();
    return {
      overflow: document.documentElement.scrollWidth - window.innerWidth,
      height: window.innerHeight,
      prompt: box && { top: box.top, bottom: box.bottom, left: box.left, right: box.right },
      cards: [...document.querySelectorAll('[data-part="tool"]')].map((card) => ({
        state: card.dataset.state,
        open: card.querySelector('details').open,
        height: card.getBoundingClientRect().height,
        summary: card.querySelector('summary').getBoundingClientRect().height,
      })),
    };
  });
}

test('at 375 px: tool cards one line until opened, no sideways scroll, the message box on screen', { timeout: 60_000 }, async () => {
  const { page } = browser;
  await page.goto(`${server.base}/`);
  await waitForPage(page, (s) => s.status === 'ready', 'status ready');
  await sendMessage(page, 'What is the weather in Paris?');
  await waitForPage(page, (s) => s.status === 'ready' && s.assistants[0]?.tools[0]?.state === 'output-available', 'the weather reply');

  const shown = await layout(page);
  assert.ok(shown.overflow <= 0, `no sideways scrolling (overflow ${shown.overflow} px)`);
  const [card] = shown.cards;
  assert.equal(card.open, false, 'the card is closed');
  // One line: the card is its summary plus the card's padding and border, nothing more.
  assert.ok(card.height < card.summary + 30, `one line (card ${card.height} px, its summary ${card.summary} px)`);
  assert.equal(await page.locator('.tool-card__input pre').isVisible(), false, 'the input JSON is hidden');
  assert.ok(shown.prompt.top >= 0 && shown.prompt.bottom <= shown.height, 'the message box is on screen');
  assert.ok(shown.prompt.left >= 0 && shown.prompt.right <= WIDTH, 'and within its width');
  await screenshot(page, 'narrow-chat.png');

  // Opened, the card shows its input and output; the page still does not scroll sideways.
  await page.locator('[data-part="tool"] summary').click();
  await page.locator('.tool-card__input pre').waitFor({ state: 'visible' });
  assert.match(await page.locator('.tool-card__input pre').textContent(), /"city": "Paris"/);
  assert.ok((await layout(page)).overflow <= 0, 'no sideways scrolling with the card open');

  // A call waiting for approval opens by itself, with Approve on screen.
  await sendMessage(page, 'Save a note: buy milk');
  await waitForPage(page, (s) => s.assistants[1]?.tools[0]?.state === 'approval-requested', 'the approval request');
  const waiting = (await layout(page)).cards[1];
  assert.equal(waiting.open, true, 'the card waiting for approval is open');
  const approve = await page.getByRole('button', { name: 'Approve' }).boundingBox();
  assert.ok(approve.x >= 0 && approve.x + approve.width <= WIDTH, 'Approve is within the screen');
  await page.getByRole('button', { name: 'Approve' }).click();
  await waitForPage(page, (s) => s.status === 'ready' && s.assistants[1]?.tools[0]?.state === 'output-available', 'the note saved');

  // The message box still takes a message from the keyboard.
  await page.getByRole('textbox', { name: 'Message' }).fill('Hello');
  await page.keyboard.press('Enter');
  await waitForPage(page, (s) => s.status === 'ready' && s.assistants.length === 3, 'the third reply');
  const end = await layout(page);
  assert.ok(end.overflow <= 0 && end.prompt.bottom <= end.height, 'still no sideways scroll, the box on screen');
});

test('the runs inspector at 375 px does not scroll sideways', { timeout: 60_000 }, async () => {
  const { page } = browser;
  await page.goto(`${server.base}/runs`);
  await page.locator('#runs > li').first().waitFor();
  assert.ok((await layout(page)).overflow <= 0, 'the list fits');
  await page.locator('#runs > li a.runs__link').first().click();
  await page.locator('#timeline [data-kind="finish"]').waitFor();
  assert.ok((await layout(page)).overflow <= 0, "a run's page fits");
  await screenshot(page, 'narrow-run.png', { fullPage: true });
});
