// Persistent harness sessions (protocol 2) through the real server and the REAL Vercel AI SDK
// client (`ai` AbstractChat + `@ai-sdk/workflow` WorkflowChatTransport, following the run by GET
// like the web client). The agent is the example program (examples/harness_program/notes_harness.py
// --persistent), as `tests.harness.agents:persistent` and its variants: `recorded_session` (the
// same program through tests/harness/faulty_notes.py with no fault, noting every line it reads in
// INPUT_LOG), `session_kills_mid_step` (it waits mid-step to be SIGKILLed by the test),
// `destroys_on_finish` and `idles_out` (session_idle_seconds=1). The program notes each step it
// executes, with its pid, in STEP_LOG. The tests wait on what they observe (those files, a chunk
// the client was shown, the bridge registry), never on sleeps, and every run's stream is checked:
// `start` first, one `finish`, last, no chunk twice, the replay from 0 equal to what the client got.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { createChat, describeParts, holdingFetch, startServer, waitFor } from '../lib/helpers.js';
import {
  alive, answer, approvalChat, askToSave, assertRunInvariants, bridgePids, chatWithId, destroySessions, killMidStep, logged,
  parts, received, shown, turn, types,
} from '../lib/harness.js';

const SECRET = 'sessions-secret-0123456789abcdefghij';
const TWO = 'Run a long task in 2 parts';
const T = { timeout: 120000 }; // above every bounded wait inside, so that a failed wait reports what it waited for
const LONG_WAIT = { timeoutMs: 60000 }; // a busy 2-core machine: generous, and a condition that holds returns at once

let dir;
const file = (name) => path.join(dir, name);
const started = [];

/** A server whose agent is `tests.harness.agents:<agent>`, with 1 s slices; stopped (its sessions ended) after the file. */
async function serve(agent, env = {}, options = {}) {
  const server = await startServer({
    ...options,
    env: {
      AGENT: `tests.harness.agents:${agent}`, SLICE_SECONDS: '1', TOOL_APPROVAL_SECRET: SECRET,
      NOTES_DIR: file('notes'), FAULT_DIR: dir, ...env,
    },
  });
  started.push(server);
  return server;
}

before(() => { dir = mkdtempSync(path.join(os.tmpdir(), 'dh-node-sessions-')); });

after(async () => {
  for (const server of started) {
    await destroySessions(server);
    await server.stop();
  }
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const steps = (log, from = 0) => logged(log).slice(from).map(([, step]) => step);
const pids = (log, from = 0) => [...new Set(logged(log).slice(from).map(([pid]) => pid))];
const lastText = (message) => message.parts.at(-1).text;

describe('persistent: the server SIGKILLed mid-step, restarted on the same data', () => {
  it('the session kept working in the same process; the run completes, each step ran once, no reset-step', T, async () => {
    const dataDir = mkdtempSync(path.join(dir, 'data-'));
    const log = file('restart-steps.log');
    const options = { dataDir, env: { STEP_LOG: log, STEP_SECONDS: '4' } };
    let server = await serve('persistent', options.env, { dataDir });
    const client = holdingFetch(); // holds GETs while the server is down (the transport fails a refused GET at once)
    const ctx = { ...createChat({ base: server.base, fetch: client.fetch }), requests: client.requests };
    let bridge;
    const run = await turn(server, TWO, {
      ctx,
      whileRunning: async () => {
        // Mid-step: the program has begun its 4 s second step; the client has not been shown its result.
        await waitFor(() => steps(log).length === 2, { what: 'the second step', ...LONG_WAIT });
        await client.answered();
        client.hold();
        [bridge] = bridgePids(server);
        assert.equal((await server.kill('SIGKILL')).signal, 'SIGKILL');
        assert.ok(!shown(ctx, 'tool-output-available', 'call_work_2'), 'killed before the step ended');
        assert.deepEqual(bridgePids(server), [bridge], 'the session outlived the server');
        server = await serve('persistent', options.env, { dataDir, port: server.port });
        client.release();
      },
    });
    assert.equal(run.runStatus.status, 'finished');
    assert.equal(lastText(run.message), 'All 2 parts are done.');
    assert.deepEqual(steps(log), ['work 1', 'work 2'], 'each step ran once');
    assert.equal(pids(log).length, 1, 'one process served the whole run');
    assert.ok(alive(pids(log)[0]), 'and it still runs, for the next turn');
    assert.deepEqual(bridgePids(server), [bridge], 'the restarted server reattached to the same bridge');
    assert.ok(!types(run.chunks).includes('reset-step'), types(run.chunks).join(','));
    assert.ok(client.requests.some((q) => q.method === 'GET'), 'the client followed the run by GET');
    let got = 0;
    for (const request of client.requests) {
      if (request.method === 'GET') assert.equal(request.startIndex, got, 'a GET resumes where the client stopped');
      got += request.chunks.length;
    }
    await assertRunInvariants(server, run.runId, run.chunks, run.message);
  });
});

describe('persistent: one process per chat', () => {
  let session; // recorded_session: STEP_LOG and INPUT_LOG
  let kills;
  let reference;
  const stepLog = () => file('session-steps.log');
  const inputLog = () => file('session-input.log');

  before(async () => {
    [session, kills] = await Promise.all([
      serve('recorded_session', { STEP_LOG: stepLog(), INPUT_LOG: inputLog() }),
      serve('session_kills_mid_step', { STEP_LOG: file('kills-steps.log') }),
    ]);
  }, { timeout: 60000 });

  it('an uninterrupted run (the reference)', T, async () => {
    reference = await turn(session, TWO);
    assert.equal(reference.runStatus.status, 'finished');
    assert.equal(lastText(reference.message), 'All 2 parts are done.');
    await assertRunInvariants(session, reference.runId, reference.chunks, reference.message);
  });

  it('the program SIGKILLed mid-step: the run resumes from its checkpoint with reset-step, to the uninterrupted message', T, async () => {
    const log = file('kills-steps.log');
    // The program waits mid-step once it has written the second step's call; it is killed once the
    // client has been shown that call.
    const cut = await turn(kills, TWO, { whileRunning: (ctx) => killMidStep(ctx, dir, LONG_WAIT) });
    assert.equal(cut.runStatus.status, 'finished');
    assert.equal(types(cut.chunks).filter((t) => t === 'reset-step').length, 1, types(cut.chunks).join(','));
    assert.deepEqual(parts(cut.message), parts(reference.message));
    // From the checkpoint: the first step was not redone, the cut one was, by a new boot.
    assert.deepEqual(steps(log), ['work 1', 'work 2', 'work 2']);
    const [first, , again] = logged(log).map(([pid]) => pid);
    assert.notEqual(again, first, 'a new process resumed');
    assert.equal(logged(log)[1][0], first);
    await assertRunInvariants(kills, cut.runId, cut.chunks, cut.message);
  });

  it('two turns of one chat are served by the same process; its memory carries over', T, async () => {
    const [fromStep, fromInput] = [logged(stepLog()).length, received(inputLog()).length];
    const ctx = chatWithId(session.base, `chat_two_turns_${process.pid}`);
    const first = await turn(session, 'hi', { ctx });
    const second = await turn(session, 'hi again', { ctx });
    assert.equal(first.runStatus.status, 'finished');
    assert.equal(second.runStatus.status, 'finished');
    assert.ok(!lastText(first.message).includes('This is turn'), lastText(first.message));
    assert.match(lastText(second.message), /This is turn 2 of this session\.$/, 'the counter it keeps in memory');
    assert.deepEqual(steps(stepLog(), fromStep), ['hello', 'hello']);
    assert.equal(pids(stepLog(), fromStep).length, 1, 'one process served both turns');
    const starts = received(inputLog()).slice(fromInput).filter((line) => line.type === 'start');
    assert.deepEqual(starts.map((l) => [l.runId, l.protocol, l.resumed]), [[first.runId, 2, false], [second.runId, 2, true]]);
    assert.deepEqual(ctx.chat.messages.map((m) => m.role), ['user', 'assistant', 'user', 'assistant']);
    await assertRunInvariants(session, first.runId, first.chunks, first.message);
    await assertRunInvariants(session, second.runId, second.chunks, second.message);
  });

  /** The lines the program read for the runs of `ctx` (by run id). */
  const linesOf = (ctx) => received(inputLog()).filter((line) => ctx.runIds.includes(line.runId));
  const posts = (ctx) => ctx.requests.filter((q) => q.method === 'POST');
  const saved = (name) => existsSync(path.join(file('notes'), name));

  /** Both runs of an answered approval keep the stream's invariants; one process served them. */
  async function checkRuns(ctx, fromStep) {
    assert.equal(ctx.runIds.length, 2);
    for (const [i, runId] of ctx.runIds.entries()) await assertRunInvariants(session, runId, posts(ctx)[i].chunks);
    assert.deepEqual(steps(stepLog(), fromStep), ['note 0', 'note 1', 'note 2']);
    assert.equal(pids(stepLog(), fromStep).length, 1, 'the paused turn\'s process got the answer');
  }

  for (const approved of [true, false]) {
    it(`${approved ? 'approve' : 'deny'}: the answer reaches the paused program, in the same assistant message`, T, async () => {
      const fromStep = logged(stepLog()).length;
      const ctx = approvalChat(session.base);
      const note = `session ${approved ? 'approve' : 'deny'}`;
      const part = await askToSave(ctx, note, SECRET);
      const message = await answer(ctx, part, approved);
      const call = message.parts.find((p) => p.toolCallId === part.toolCallId);
      if (approved) {
        assert.equal(call.state, 'output-available', describeParts(message));
        assert.deepEqual(call.output, { saved: 'session-approve.txt' });
        assert.equal(readFileSync(path.join(file('notes'), 'session-approve.txt'), 'utf8'), `${note}\n`);
        assert.equal(lastText(message), 'Saved your note as session-approve.txt.');
      } else {
        assert.equal(call.state, 'output-denied', describeParts(message));
        assert.equal(lastText(message), 'OK, I did not save the note.');
        assert.ok(!saved('session-deny.txt'));
      }
      const continued = linesOf(ctx).filter((line) => line.type === 'continue');
      assert.deepEqual(continued.map((l) => [l.runId, l.replayStep, l.approvals]), [[ctx.runIds[1], false, [
        { approvalId: part.approval.id, toolCallId: part.toolCallId, approved, reason: approved ? null : 'not now' },
      ]]]);
      await checkRuns(ctx, fromStep);
    });
  }

  it('a tampered answer (bad signature) never reaches the program; the continuation says so', T, async () => {
    const fromStep = logged(stepLog()).length;
    const forged = `AAAA${'x'.repeat(39)}`;
    const ctx = approvalChat(session.base, {
      rewrite: (body, q, nth) => {
        if (nth !== 1) return undefined;
        body.messages.at(-1).parts.find((p) => p.type === 'tool-save_note').approval.signature = forged;
        return body;
      },
    });
    const part = await askToSave(ctx, 'session tamper', SECRET);
    const message = await answer(ctx, part, true);
    assert.equal(posts(ctx)[1].status, 200, 'a bad signature is an error result for the tool, not a refused request (§11)');
    assert.equal(message.parts.find((p) => p.toolCallId === part.toolCallId).state, 'approval-responded', describeParts(message));
    assert.equal(lastText(message), 'I did not save the note: the approval was missing or not valid.');
    assert.ok(!saved('session-tamper.txt'), 'not saved');
    assert.ok(!posts(ctx)[1].chunks.some((c) => c.toolCallId === part.toolCallId), 'no tool chunk for the tampered call');
    // The program was continued without any answer: the tampered one never reached it.
    const continued = linesOf(ctx).filter((line) => line.type === 'continue');
    assert.deepEqual(continued.map((l) => [l.runId, l.approvals]), [[ctx.runIds[1], []]]);
    assert.ok(!linesOf(ctx).some((line) => JSON.stringify(line).includes(forged)), 'the forged signature is nowhere');
    await checkRuns(ctx, fromStep);
  });

  it('a forged answer (an approval id never issued) is refused with 400; nothing reaches the program', T, async () => {
    const ctx = approvalChat(session.base, {
      rewrite: (body, q, nth) => {
        if (nth !== 1) return undefined;
        body.messages.at(-1).parts.find((p) => p.type === 'tool-save_note').approval.id = 'approval-call_never_issued';
        return body;
      },
    });
    const part = await askToSave(ctx, 'session forged', SECRET);
    const before = received(inputLog()).length;
    await ctx.chat.addToolApprovalResponse({ id: part.approval.id, approved: true });
    await waitFor(() => ctx.finishes.length === 2 && ctx.chat.status === 'error', { what: 'the refused continuation' });
    const refused = posts(ctx)[1];
    assert.equal(refused.status, 400, refused.bodyText);
    assert.equal(JSON.parse(refused.bodyText).error.code, 'unknown_approval');
    assert.deepEqual(ctx.runIds.length, 1, 'no run was started');
    assert.deepEqual(received(inputLog()).slice(before), [], 'the program read nothing more');
    assert.ok(!saved('session-forged.txt'));
    await assertRunInvariants(session, ctx.runIds[0], posts(ctx)[0].chunks);
  });
});

describe('persistent: how a session ends', () => {
  for (const [agent, how] of [['destroys_on_finish', 'destroy_on_finish ends the program when the turn finishes'],
    ['idles_out', 'the idle timeout (session_idle_seconds=1) ends an idle session']]) {
    it(how, T, async () => {
      const log = file(`${agent}-steps.log`);
      const server = await serve(agent, { STEP_LOG: log });
      const run = await turn(server, 'hi');
      assert.equal(run.runStatus.status, 'finished');
      await assertRunInvariants(server, run.runId, run.chunks, run.message);
      const [[pid]] = logged(log);
      await waitFor(() => !alive(pid) && bridgePids(server).length === 0, { what: 'the program and its bridge to end', ...LONG_WAIT });
    });
  }

  it('cancel mid-step ends the turn with one finish, last; the session serves the next turn', T, async () => {
    const log = file('cancel-steps.log');
    const input = file('cancel-input.log');
    const server = await serve('recorded_session', { STEP_LOG: log, INPUT_LOG: input, STEP_SECONDS: '600' });
    const ctx = chatWithId(server.base, `chat_cancel_${process.pid}`);
    let cancelled;
    const run = await turn(server, TWO, {
      ctx,
      whileRunning: async () => {
        await waitFor(() => shown(ctx, 'tool-input-available', 'call_work_1'), { what: 'the first step\'s call', ...LONG_WAIT });
        const res = await fetch(`${server.base}/api/runs/${ctx.info.runId}/cancel`, { method: 'POST' });
        cancelled = { status: res.status, body: await res.json() };
      },
    });
    assert.equal(cancelled.status, 200, JSON.stringify(cancelled.body));
    assert.equal(run.runStatus.status, 'cancelled');
    assert.ok(!shown(ctx, 'tool-output-available', 'call_work_1'), 'cancelled mid-step');
    await assertRunInvariants(server, run.runId, run.chunks, run.message);
    await waitFor(() => received(input).some((line) => line.type === 'cancel' && line.runId === run.runId), { what: 'the program to get cancel' });
    // The program ended the turn at the cancel; the same process serves the chat's next turn.
    const next = await turn(server, 'hi', { ctx });
    assert.equal(next.runStatus.status, 'finished');
    assert.match(lastText(next.message), /This is turn 2 of this session\.$/);
    assert.deepEqual(steps(log), ['work 1', 'hello'], 'it stopped at the cancel');
    assert.equal(pids(log).length, 1);
    await assertRunInvariants(server, next.runId, next.chunks, next.message);
  });
});
