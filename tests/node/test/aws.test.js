// The REAL Vercel AI SDK client (`ai` 7.0.173 AbstractChat + `@ai-sdk/workflow` 2.0.43
// WorkflowChatTransport) against the chat function's app over the AWS adapters, on real HTTP:
// `tests/deploy/serve_stack.py` deploys template.yaml into moto in one Python process (DynamoDB run
// records, the S3 chunk log, the real statemachine/run.asl.json run by moto's Step Functions
// interpreter with the real slice and finalizer handlers invoked in-process), gives the chat app
// the template's environment (token auth) and serves functions/chat/app.py with uvicorn.
// SliceSeconds=0: every step is a slice of its own, so a streamed turn spans several slices: the
// chat function runs the first one itself (decision D14), the slice function the others.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';

import {
  assembleMessage,
  collectChunks,
  describeParts,
  makeTransport,
  recordingFetch,
  runChatTurn,
  startStackServer,
  waitFor,
  withCapturedConsole,
} from '../lib/helpers.js';

const TOKEN = 'node-aws-test-token';
const WEATHER = 'What is the weather in Paris?';
const RUN_ID = /^wrun_[0-9a-z]{26}$/;
const T = { timeout: 30000 };

const AUTH = { authorization: `Bearer ${TOKEN}` };
/** Transport options that send the bearer token on the POST and on every reconnect GET. */
const WITH_TOKEN = {
  prepareSendMessagesRequest: ({ headers }) => ({ headers: { ...headers, ...AUTH } }),
  prepareReconnectToStreamRequest: ({ headers }) => ({ headers: { ...headers, ...AUTH } }),
};

let server;
let base;

before(async () => {
  server = await startStackServer({ token: TOKEN, sliceSeconds: 0 });
  base = server.base;
}, { timeout: 30000 });

after(async () => {
  await server?.stop();
});

/** The run API's view of a run (slices taken, chunks logged, status). */
async function runStatus(runId) {
  const res = await fetch(`${base}/api/runs/${runId}`, { headers: AUTH });
  assert.equal(res.status, 200, await res.clone().text());
  return res.json();
}

/** Poll the run API until the run has ended (the finalizer may still be writing after `finish`). */
async function finishedStatus(runId) {
  const deadline = Date.now() + 20000;
  for (;;) {
    const status = await runStatus(runId);
    if (status.status === 'finished' || Date.now() > deadline) return status;
    await new Promise((r) => setTimeout(r, 50));
  }
}

let reference;
/** The uncut weather turn, run once: the reference of the cut / replay tests. */
function baseline() {
  reference ??= (async () => {
    const r = await runChatTurn({ base, text: WEATHER, transportOptions: WITH_TOKEN });
    assert.equal(r.status, 'ready', `baseline turn failed: ${r.error?.stack ?? r.error}\n${JSON.stringify(server.logs().stderr.slice(-3000))}`);
    const post = r.requests.find((q) => q.method === 'POST');
    return { ...r, chunks: post.chunks, post };
  })();
  return reference;
}

const types = (chunks) => chunks.map((c) => c.type);
/** The slice function's log lines about a run (none when the chat function ran every slice). */
const sliceDoneLines = (srv, runId) => srv.logs().stdout.split('\n')
  .filter((l) => l.includes('"slice done"') && l.includes(runId));
const textOf = (message) => message.parts.filter((p) => p.type === 'text').map((p) => p.text).join('');

function assertTurnOk(r, label = '') {
  assert.equal(r.status, 'ready', `${label} chat status (error: ${r.error?.stack ?? r.error})`);
  assert.equal(r.error, undefined);
  assert.deepEqual(r.errors, [], `${label} onError calls`);
  assert.equal(r.finishEvent?.isError, false, `${label} onFinish.isError`);
  assert.equal(r.finishEvent?.isDisconnect, false, `${label} onFinish.isDisconnect`);
  assert.match(r.runId ?? '', RUN_ID, `${label} x-workflow-run-id`);
  assert.equal(r.message?.role, 'assistant', `${label} last message role`);
}

// -------------------------------------------------------------------------------------------------

describe('a. a tool turn streamed from the state machine over several slices', () => {
  it('completes with get_weather output-available and the answer; a replay GET from 0 assembles the same message', T, async (t) => {
    const r = await baseline();
    assertTurnOk(r);
    const { chunks, post } = r;
    assert.equal(post.status, 200);
    assert.deepEqual(r.requests.map((q) => q.method), ['POST'], 'one POST, no reconnect');
    assert.equal(chunks[0].type, 'start');
    assert.equal(chunks.at(-1).type, 'finish');
    assert.equal(chunks.at(-1).finishReason, 'stop');
    assert.equal(r.message.id, chunks[0].messageId, 'assistant id == start.messageId');

    const parts = r.message.parts;
    const tools = parts.filter((p) => p.type === 'tool-get_weather');
    assert.equal(tools.length, 1, describeParts(r.message));
    const [tool] = tools;
    assert.equal(tool.state, 'output-available');
    assert.deepEqual(tool.input, { city: 'Paris' });
    assert.equal(tool.output.city, 'Paris');
    assert.equal(typeof tool.output.tempC, 'number');
    const steps = parts.filter((p) => p.type === 'step-start').length;
    assert.equal(steps, 2, describeParts(r.message));
    const text = textOf(r.message);
    assert.ok(text.includes(`${tool.output.tempC} °C`) && text.includes('Paris'), text);
    assert.ok(parts.indexOf(tool) < parts.findIndex((p) => p.type === 'text'), 'tool part before the answer');
    assert.equal(r.finishReason, 'stop');
    assert.deepEqual(r.chatEnd, { chatId: r.chat.id, chunkIndex: chunks.length }, 'onChatEnd');

    // The run went through several slices (Step Functions tasks), and its log holds what was streamed.
    const status = await finishedStatus(r.runId);
    t.diagnostic(`run ${r.runId}: ${status.slices} slices, ${status.chunkCount} chunks`);
    assert.equal(status.status, 'finished');
    assert.ok(status.slices >= 2, `slices: ${status.slices}`); // a slice per step
    assert.equal(status.chunkCount, chunks.length);
    // The chat function ran the first slice; the slice function the others. Each of those logs
    // "slice done" after its slice committed, so the run may be finished before the last line is
    // written: wait for the lines the run's state says there must be, then check there is no other.
    await waitFor(() => sliceDoneLines(server, r.runId).length >= status.slices - 1, { what: `${status.slices - 1} "slice done" lines` });
    assert.equal(sliceDoneLines(server, r.runId).length, status.slices - 1);

    // Replay by run id from 0 with the real transport: the same chunks, the same message.
    const rec = recordingFetch();
    let chatEnd;
    const transport = makeTransport(base, { fetch: rec.fetch, onChatEnd: (e) => { chatEnd = e; }, ...WITH_TOKEN });
    const replayed = await collectChunks(await transport.reconnectToStream({ chatId: r.runId, startIndex: 0 }));
    const { message, errors } = await assembleMessage(replayed);
    assert.deepEqual(errors, []);
    assert.deepEqual(message.parts, r.message.parts, describeParts(message));
    assert.equal(message.id, r.message.id);
    assert.equal(rec.requests.length, 1, 'one GET');
    const [get] = rec.requests;
    assert.equal(get.url, `${base}/api/chat/${r.runId}/stream?startIndex=0`);
    assert.equal(get.status, 200);
    assert.equal(get.headers.get('x-workflow-stream-tail-index'), String(chunks.length - 1));
    assert.deepEqual(get.chunks, chunks, 'GET replay == POST stream, chunk for chunk');
    assert.deepEqual(chatEnd, { chatId: r.runId, chunkIndex: chunks.length });
  });
});

// -------------------------------------------------------------------------------------------------

describe('b. a cut POST: the transport reconnects with GET ?startIndex=K and ends with the uncut message', () => {
  for (const [k, mode] of [[3, 'close'], [24, 'error'], ['before-finish', 'close']]) {
    it(`body ${mode === 'close' ? 'ends cleanly' : 'errors'} after ${k} chunk(s)`, T, async () => {
      const ref = await baseline();
      const K = k === 'before-finish' ? ref.chunks.length - 1 : k;
      assert.ok(K < ref.chunks.length);
      const rec = recordingFetch({ cut: (q) => (q.method === 'POST' ? { after: K, mode } : undefined) });
      const { result: r, logged } = await withCapturedConsole(() =>
        runChatTurn({ base, text: WEATHER, fetch: rec.fetch, transportOptions: WITH_TOKEN }));
      assertTurnOk(r);
      const [post, get, ...more] = rec.requests;
      assert.equal(post.method, 'POST');
      assert.equal(post.cutAt, K, 'the POST body was cut');
      assert.equal(post.chunks.length, K);
      assert.ok(get, 'the transport reconnected');
      assert.equal(get.method, 'GET');
      assert.equal(get.path, `/api/chat/${r.runId}/stream`);
      assert.equal(get.startIndex, K);
      assert.equal(get.status, 200);
      if (K === 3) {
        // Early in the first slice: the GET joined the run while it was still being streamed.
        const tail = Number(get.headers.get('x-workflow-stream-tail-index'));
        assert.ok(tail < ref.chunks.length - 1, `the run was live when the transport reconnected (tail ${tail} of ${ref.chunks.length})`);
      }
      assert.deepEqual(more.map((q) => `${q.method} ${q.url} -> ${q.status}`), [], 'exactly one reconnect');
      assert.deepEqual(types([...post.chunks, ...get.chunks]), types(ref.chunks), 'chunk sequence');
      assert.equal(get.chunks.at(-1).type, 'finish');
      assert.equal(r.chatEnd?.chunkIndex, ref.chunks.length, 'onChatEnd chunkIndex');
      // Ids differ between runs: compare parts (the demo model is deterministic).
      assert.deepEqual(r.message.parts, ref.message.parts, describeParts(r.message));
      assert.equal(r.message.id, post.chunks[0].messageId);
      assert.equal(r.finishReason, 'stop');
      if (mode === 'error') {
        assert.ok(logged.error.some((l) => l.includes('Error in chat POST stream')), JSON.stringify(logged.error));
      }
    });
  }
});

// -------------------------------------------------------------------------------------------------

describe('c. token auth', () => {
  it('without the token, Chat.sendMessage fails with 401 after one POST (no loop)', T, async () => {
    const r = await runChatTurn({ base, text: WEATHER });
    assert.equal(r.status, 'error');
    assert.match(r.error?.message ?? '', /Failed to fetch chat: 401/);
    assert.equal(r.errors.length, 1);
    assert.deepEqual(r.requests.map((q) => `${q.method} ${q.status}`), ['POST 401']);
    assert.equal(JSON.parse(r.requests[0].bodyText).error.code, 'unauthorized');
    assert.equal(r.runId, undefined, 'no run was started');
  });

  it('without the token, reconnectToStream on an existing run fails with 401 after one GET (no loop)', T, async () => {
    const ref = await baseline();
    const rec = recordingFetch();
    const transport = makeTransport(base, { fetch: rec.fetch });
    await assert.rejects(collectChunks(await transport.reconnectToStream({ chatId: ref.runId, startIndex: 0 })), /Failed to fetch chat: 401/);
    assert.deepEqual(rec.requests.map((q) => `${q.method} ${q.path} ${q.status}`), [`GET /api/chat/${ref.runId}/stream 401`]);
  });

  it('a wrong token is refused too (401)', T, async () => {
    const wrong = { authorization: 'Bearer not-the-token' };
    const r = await runChatTurn({
      base,
      text: WEATHER,
      transportOptions: { prepareSendMessagesRequest: () => ({ headers: wrong }) },
    });
    assert.equal(r.status, 'error');
    assert.match(r.error?.message ?? '', /Failed to fetch chat: 401/);
    assert.deepEqual(r.requests.map((q) => `${q.method} ${q.status}`), ['POST 401']);
  });
});

// -------------------------------------------------------------------------------------------------

describe('e. a turn that fits in the first slice is served in-process by the chat function', () => {
  // SliceSeconds=600: the chat function runs the whole turn itself, streaming it as it writes the
  // log (decision D14); the state machine only waits for its callback. A second server, in moto too.
  let inline;
  before(async () => {
    inline = await startStackServer({ token: TOKEN, sliceSeconds: 600 });
  }, { timeout: 30000 });
  after(async () => {
    const exited = await inline?.stop();
    if (exited) assert.deepEqual(exited, { code: 0, signal: null }, inline.logs().stderr.slice(-3000));
    assert.match(inline?.logs().stdout ?? '', /serve_stack: iam ok/);
  });

  const sliceFunctionLines = (runId) => sliceDoneLines(inline, runId);

  it('streams the whole turn in one slice, with no slice function; a GET replay is the same', T, async () => {
    const ref = await baseline();
    const r = await runChatTurn({ base: inline.base, text: WEATHER, transportOptions: WITH_TOKEN });
    assertTurnOk(r);
    const [post] = r.requests;
    assert.deepEqual(r.requests.map((q) => q.method), ['POST'], 'one POST, no reconnect');
    assert.deepEqual(r.message.parts, ref.message.parts, describeParts(r.message));
    const res = await fetch(`${inline.base}/api/runs/${r.runId}`, { headers: AUTH });
    const status = await res.json();
    assert.equal(status.status, 'finished');
    assert.equal(status.slices, 1);
    assert.equal(status.chunkCount, post.chunks.length);
    assert.deepEqual(sliceFunctionLines(r.runId), []);
    const transport = makeTransport(inline.base, WITH_TOKEN);
    const replayed = await collectChunks(await transport.reconnectToStream({ chatId: r.runId, startIndex: 0 }));
    assert.deepEqual(replayed, post.chunks, 'GET replay == POST stream, chunk for chunk');
  });

  it('a client that drops mid-stream reconnects with GET and gets the uncut message; the run went on', T, async () => {
    const ref = await baseline();
    const rec = recordingFetch({ cut: (q) => (q.method === 'POST' ? { after: 3, mode: 'close' } : undefined) });
    const r = await runChatTurn({ base: inline.base, text: WEATHER, fetch: rec.fetch, transportOptions: WITH_TOKEN });
    assertTurnOk(r);
    const [post, get, ...more] = rec.requests;
    assert.equal(post.cutAt, 3);
    assert.equal(get.method, 'GET');
    assert.equal(get.startIndex, 3);
    assert.deepEqual(more, [], 'exactly one reconnect');
    assert.deepEqual(types([...post.chunks, ...get.chunks]), types(ref.chunks), 'chunk sequence');
    assert.deepEqual(r.message.parts, ref.message.parts, describeParts(r.message));
    const res = await fetch(`${inline.base}/api/runs/${r.runId}`, { headers: AUTH });
    assert.equal((await res.json()).slices, 1, 'the chat function ran the turn to its end');
    assert.deepEqual(sliceFunctionLines(r.runId), []);
  });
});

// -------------------------------------------------------------------------------------------------

describe('d. shutdown', () => {
  it('the server stops on SIGTERM, and every AWS call made was allowed by the template IAM policies', T, async () => {
    await baseline(); // at least one run went through
    const exited = await server.stop();
    const { stdout, stderr } = server.logs();
    assert.match(stdout, /serve_stack: iam ok/, `stdout:\n${stdout.slice(-2000)}\nstderr:\n${stderr.slice(-3000)}`);
    assert.deepEqual(exited, { code: 0, signal: null }, stderr.slice(-3000));
    server = undefined;
  });
});
