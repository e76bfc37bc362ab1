// The restart suite: the local server is SIGKILLed in the middle of a multi-slice run, at three
// points, and started again on the same data each time. The REAL AI SDK client (Chat +
// WorkflowChatTransport) reconnects with GET ?startIndex=N and must end with the message of an
// uninterrupted run: exactly one `finish`, every tool result exactly once, the same text.
//
// The agent (tests/reliability/restart_agent.py) holds at named points while a `hold-<point>` file
// exists and creates `at-<point>` when it gets there, so each kill lands exactly where it should:
//   text-0  mid-text: the first step's text half streamed (its step is redone, after reset-step);
//   tool-2  mid-tool: the second tool call running (its result not recorded: it runs again);
//   step-3  at a slice boundary: the third tool's result checkpointed, the next model call not begun.
// The client's fetch holds GETs while the server is down, as an app retrying a refused connection
// would (the transport itself gives up on a refused GET at once, see the protocol notes §9.4).
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

import {
  createChat, holdingFetch, runChatTurn, sendTurn, startServer, withCapturedConsole,
} from '../lib/helpers.js';

const AGENT = 'tests.reliability.restart_agent:build_agent';
const PROMPT = 'Do the three-part task.';
const POINTS = ['text-0', 'tool-2', 'step-3'];

const dirs = [];
let server;

after(async () => {
  await server?.stop();
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

function tempDir(prefix) {
  const dir = mkdtempSync(path.join(os.tmpdir(), prefix));
  dirs.push(dir);
  return dir;
}

/** Wait until `file` exists: the agent has reached its hold point (a condition, polled). */
async function reached(file, timeoutMs = 20000) {
  const deadline = Date.now() + timeoutMs;
  while (!existsSync(file)) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${file}`);
    await sleep(5);
  }
}

const executions = (gates) => readFileSync(path.join(gates, 'executions.log'), 'utf8').split('\n').filter(Boolean);
const textOf = (message) => message.parts.filter((p) => p.type === 'text').map((p) => p.text).join('');

describe('restart: SIGKILL and restart on the same data', () => {
  it('mid-text, mid-tool and at a slice boundary: the client resumes by GET to the uninterrupted message', async () => {
    const gates = tempDir('dh-restart-gates-');
    const dataDir = tempDir('dh-restart-data-');
    const options = { agent: AGENT, sliceSeconds: 0, dataDir, env: { RESTART_GATES: gates } };
    server = await startServer(options);

    const reference = await runChatTurn({ base: server.base, text: PROMPT });
    assert.equal(reference.status, 'ready', String(reference.error?.stack ?? reference.error));
    const executedBefore = executions(gates).length;

    for (const point of POINTS) writeFileSync(path.join(gates, `hold-${point}`), '');
    const client = holdingFetch();
    const chat = createChat({ base: server.base, fetch: client.fetch });
    // The transport reports each cut stream with console.error before it reconnects.
    const { result, logged } = await withCapturedConsole(async () => {
      const turn = sendTurn({ ...chat, requests: client.requests }, PROMPT);
      for (const point of POINTS) {
        await reached(path.join(gates, `at-${point}`));
        await client.answered();
        client.hold();
        const ended = await server.kill('SIGKILL');
        assert.equal(ended.signal, 'SIGKILL');
        rmSync(path.join(gates, `hold-${point}`));
        server = await startServer({ ...options, port: server.port });
        client.release();
      }
      return turn;
    });
    const reported = logged.error.filter((e) => !/^Error in chat (POST stream|GET reconnectToStream)/.test(e));
    assert.deepEqual(reported, [], 'nothing but cut streams was reported');

    assert.equal(result.status, 'ready', String(result.error?.stack ?? result.error));
    assert.deepEqual(result.errors, []);
    assert.equal(textOf(result.message), textOf(reference.message));
    assert.deepEqual(result.message.parts, reference.message.parts);
    const tools = result.message.parts.filter((p) => p.type === 'tool-work');
    assert.deepEqual(tools.map((t) => [t.toolCallId, t.state, t.output]), [
      ['call-1', 'output-available', { part: 1, result: 1 }],
      ['call-2', 'output-available', { part: 2, result: 4 }],
      ['call-3', 'output-available', { part: 3, result: 9 }],
    ]);

    // The client: one POST cut by the first kill, then GETs, each from the chunks it had.
    const requests = client.requests;
    assert.equal(requests[0].method, 'POST');
    assert.ok(requests.filter((r) => r.method === 'GET').length >= POINTS.length, JSON.stringify(requests.map((r) => r.method)));
    let received = 0;
    for (const request of requests) {
      if (request.method === 'GET') assert.equal(request.startIndex, received, 'a GET resumes where the client stopped');
      received += request.chunks.length;
    }
    const seen = requests.flatMap((r) => r.chunks);
    assert.equal(seen.filter((c) => c.type === 'finish').length, 1);
    assert.equal(seen.at(-1).type, 'finish');

    // The run's log, replayed from 0: one finish, last; interrupted steps were reset.
    const replay = await fetch(`${server.base}/api/chat/${result.runId}/stream?startIndex=0`);
    const log = (await replay.text()).split('\n').filter((l) => l.startsWith('data: {')).map((l) => JSON.parse(l.slice(6)));
    assert.deepEqual(log, seen);
    // The mid-text kill left half a step in the log: the next server reset it before redoing it.
    // (The tool call was checkpointed before the tool ran, so the mid-tool kill left nothing to reset.)
    assert.ok(log.some((c) => c.type === 'reset-step'), 'the step cut mid-text was reset');
    for (const id of ['call-1', 'call-2', 'call-3']) {
      assert.equal(log.filter((c) => c.type === 'tool-output-available' && c.toolCallId === id).length, 1, id);
    }

    // Tool executions: only the one in flight at a kill ran again; a recorded result never did.
    const ran = executions(gates).slice(executedBefore);
    const count = (part) => ran.filter((p) => p === String(part)).length;
    const repeated = ran.length - new Set(ran).size;
    console.log(`restart suite: ${POINTS.length} kills, ${ran.length} tool executions for 3 calls, ${repeated} repeated (${ran.join(' ')})`);
    assert.deepEqual([count(1), count(2), count(3)], [1, 2, 1]);
  }, { timeout: 90000 });
});
