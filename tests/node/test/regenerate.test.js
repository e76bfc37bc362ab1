// Regenerate with the REAL Vercel AI SDK client: `Chat.regenerate()` (what useChat's `regenerate`
// calls) over WorkflowChatTransport, forwarding `trigger` and `messageId` as docs/http-api.md's client
// snippet does. The server runs `tests/node/agents.py:build_counting_agent`, whose model numbers
// its answers, so a replayed answer cannot pass for a new one.
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';

import { createChat, startServer } from '../lib/helpers.js';

const T = { timeout: 20000 };

let server;
let base;

before(async () => {
  server = await startServer({ agent: 'tests.node.agents:build_counting_agent' });
  base = server.base;
}, { timeout: 30000 });

after(async () => {
  await server?.stop();
});

const textOf = (message) => message.parts.filter((p) => p.type === 'text').map((p) => p.text).join('');

/** The transport hook of docs/http-api.md: the chat id, trigger and messageId go into the body. */
const transportOptions = {
  prepareSendMessagesRequest: ({ id, messages, body, trigger, messageId }) => ({
    body: { ...body, id, messages, trigger, messageId },
  }),
};

it('regenerate() starts a new run whose answer replaces the last one; a retried POST is idempotent', T, async () => {
  const { chat, info, requests } = createChat({ base, transportOptions });
  await chat.sendMessage({ text: 'Tell me a joke' });
  assert.equal(chat.status, 'ready', String(chat.error?.stack ?? chat.error));
  const first = { runId: info.runId, message: chat.lastMessage };
  const n = Number(textOf(first.message).match(/Answer number (\d+)\./)?.[1]);
  assert.ok(n >= 1, textOf(first.message));

  await chat.regenerate();
  assert.equal(chat.status, 'ready', String(chat.error?.stack ?? chat.error));
  assert.deepEqual(info.errors, []);
  const posts = requests.filter((r) => r.method === 'POST');
  assert.equal(JSON.parse(posts[1].requestBody).trigger, 'regenerate-message');
  assert.notEqual(info.runId, first.runId); // a new run
  assert.deepEqual(chat.messages.map((m) => m.role), ['user', 'assistant']); // replaced, not appended
  assert.notEqual(chat.lastMessage.id, first.message.id);
  assert.equal(textOf(chat.lastMessage), `Answer number ${n + 1}.`); // the model was called again
  const second = { runId: info.runId, message: chat.lastMessage };

  // Regenerating a named message: the body carries the id of the message it replaces.
  await chat.regenerate({ messageId: second.message.id });
  assert.equal(chat.status, 'ready', String(chat.error?.stack ?? chat.error));
  const third = requests.filter((r) => r.method === 'POST')[2];
  assert.equal(JSON.parse(third.requestBody).messageId, second.message.id);
  assert.notEqual(info.runId, second.runId);
  assert.deepEqual(chat.messages.map((m) => m.role), ['user', 'assistant']);
  assert.equal(textOf(chat.lastMessage), `Answer number ${n + 2}.`);

  // The same regenerate POST sent again (a retry) gets the run it started; so does the submit.
  for (const [post, runId] of [[third, info.runId], [posts[0], first.runId]]) {
    const retried = await fetch(post.url, { method: 'POST', body: post.requestBody });
    assert.equal(retried.status, 200);
    assert.equal(retried.headers.get('x-workflow-run-id'), runId);
    await retried.text();
  }
  const status = await (await fetch(`${base}/api/runs/${info.runId}`)).json();
  assert.equal(status.messageId, chat.lastMessage.id);

  // No model call for the retries: the next regenerate gets the next number.
  await chat.regenerate();
  assert.equal(textOf(chat.lastMessage), `Answer number ${n + 3}.`);
});
