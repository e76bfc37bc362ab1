// The runs inspector (/runs): the list of the caller's runs (newest first, filtered by status), a
// run's page (timeline with the model calls and the tool call with its input, output and duration;
// the message replayed from the log; the runs of its chat), answering an approval from it, and a
// live run followed as it streams, then cancelled from its page.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { WAIT_MS, checkPrerequisites, openBrowser, screenshot, startServer } from '../lib/helpers.js';

let server;
let browser;

before(async () => {
  checkPrerequisites();
  // Each long_step call works for 60 s: a "long task" run is still going while the test watches it.
  server = await startServer({ env: { LONG_STEP_SECONDS: '60' } });
  browser = await openBrowser(server.base);
});

after(async () => {
  const errors = browser?.errors() ?? [];
  await browser?.close();
  await server?.stop();
  assert.deepEqual(errors, [], 'no errors in the page console');
});

/** Start a turn through the API; resolves with the run id once the POST answered (its body is
 * left unread when `wait` is false: the run goes on by itself). */
async function startRun(chatId, text, { wait = true, messageId = `u-${text}` } = {}) {
  const body = { id: chatId, messages: [{ id: messageId, role: 'user', parts: [{ type: 'text', text }] }] };
  const res = await fetch(`${server.base}/api/chat`, { method: 'POST', body: JSON.stringify(body), signal: AbortSignal.timeout(WAIT_MS) });
  assert.equal(res.status, 200);
  const runId = res.headers.get('x-workflow-run-id');
  if (wait) await res.text();
  else res.body.cancel().catch(() => {});
  return runId;
}

/** What the inspector shows, read from the DOM. */
function readInspector(page) {
  return page.evaluate(() => ({
    runs: [...document.querySelectorAll('#runs > li')].map((li) => ({
      runId: li.dataset.runId,
      status: li.querySelector('[data-testid="run-status"]')?.textContent,
    })),
    empty: document.getElementById('no-runs') != null,
    status: document.querySelector('.run__header [data-testid="run-status"]')?.textContent,
    live: document.getElementById('live') != null,
    canCancel: document.getElementById('cancel') != null,
    usage: document.getElementById('usage')?.textContent,
    cost: document.getElementById('cost')?.textContent,
    costParts: [...document.querySelectorAll('#cost .cost__parts li')].map((li) => li.textContent),
    timeline: [...document.querySelectorAll('#timeline > li')].map((li) => ({
      kind: li.dataset.kind,
      state: li.dataset.state,
      text: li.textContent,
      code: [...li.querySelectorAll('pre')].map((pre) => pre.textContent),
    })),
    message: document.querySelector('.run__message [data-part="text"]')?.textContent ?? '',
    tools: [...document.querySelectorAll('.run__message [data-part="tool"]')].map((card) => card.dataset.state),
    chatRuns: [...document.querySelectorAll('.chat-runs li')].map((li) => li.textContent),
  }));
}

async function waitFor(page, predicate, description) {
  const deadline = Date.now() + WAIT_MS;
  let state;
  for (;;) {
    state = await readInspector(page);
    if (predicate(state)) return state;
    if (Date.now() > deadline) throw new Error(`timed out waiting for: ${description}\n${JSON.stringify(state, null, 1)}`);
    await page.evaluate(() => new Promise((resolve) => { // the next DOM change, or 1 s
      const observer = new MutationObserver(() => { observer.disconnect(); resolve(); });
      observer.observe(document.body, { subtree: true, childList: true, characterData: true, attributes: true });
      setTimeout(() => { observer.disconnect(); resolve(); }, 1000);
    }));
  }
}

let weather;
let paused;

test('the list: the runs newest first, filtered by status', { timeout: 60_000 }, async () => {
  const { page } = browser;
  const hello = await startRun('chat-1', 'Hello there');
  weather = await startRun('chat-1', 'What is the weather in Paris?');
  paused = await startRun('chat-2', 'Save a note: buy milk');
  await page.goto(`${server.base}/runs`);
  const listed = await waitFor(page, (s) => s.runs.length === 3, 'three runs listed');
  assert.deepEqual(listed.runs, [
    { runId: paused, status: 'awaiting_tool_approval' },
    { runId: weather, status: 'finished' },
    { runId: hello, status: 'finished' },
  ]);
  await screenshot(page, 'inspector-list.png', { fullPage: true });

  await page.selectOption('#status-filter', 'waiting');
  const waiting = await waitFor(page, (s) => s.runs.length === 1, 'only the waiting run');
  assert.deepEqual(waiting.runs.map((r) => r.runId), [paused]);
  assert.match(page.url(), /\/runs\?status=waiting$/);
  await page.selectOption('#status-filter', 'failed');
  await waitFor(page, (s) => s.empty, 'no failed runs');
});

test("a run's page: timeline, tool call, the replayed message, the chat's runs", { timeout: 60_000 }, async () => {
  const { page } = browser;
  await page.goto(`${server.base}/runs`);
  await waitFor(page, (s) => s.runs.length === 3, 'the list');
  await page.click(`#runs > li[data-run-id="${weather}"] a.runs__link`);
  const shown = await waitFor(page, (s) => s.status === 'finished' && s.message.length > 0
    && s.timeline.some((e) => e.kind === 'tool' && e.state === 'done') && /in \/ \d+ out/.test(s.usage ?? '')
    && s.chatRuns.length === 2
    // each step's tokens come from the run's result, which the page reads after its status
    && s.timeline.filter((e) => e.kind === 'step' && /tokens/.test(e.text)).length >= 2,
  "the finished run, with the runs of its chat and each step's tokens");
  const kinds = shown.timeline.map((e) => e.kind);
  assert.equal(kinds[0], 'slice');
  assert.equal(kinds.at(-1), 'finish');
  assert.ok(kinds.filter((k) => k === 'step').length >= 2, 'a model call before the tool call and one after');
  const tool = shown.timeline.find((e) => e.kind === 'tool');
  assert.match(tool.text, /get_weather/);
  assert.match(tool.text, /\d+ ms|\d+(\.\d)? s/, 'the tool call has a duration');
  assert.match(tool.code[0], /"city": "Paris"/, 'its input');
  assert.match(tool.code[1], /Paris/, 'its output');
  const steps = shown.timeline.filter((e) => e.kind === 'step');
  assert.ok(steps.every((e) => /tokens/.test(e.text)), 'every model call shows its token usage');
  assert.equal(shown.canCancel, false);
  // The message is the run's own reply, as the API's result has it.
  const result = await (await fetch(`${server.base}/api/runs/${weather}/result`)).json();
  assert.equal(shown.message, result.text);
  assert.deepEqual(shown.tools, ['output-available']);
  assert.ok(shown.chatRuns.every((text) => /wrun_/.test(text)), 'the two runs of chat-1 are linked');
  assert.match(shown.cost, /only when deployed/, 'the local kit has no AWS bill, and the page says so');
  await screenshot(page, 'inspector-run.png', { fullPage: true });
});

test("a deployed run's page shows its cost estimate, its parts and the price date", { timeout: 60_000 }, async () => {
  // No deployed stack is served to the browser tests: the run API's answer for this run gets the
  // `cost` object the deployed chat function adds (tests/deploy/test_run_cost.py checks that one).
  const { page } = browser;
  const cost = {
    usd: 0.000181948, priceDate: '2026-12-01',
    parts: { lambda: 0.0000272668, stepFunctions: 0.000125, dynamodb: 0.00001325, s3: 0.000005, logsAndTracing: 0.0000114313 },
    basis: { recorded: { slices: 1 }, estimated: { flushes: 10 }, notes: ['Model tokens are not priced.'] },
  };
  const route = `${server.base}/api/runs/${weather}`;
  await page.route(route, async (request) => {
    const response = await request.fetch();
    await request.fulfill({ response, json: { ...(await response.json()), cost } });
  });
  // The page reads the status again when the replayed log reaches `finish`: that second read can
  // still be in this handler when the cost shows. Unrouting waits for it, or it would fail later,
  // on the next test's navigation, as an unhandled rejection (it did once in CI).
  try {
    await page.goto(`${server.base}/runs?run=${encodeURIComponent(weather)}`);
    const shown = await waitFor(page, (s) => s.status === 'finished' && s.costParts.length === 5, 'the cost estimate');
    assert.match(shown.cost, /\$0\.000182 estimated at AWS list prices of 2026-12-01/);
    assert.deepEqual(shown.costParts, ['Lambda $0.000027', 'Step Functions $0.000125', 'DynamoDB $0.000013', 'S3 $0.000005',
      'logs, X-Ray, secrets $0.000011']);
    assert.match(shown.cost, /model tokens are not priced/);
  } finally {
    await page.unrouteAll({ behavior: 'wait' });
  }
});

test('an approval answered from the inspector starts the continuation, whose page opens', { timeout: 60_000 }, async () => {
  const { page } = browser;
  await page.goto(`${server.base}/runs?run=${paused}`);
  // The page shows the run's status and its log as each arrives: wait for both, the approval request included.
  const approval = (e) => e.kind === 'approval' && /save_note/.test(e.text);
  const waiting = await waitFor(page, (s) => s.status === 'awaiting_tool_approval' && s.timeline.some((e) => e.kind === 'wait')
    && s.timeline.some(approval), 'the paused run and its approval request');
  assert.ok(waiting.timeline.some(approval));
  await page.getByRole('button', { name: 'Approve' }).click();
  await page.waitForURL((url) => url.searchParams.get('run') && url.searchParams.get('run') !== paused);
  const next = await waitFor(page, (s) => s.status === 'finished' && s.timeline.some((e) => e.kind === 'tool' && e.state === 'done')
    && s.message.length > 0, 'the continuation run');
  // The approved call ran in the continuation (its input is in the paused run's log).
  const call = next.timeline.find((e) => e.kind === 'tool');
  assert.match(call.text, /approved in an earlier run/);
  assert.match(call.code.join(''), /buy milk|saved/i, 'the tool output');
  const before = await (await fetch(`${server.base}/api/runs/${paused}`)).json();
  assert.equal(before.continuedBy, new URL(page.url()).searchParams.get('run'));
});

test('a live run updates as it streams, and is cancelled from its page', { timeout: 90_000 }, async () => {
  const { page } = browser;
  const runId = await startRun('chat-3', 'Run a long task', { wait: false });
  await page.goto(`${server.base}/runs?run=${runId}`);
  const live = await waitFor(page, (s) => s.live && s.timeline.some((e) => e.kind === 'tool' && e.state === 'running'), 'the long_step call running');
  assert.ok(live.canCancel);
  assert.match(live.timeline.find((e) => e.kind === 'tool').text, /long_step/);
  await page.click('#cancel');
  const cancelled = await waitFor(page, (s) => s.status === 'cancelled' && s.timeline.at(-1)?.kind === 'finish', 'the cancelled run');
  assert.equal(cancelled.live, false);
  assert.equal(cancelled.canCancel, false);
  const run = await (await fetch(`${server.base}/api/runs/${runId}`)).json();
  assert.equal(run.status, 'cancelled');
});
