// Protocol-compatibility tests: the REAL Vercel AI SDK client (`ai` 7.0.173 AbstractChat +
// `@ai-sdk/workflow` 2.0.43 WorkflowChatTransport) against the Python durable_harness server.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';

import {
  Chat,
  assembleMessage,
  collectChunks,
  createChat,
  describeParts,
  makeTransport,
  recordingFetch,
  runChatTurn,
  sendTurn,
  startServer,
  unknownRunId,
  withCapturedConsole,
} from '../lib/helpers.js';

const PLAIN = 'Hello there, demo model!';
const WEATHER = 'What is the weather in Paris?';
const RUN_ID = /^wrun_[0-9a-z]{26}$/;
const T = { timeout: 20000 };

let server;
let base;

before(async () => {
  server = await startServer({ demoDelay: 0.005 });
  base = server.base;
}, { timeout: 30000 });

after(async () => {
  await server?.stop();
});

/** The uncut turn of a prompt, run once: the reference for the cut / resume tests. */
const baselines = new Map();
function baseline(text) {
  if (!baselines.has(text)) {
    baselines.set(text, (async () => {
      const r = await runChatTurn({ base, text });
      assert.equal(r.status, 'ready', `baseline turn for ${JSON.stringify(text)} failed: ${r.error?.stack ?? r.error}`);
      const post = r.requests.find((q) => q.method === 'POST');
      return { ...r, chunks: post.chunks, post };
    })());
  }
  return baselines.get(text);
}

const types = (chunks) => chunks.map((c) => c.type);
const textOf = (message) => message.parts.filter((p) => p.type === 'text').map((p) => p.text).join('');
const deltas = (chunks, type) => chunks.filter((c) => c.type === type).map((c) => c.delta).join('');

/** The chunks the transport's orphan filter keeps for a window that starts mid-stream (§9.5). */
function orphanFiltered(window) {
  const ids = new Set();
  const calls = new Set();
  return window.filter((c) => {
    switch (c.type) {
      case 'reset-step': ids.clear(); calls.clear(); return true;
      case 'text-start': case 'reasoning-start': ids.add(c.id); return true;
      case 'tool-input-start': case 'tool-input-available': case 'tool-input-error': calls.add(c.toolCallId); return true;
      case 'text-delta': case 'text-end': case 'reasoning-delta': case 'reasoning-end': return ids.has(c.id);
      case 'tool-input-delta': case 'tool-approval-request': case 'tool-output-available':
      case 'tool-output-error': case 'tool-output-denied': return calls.has(c.toolCallId);
      default: return true;
    }
  });
}

function assertTurnOk(r, label = '') {
  assert.equal(r.status, 'ready', `${label} chat status (error: ${r.error?.stack ?? r.error})`);
  assert.equal(r.error, undefined);
  assert.deepEqual(r.errors, [], `${label} onError calls`);
  assert.equal(r.finishEvent?.isError, false, `${label} onFinish.isError`);
  assert.equal(r.finishEvent?.isDisconnect, false, `${label} onFinish.isDisconnect`);
  assert.equal(r.finishEvent?.isAbort, false, `${label} onFinish.isAbort`);
  assert.match(r.runId ?? '', RUN_ID, `${label} x-workflow-run-id`);
  assert.equal(r.message?.role, 'assistant', `${label} last message role`);
}

// -------------------------------------------------------------------------------------------------

describe('a. plain turn', () => {
  it('streams a text reply that the real Chat assembles, with finishReason stop and the server message id', T, async () => {
    const r = await baseline(PLAIN);
    assertTurnOk(r);
    const { chunks, post } = r;
    assert.equal(post.status, 200);
    assert.equal(post.headers.get('x-workflow-run-id'), r.runId);
    assert.deepEqual(r.requests.map((q) => q.method), ['POST'], 'one POST, no reconnect');
    // The wire: start ... finish, every chunk schema-valid for the client (it would have failed otherwise).
    assert.equal(chunks[0].type, 'start');
    assert.equal(typeof chunks[0].messageId, 'string', 'start.messageId');
    assert.equal(chunks.at(-1).type, 'finish');
    assert.equal(chunks.at(-1).finishReason, 'stop');
    assert.equal(chunks.filter((c) => c.type === 'finish').length, 1);
    // The assembled message.
    assert.equal(r.messages.length, 2);
    assert.equal(r.messages[0].role, 'user');
    assert.equal(r.message.id, chunks[0].messageId, 'assistant id == start.messageId');
    const texts = r.message.parts.filter((p) => p.type === 'text');
    assert.equal(texts.length, 1, describeParts(r.message));
    assert.equal(texts[0].state, 'done');
    assert.equal(texts[0].text, deltas(chunks, 'text-delta'));
    assert.ok(texts[0].text.startsWith(`You said: "${PLAIN}".`), texts[0].text);
    assert.match(texts[0].text, /demo model/);
    assert.equal(r.message.parts[0].type, 'step-start');
    assert.equal(r.finishReason, 'stop', 'onFinish finishReason');
    assert.deepEqual(r.chatEnd, { chatId: r.chat.id, chunkIndex: chunks.length }, 'onChatEnd');
  });
});

describe('b. tool turn', () => {
  it('calls get_weather on the server (output-available) and answers in a second step', T, async () => {
    const r = await baseline(WEATHER);
    assertTurnOk(r);
    const parts = r.message.parts;
    const tools = parts.filter((p) => p.type === 'tool-get_weather');
    assert.equal(tools.length, 1, describeParts(r.message));
    const [tool] = tools;
    assert.equal(tool.state, 'output-available');
    assert.deepEqual(tool.input, { city: 'Paris' });
    assert.equal(tool.output.city, 'Paris');
    assert.equal(typeof tool.output.tempC, 'number');
    assert.equal(typeof tool.toolCallId, 'string');
    // Two steps: [step-start, reasoning?, tool] then [step-start, text].
    const starts = parts.map((p, i) => (p.type === 'step-start' ? i : -1)).filter((i) => i >= 0);
    assert.equal(starts.length, 2, describeParts(r.message));
    const toolIndex = parts.indexOf(tool);
    const textIndex = parts.findIndex((p) => p.type === 'text');
    assert.ok(starts[0] < toolIndex && toolIndex < starts[1], 'tool part in step 1');
    assert.ok(textIndex > starts[1], 'text part in step 2');
    const reasoning = parts.filter((p) => p.type === 'reasoning');
    assert.equal(reasoning.length, 1, 'a reasoning part');
    assert.ok(parts.indexOf(reasoning[0]) < toolIndex, 'reasoning before the tool call');
    assert.match(reasoning[0].text, /Paris/);
    const text = textOf(r.message);
    assert.ok(text.includes(`${tool.output.tempC} °C`) && text.includes('Paris'), text);
    assert.equal(r.finishReason, 'stop');
    assert.equal(r.message.id, r.chunks[0].messageId);
    assert.deepEqual(r.requests.map((q) => q.method), ['POST']);
  });
});

// -------------------------------------------------------------------------------------------------

describe('c. cut POST stream: the transport resumes with GET ?startIndex=K', () => {
  for (const prompt of [PLAIN, WEATHER]) {
    for (const mode of ['close', 'error']) {
      for (const k of [1, 3, 7, 'before-finish']) {
        it(`${prompt === PLAIN ? 'plain' : 'tool'} turn, body ${mode === 'close' ? 'ends cleanly' : 'errors'} after ${k} chunk(s)`, T, async () => {
          const ref = await baseline(prompt);
          const K = k === 'before-finish' ? ref.chunks.length - 1 : k;
          assert.ok(K < ref.chunks.length);
          const rec = recordingFetch({ cut: (q) => (q.method === 'POST' ? { after: K, mode } : undefined) });
          const { result: r, logged } = await withCapturedConsole(() => runChatTurn({ base, text: prompt, fetch: rec.fetch }));
          assertTurnOk(r);
          const [post, get, ...more] = rec.requests;
          assert.equal(post.method, 'POST');
          assert.equal(post.cutAt, K, 'the POST body was cut');
          assert.equal(post.chunks.length, K);
          assert.ok(get, 'the transport reconnected');
          assert.equal(get.method, 'GET');
          assert.equal(get.path, `/api/chat/${r.runId}/stream`);
          assert.equal(get.startIndex, K, `GET carried startIndex=${K} (url ${get.url})`);
          assert.equal(get.status, 200);
          assert.deepEqual(more.map((q) => `${q.method} ${q.url} -> ${q.status}`), [], 'exactly one reconnect');
          // Together the POST prefix and the GET replay are the whole run log, in order.
          assert.deepEqual(types([...post.chunks, ...get.chunks]), types(ref.chunks), 'chunk sequence');
          assert.equal(get.chunks.at(-1).type, 'finish');
          assert.equal(r.chatEnd?.chunkIndex, ref.chunks.length, 'onChatEnd chunkIndex');
          // The final message equals the uncut one (ids differ between runs: compare parts).
          assert.deepEqual(r.message.parts, ref.message.parts);
          assert.equal(r.message.id, post.chunks[0].messageId);
          assert.equal(r.finishReason, ref.finishReason);
          if (mode === 'error') {
            assert.ok(logged.error.some((l) => l.includes('Error in chat POST stream')), JSON.stringify(logged.error));
          }
        });
      }
    }
  }

  it('cut right before finish, 30 times in a row: the GET ?startIndex=N-1 never fails', T, async () => {
    // Races the GET against the end of the run: the server must treat "startIndex == chunks in
    // the log" as "wait for the next chunk" even while the run is being finalized.
    const ref = await baseline(WEATHER);
    const K = ref.chunks.length - 1;
    const failures = [];
    for (let i = 0; i < 30; i++) {
      const rec = recordingFetch({ cut: (q) => (q.method === 'POST' ? { after: K, mode: 'close' } : undefined) });
      const { result: r } = await withCapturedConsole(() => runChatTurn({ base, text: WEATHER, fetch: rec.fetch }));
      if (r.status !== 'ready' || JSON.stringify(r.message.parts) !== JSON.stringify(ref.message.parts)) {
        failures.push(`#${i} ${r.status}: ${r.error?.message} | ${rec.requests.map((q) => `${q.method} ${q.startIndex ?? ''} -> ${q.status}`).join(', ')}`);
      }
    }
    assert.deepEqual(failures, []);
  });

  it('every response (POST and each GET) ends cleanly after 2 chunks: startIndex 2, 4, 6, ...', T, async () => {
    const ref = await baseline(WEATHER);
    const rec = recordingFetch({ cut: () => ({ after: 2, mode: 'close' }) });
    const r = await runChatTurn({ base, text: WEATHER, fetch: rec.fetch });
    assertTurnOk(r);
    const n = ref.chunks.length;
    const gets = rec.requests.filter((q) => q.method === 'GET');
    const expected = [];
    for (let i = 2; i < n; i += 2) expected.push(i);
    assert.deepEqual(gets.map((q) => q.startIndex), expected);
    assert.deepEqual(types(rec.requests.flatMap((q) => q.chunks)), types(ref.chunks));
    assert.deepEqual(r.message.parts, ref.message.parts);
  });

  it('three consecutive dropped connections (POST + 2 GETs) still recover: startIndex 2, 4, 6', T, async () => {
    const ref = await baseline(PLAIN);
    const rec = recordingFetch({ cut: (q, nth) => (q.method === 'POST' || nth < 2 ? { after: 2, mode: 'error' } : undefined) });
    const { result: r } = await withCapturedConsole(() => runChatTurn({ base, text: PLAIN, fetch: rec.fetch }));
    assertTurnOk(r);
    assert.deepEqual(rec.requests.map((q) => `${q.method} ${q.startIndex ?? ''}`.trim()), ['POST', 'GET 2', 'GET 4', 'GET 6']);
    assert.deepEqual(r.message.parts, ref.message.parts);
  });
});

// -------------------------------------------------------------------------------------------------

describe('d. resume a finished run by id', () => {
  it('reconnectToStream({chatId: runId, startIndex: 0}) replays the whole message', T, async () => {
    const ref = await baseline(WEATHER);
    const rec = recordingFetch();
    let chatEnd;
    const transport = makeTransport(base, { fetch: rec.fetch, onChatEnd: (e) => { chatEnd = e; } });
    const stream = await transport.reconnectToStream({ chatId: ref.runId, startIndex: 0 });
    const chunks = await collectChunks(stream);
    const { message, errors } = await assembleMessage(chunks);
    assert.deepEqual(errors, []);
    assert.deepEqual(message.parts, ref.message.parts, describeParts(message));
    assert.equal(message.id, ref.message.id, 'replayed start carries the same message id');
    assert.equal(rec.requests.length, 1);
    const [get] = rec.requests;
    assert.equal(get.url, `${base}/api/chat/${ref.runId}/stream?startIndex=0`);
    assert.equal(get.headers.get('x-workflow-stream-tail-index'), String(ref.chunks.length - 1));
    assert.deepEqual(get.chunks, ref.chunks, 'GET replay == POST stream, chunk for chunk');
    assert.deepEqual(chatEnd, { chatId: ref.runId, chunkIndex: ref.chunks.length });
  });

  for (const [label, options] of [
    ['reconnectToStream({startIndex: -3})', { call: { startIndex: -3 } }],
    ['transport initialStartIndex: -3', { transport: { initialStartIndex: -3 } }],
  ]) {
    for (const prompt of [PLAIN, WEATHER]) {
      it(`${label} on a ${prompt === PLAIN ? 'plain' : 'tool'} run delivers exactly the last 3 chunks`, T, async () => {
        const ref = await baseline(prompt);
        const rec = recordingFetch();
        let chatEnd;
        const transport = makeTransport(base, { fetch: rec.fetch, onChatEnd: (e) => { chatEnd = e; }, ...options.transport });
        const { result: chunks, logged } = await withCapturedConsole(async () =>
          collectChunks(await transport.reconnectToStream({ chatId: ref.runId, ...options.call })));
        assert.equal(rec.requests.length, 1, 'one GET');
        const [get] = rec.requests;
        assert.equal(get.url, `${base}/api/chat/${ref.runId}/stream?startIndex=-3`);
        assert.equal(get.status, 200);
        assert.equal(get.headers.get('x-workflow-stream-tail-index'), String(ref.chunks.length - 1), 'tail index header');
        const last3 = ref.chunks.slice(-3);
        assert.equal(get.chunks.length, 3, `server sent ${JSON.stringify(types(get.chunks))}`);
        assert.deepEqual(get.chunks, last3);
        assert.deepEqual(chatEnd, { chatId: ref.runId, chunkIndex: ref.chunks.length }, 'transport counted the absolute end');
        // What reaches the app: the 3 chunks minus the orphans the transport filters (a *-end whose start was earlier).
        assert.deepEqual(chunks, orphanFiltered(last3));
        assert.equal(chunks.at(-1).type, 'finish');
        assert.deepEqual(logged.error, []);
        const { errors } = await assembleMessage(chunks);
        assert.deepEqual(errors, []);
      });
    }
  }

  it('a negative startIndex longer than the log (-1000) replays from 0', T, async () => {
    const ref = await baseline(WEATHER);
    const rec = recordingFetch();
    const transport = makeTransport(base, { fetch: rec.fetch });
    const chunks = await collectChunks(await transport.reconnectToStream({ chatId: ref.runId, startIndex: -1000 }));
    assert.equal(rec.requests[0].startIndex, -1000);
    assert.deepEqual(rec.requests[0].chunks, ref.chunks);
    const { message } = await assembleMessage(chunks);
    assert.deepEqual(message.parts, ref.message.parts);
  });

  it('Chat.resumeStream() (page refresh, chat id = run id) restores the assistant message in place', T, async () => {
    const ref = await baseline(WEATHER);
    const rec = recordingFetch();
    const transport = makeTransport(base, { fetch: rec.fetch });
    let finish;
    const chat = new Chat({ id: ref.runId, transport, messages: [ref.messages[0]], onFinish: (e) => { finish = e; } });
    await chat.resumeStream();
    assert.equal(chat.status, 'ready', String(chat.error?.stack ?? chat.error));
    assert.equal(chat.messages.length, 2);
    assert.equal(chat.lastMessage.id, ref.message.id);
    assert.deepEqual(chat.lastMessage.parts, ref.message.parts);
    assert.equal(finish?.finishReason, 'stop');
    assert.equal(rec.requests[0].url, `${base}/api/chat/${ref.runId}/stream?startIndex=0`);
  });

  it('Chat.resumeStream() with a stale copy of the assistant message replaces it (no duplicate)', T, async () => {
    const ref = await baseline(PLAIN);
    const stale = { ...ref.message, parts: ref.message.parts.slice(0, 1) }; // persisted mid-stream
    const transport = makeTransport(base, { fetch: recordingFetch().fetch });
    const chat = new Chat({ id: ref.runId, transport, messages: [ref.messages[0], stale] });
    await chat.resumeStream();
    assert.equal(chat.status, 'ready', String(chat.error?.stack ?? chat.error));
    assert.deepEqual(chat.messages.map((m) => m.id), [ref.messages[0].id, ref.message.id]);
    assert.deepEqual(chat.lastMessage.parts, ref.message.parts);
  });

  it('resuming a LIVE run mid-stream with a negative startIndex follows it to the end', T, async (t) => {
    // Start a turn, cut the POST after 5 chunks and do not let the transport reconnect (abort):
    // then resume the still-running run from the tail with a fresh transport.
    const ref = await baseline(PLAIN);
    const first = recordingFetch({ cut: (q) => (q.method === 'POST' ? { after: 5, mode: 'close' } : undefined) });
    const controller = new AbortController();
    let runId;
    const t1 = makeTransport(base, {
      fetch: async (url, init) => {
        if ((init?.method ?? 'GET') === 'GET') { controller.abort(); throw new DOMException('stop', 'AbortError'); }
        return first.fetch(url, init);
      },
      onChatSendMessage: (res) => { runId = res.headers.get('x-workflow-run-id'); },
    });
    const userMessage = { id: 'u-live', role: 'user', parts: [{ type: 'text', text: PLAIN }] };
    const s1 = await t1.sendMessages({ chatId: 'c-live', messages: [userMessage], trigger: 'submit-message', messageId: undefined, abortSignal: controller.signal });
    await assert.rejects(collectChunks(s1));
    assert.match(runId, RUN_ID);
    const rec = recordingFetch();
    let chatEnd;
    const t2 = makeTransport(base, { fetch: rec.fetch, onChatEnd: (e) => { chatEnd = e; } });
    const { result: chunks } = await withCapturedConsole(async () =>
      collectChunks(await t2.reconnectToStream({ chatId: runId, startIndex: -2 })));
    const [get] = rec.requests;
    const tail = Number(get.headers.get('x-workflow-stream-tail-index'));
    assert.ok(Number.isInteger(tail) && tail >= 4, `tail index header ${get.headers.get('x-workflow-stream-tail-index')}`);
    t.diagnostic(`resumed at tail index ${tail} of ${ref.chunks.length} chunks`);
    // With --demo-delay 0.005 the plain reply takes > 200 ms, so the run is still streaming here.
    assert.ok(tail < ref.chunks.length - 2, `the run was still live when resumed (tail ${tail}, total ${ref.chunks.length})`);
    assert.equal(get.chunks.at(-1).type, 'finish');
    assert.equal(chatEnd.chunkIndex, ref.chunks.length);
    assert.equal(get.chunks.length, ref.chunks.length - (tail - 1), 'GET delivered from tail-1 to the end');
    assert.equal(chunks.at(-1).type, 'finish');
  });
});

// -------------------------------------------------------------------------------------------------

describe('e. unknown run id', () => {
  it('reconnectToStream on an unknown wrun_ id fails with a 404 error after one GET (no loop)', T, async () => {
    const rec = recordingFetch();
    const transport = makeTransport(base, { fetch: rec.fetch });
    const id = unknownRunId();
    const stream = await transport.reconnectToStream({ chatId: id });
    await assert.rejects(collectChunks(stream), /Failed to fetch chat: 404/);
    assert.equal(rec.requests.length, 1, 'no retry loop');
    assert.equal(rec.requests[0].url, `${base}/api/chat/${id}/stream?startIndex=0`);
    assert.equal(rec.requests[0].status, 404);
  });

  it('Chat.resumeStream() for an unknown run id ends in status error (404)', T, async () => {
    const rec = recordingFetch();
    const transport = makeTransport(base, { fetch: rec.fetch });
    const errors = [];
    const chat = new Chat({ id: unknownRunId(), transport, onError: (e) => errors.push(e) });
    await chat.resumeStream();
    assert.equal(chat.status, 'error');
    assert.match(chat.error?.message ?? '', /Failed to fetch chat: 404/);
    assert.equal(errors.length, 1);
    assert.equal(rec.requests.length, 1);
  });
});

// -------------------------------------------------------------------------------------------------

describe('f. multi-turn', () => {
  it('a follow-up message POSTs the whole history (with the tool part) and gets a new run and reply', T, async () => {
    const ctx = createChat({ base });
    const r1 = await sendTurn(ctx, WEATHER);
    assertTurnOk(r1, 'turn 1');
    const r2 = await sendTurn(ctx, 'Thanks! And what can you do?');
    assertTurnOk(r2, 'turn 2');
    assert.notEqual(r2.runId, r1.runId);
    assert.equal(r2.messages.length, 4);
    assert.deepEqual(r2.messages.map((m) => m.role), ['user', 'assistant', 'user', 'assistant']);
    assert.notEqual(r2.message.id, r1.message.id);
    const posts = ctx.requests.filter((q) => q.method === 'POST');
    assert.equal(posts.length, 2);
    const body = JSON.parse(posts[1].requestBody);
    assert.deepEqual(Object.keys(body), ['messages']);
    assert.equal(body.messages.length, 3);
    assert.ok(body.messages[1].parts.some((p) => p.type === 'tool-get_weather' && p.state === 'output-available'));
    assert.match(textOf(r2.message), /You said: "Thanks! And what can you do\?"/);
    assert.equal(r2.finishReason, 'stop');
  });
});
