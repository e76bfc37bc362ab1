// Durable waits inside tools (issue 21) with the REAL AI SDK client (Chat + WorkflowChatTransport).
// The tool (tests/waits/wait_agent.py) records a step (appending to effects.log, writing its signed
// event URL to url.txt) and waits for the event `build-done`. While the run waits, the server is
// SIGKILLed and started again on the same data; the client follows by GET. The event posted to the
// signed URL completes the run, and the same assistant message shows the tool's result: the step
// ran once, the stream had one `finish`.
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

import { createChat, holdingFetch, sendTurn, startServer, withCapturedConsole } from '../lib/helpers.js';

const AGENT = 'tests.waits.wait_agent:build_agent';
const root = mkdtempSync(path.join(os.tmpdir(), 'dh-waits-'));
let server;

after(async () => {
  await server?.stop();
  rmSync(root, { recursive: true, force: true });
});

/** A fresh folder under this suite's temporary root. */
const folder = (name) => {
  const dir = path.join(root, name);
  mkdirSync(dir);
  return dir;
};

/** Poll `check` until it returns a truthy value (a condition, bounded). */
async function until(check, what, timeoutMs = 30000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

async function runStatus(base, runId) {
  try {
    return (await (await fetch(`${base}/api/runs/${runId}`)).json()).status;
  } catch {
    return undefined; // the server is not up (yet)
  }
}

describe('waits: a tool that waits for an event, across a SIGKILL of the server', () => {
  it('the step runs once, the signed URL completes the run, the same message shows the result', async () => {
    const dir = folder('wait');
    const options = {
      agent: AGENT, sliceSeconds: 0, dataDir: folder('data'),
      env: { WAIT_DIR: dir, TOOL_APPROVAL_SECRET: 'n'.repeat(40) },
    };
    server = await startServer(options);
    const client = holdingFetch();
    const chat = createChat({ base: server.base, fetch: client.fetch });
    const { result, logged } = await withCapturedConsole(async () => {
      const turn = sendTurn({ ...chat, requests: client.requests }, 'build it');
      const urlFile = path.join(dir, 'url.txt');
      await until(() => existsSync(urlFile), 'the step');
      const runId = await until(() => client.requests[0]?.headers?.get('x-workflow-run-id'), 'the run id');
      await until(async () => (await runStatus(server.base, runId)) === 'awaiting_event', 'the wait');
      await until(() => client.requests.flatMap((r) => r.chunks).some((c) => c.type === 'data-wait'), 'data-wait');
      await client.answered();
      client.hold();
      const ended = await server.kill('SIGKILL');
      assert.equal(ended.signal, 'SIGKILL');
      server = await startServer({ ...options, port: server.port });
      client.release();
      assert.equal(await runStatus(server.base, runId), 'awaiting_event');
      const hook = readFileSync(urlFile, 'utf8');
      const delivered = await fetch(hook, {
        method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ status: 'passed' }),
      });
      assert.equal(delivered.status, 202);
      assert.equal((await delivered.json()).outcome, 'resumed');
      return turn;
    });
    const reported = logged.error.filter((e) => !/^Error in chat (POST stream|GET reconnectToStream)/.test(e));
    assert.deepEqual(reported, [], 'nothing but cut streams was reported');
    assert.equal(result.status, 'ready', String(result.error?.stack ?? result.error));
    assert.deepEqual(result.errors, []);

    const parts = result.message.parts;
    const tool = parts.find((p) => p.type === 'tool-run_build');
    assert.equal(tool.state, 'output-available');
    assert.deepEqual(tool.output, { build: 'build-1', status: 'passed' });
    const waits = parts.filter((p) => p.type === 'data-wait');
    assert.equal(waits.length, 1, 'the resumed wait replaced the waiting one in place');
    assert.equal(waits[0].data.status, 'resumed');
    assert.equal(waits[0].data.name, 'build-done');
    assert.ok(parts.some((p) => p.type === 'text' && p.text.includes('"status": "passed"')));
    assert.equal(result.messages.filter((m) => m.role === 'assistant').length, 1, 'one assistant message');

    const requests = client.requests;
    assert.equal(requests[0].method, 'POST');
    assert.ok(requests.slice(1).every((r) => r.method === 'GET'), 'the client followed by GET');
    const seen = requests.flatMap((r) => r.chunks);
    assert.equal(seen.filter((c) => c.type === 'finish').length, 1);
    assert.equal(seen.at(-1).type, 'finish');
    const effects = readFileSync(path.join(dir, 'effects.log'), 'utf8').split('\n').filter(Boolean);
    assert.deepEqual(effects, ['started acme/app'], 'the recorded step ran once');
  }, { timeout: 90000 });
});
