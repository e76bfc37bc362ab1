// Call options with the REAL Vercel AI SDK client: the `body` of `sendMessage(message, { body })`
// (what `useChat` sends) reaches the agent's `prepare_call`, validated by its pydantic model; an
// invalid field is a 400 that names it. The server runs `tests/node/agents.py:build_options_agent`,
// which answers with what `prepare_call` made of the options.
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';

import { createChat, startServer } from '../lib/helpers.js';

const T = { timeout: 20000 };

let server;
let base;

before(async () => {
  server = await startServer({
    args: ({ port, dataDir }) => [
      '-m', 'durable_harness', 'serve', '--host', '127.0.0.1', '--port', String(port), '--data-dir', dataDir,
      '--agent', 'tests.node.agents:build_options_agent', '--log-level', 'warning',
    ],
  });
  base = server.base;
}, { timeout: 30000 });

after(async () => {
  await server?.stop();
});

const textOf = (message) => message.parts.filter((p) => p.type === 'text').map((p) => p.text).join('');

it('body fields reach prepare_call, validated', T, async () => {
  const { chat, info, requests } = createChat({ base });
  await chat.sendMessage({ text: 'Bonjour' }, { body: { locale: 'fr', tier: 'best' } });
  assert.equal(chat.status, 'ready', String(chat.error?.stack ?? chat.error));
  assert.deepEqual(info.errors, []);
  const post = requests.find((r) => r.method === 'POST');
  assert.deepEqual(JSON.parse(post.requestBody).locale, 'fr'); // the client put them in the body
  assert.equal(textOf(chat.lastMessage), 'Prepared with locale=fr tier=best.');

  // The defaults of the options model, when the client sends none.
  await chat.sendMessage({ text: 'Hello' });
  assert.equal(textOf(chat.lastMessage), 'Prepared with locale=en tier=fast.');
});

it('an invalid body field is a 400 that names it, and the chat reports it', T, async () => {
  const { chat, info, requests } = createChat({ base });
  await chat.sendMessage({ text: 'Hallo' }, { body: { locale: 'de' } });
  assert.equal(chat.status, 'error');
  const post = requests.find((r) => r.method === 'POST');
  assert.equal(post.status, 400);
  const error = JSON.parse(post.bodyText).error;
  assert.equal(error.code, 'invalid_call_options');
  assert.match(error.message, /'locale'/);
  assert.equal(info.errors.length, 1);
  assert.equal(chat.messages.filter((m) => m.role === 'assistant').length, 0); // no run, no reply
});
