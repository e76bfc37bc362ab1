// Bring your own harness, with the REAL Vercel AI SDK client (`ai` AbstractChat + `@ai-sdk/workflow`
// WorkflowChatTransport): the server runs the example harness PROGRAM
// (examples/harness_program/notes_harness.py, a child process speaking JSON lines) as its agent,
// named by AGENT=module:attr like any agent, with SLICE_SECONDS=1 so that a long task spans slices.
// Faults come from tests/harness/faulty_notes.py, which wraps the same program's output.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { lastAssistantMessageIsCompleteWithApprovalResponses } from 'ai';
import { signToolApproval } from 'ai/internal';

import { Chat, createChat, describeParts, makeTransport, recordingFetch, startServer, waitFor } from '../lib/helpers.js';
import {
  answer, approvalChat as chatOn, askToSave as ask, bridgePids, destroySessions, killMidStep, logged, parts, replay, turn,
  types,
} from '../lib/harness.js';

const SECRET = 'harness-secret-0123456789abcdefghij';
const T = { timeout: 30000 };
const LONG = 'Run a long task in 4 parts';

let notesDir;
let faultDir;
let stepLog;
let sessionLog;
const servers = {};

/** A server whose agent is `tests.harness.agents:<name>`. */
async function serve(name, env = {}) {
  return startServer({
    env: { AGENT: `tests.harness.agents:${name}`, SLICE_SECONDS: '1', STEP_SECONDS: '0.4', TOOL_APPROVAL_SECRET: SECRET, NOTES_DIR: notesDir, ...env },
  });
}

before(async () => {
  notesDir = mkdtempSync(path.join(os.tmpdir(), 'dh-node-harness-notes-'));
  faultDir = mkdtempSync(path.join(os.tmpdir(), 'dh-node-harness-faults-'));
  stepLog = path.join(faultDir, 'steps.log');
  sessionLog = path.join(faultDir, 'session-steps.log');
  [servers.example, servers.kills, servers.ignores, servers.invalid, servers.persistent] = await Promise.all([
    serve('example', { STEP_LOG: stepLog }), serve('kills_mid_step', { FAULT_DIR: faultDir }), serve('ignores_stop', { FAULT_DIR: faultDir }),
    serve('invalid_output'), serve('persistent', { STEP_LOG: sessionLog, STEP_SECONDS: '3' }),
  ]);
}, { timeout: 60000 });

after(async () => {
  await destroySessions(servers.persistent);
  await Promise.all(Object.values(servers).map((s) => s?.stop()));
  if (notesDir) rmSync(notesDir, { recursive: true, force: true });
  if (faultDir) rmSync(faultDir, { recursive: true, force: true });
});

describe('a harness program as the agent', () => {
  let reference;

  it('a long task spans several slices; the replay from 0 equals the live message', T, async () => {
    reference = await turn(servers.example, LONG);
    assert.equal(reference.runStatus.status, 'finished');
    assert.ok(reference.runStatus.slices >= 2, `slices: ${reference.runStatus.slices}`);
    const work = reference.message.parts.filter((p) => p.type === 'tool-work');
    assert.deepEqual(work.map((p) => [p.toolCallId, p.state]), [1, 2, 3, 4].map((i) => [`call_work_${i}`, 'output-available']));
    assert.equal(reference.message.parts.at(-1).text, 'All 4 parts are done.');
    const replayed = await replay(servers.example, reference.runId);
    assert.deepEqual(replayed, reference.chunks, 'GET replay == live stream, chunk for chunk');
    assert.ok(!types(replayed).includes('reset-step'));
    // after `stop` the program finishes its step, recorded: each step ran once across the slices
    assert.deepEqual(logged(stepLog).map(([, step]) => step), ['work 1', 'work 2', 'work 3', 'work 4']);
  });

  it('a host tool (get_weather, defined in the agent file) runs on the server and its result reaches the program', T, async () => {
    const { message, runStatus } = await turn(servers.example, 'What is the weather in Paris?');
    assert.equal(runStatus.status, 'finished');
    const [call] = message.parts.filter((p) => p.type === 'tool-get_weather');
    assert.equal(call.state, 'output-available', describeParts(message));
    assert.equal(call.output.city, 'Paris');
    assert.equal(message.parts.at(-1).text, `It is ${call.output.conditions} in Paris, ${call.output.tempC} °C.`);
  });

  it('a program killed mid-step resumes from its checkpoint with reset-step; the message equals an uninterrupted run\'s', T, async () => {
    // The fault follows what the client saw: once the second step's call is shown, the program
    // (waiting mid-step, see tests/harness/faulty_notes.py) is SIGKILLed, as tests.harness.agents.kill_mid_step does.
    const cut = await turn(servers.kills, LONG, { whileRunning: (ctx) => killMidStep(ctx, faultDir) });
    assert.equal(cut.runStatus.status, 'finished');
    assert.equal(types(cut.chunks).filter((t) => t === 'reset-step').length, 1, types(cut.chunks).join(','));
    assert.deepEqual(parts(cut.message), parts(reference.message));
  });

  it('a program that ignores stop is killed after the grace period and the run goes on', T, async () => {
    const started = Date.now();
    const run = await turn(servers.ignores, LONG);
    assert.equal(run.runStatus.status, 'finished');
    assert.ok(run.runStatus.slices >= 2);
    assert.ok(Date.now() - started >= 1000, 'waited out the 1 s grace period');
    assert.deepEqual(parts(run.message), parts(reference.message));
  });

  it('invalid output ends the run with error and finish', T, async () => {
    const ctx = createChat({ base: servers.invalid.base });
    await ctx.chat.sendMessage({ text: LONG });
    await waitFor(() => ctx.chat.status !== 'submitted' && ctx.chat.status !== 'streaming', { what: 'the turn to end' });
    const chunks = ctx.requests.flatMap((q) => q.chunks);
    assert.deepEqual(types(chunks).slice(-2), ['error', 'finish']);
    assert.match(chunks.at(-2).errorText, /output line 1 is invalid: it is not JSON/);
    assert.equal(chunks.at(-1).finishReason, 'error');
    assert.equal(ctx.chat.status, 'error');
  });
});

// ------------------------------------------------------------------------------------------------
// Approvals raised by the program: signed by the server, answered with the real Chat
// ------------------------------------------------------------------------------------------------

const approvalChat = (options) => chatOn(servers.example.base, options);
const askToSave = (ctx, note) => ask(ctx, note, SECRET);

const savedNotes = () => readdirSync(notesDir).sort();

describe('approvals raised by the program', () => {
  it('approve: the program saves the note in the same assistant message', T, async () => {
    const ctx = approvalChat();
    const part = await askToSave(ctx, 'harness approve');
    const message = await answer(ctx, part, true);
    const saved = message.parts.find((p) => p.toolCallId === part.toolCallId);
    assert.equal(saved.state, 'output-available', describeParts(message));
    assert.deepEqual(saved.output, { saved: 'harness-approve.txt' });
    assert.equal(readFileSync(path.join(notesDir, 'harness-approve.txt'), 'utf8'), 'harness approve\n');
    assert.equal(message.parts.at(-1).text, 'Saved your note as harness-approve.txt.');
  });

  it('deny: the client sees the denial, nothing is saved', T, async () => {
    const ctx = approvalChat();
    const part = await askToSave(ctx, 'harness deny');
    const message = await answer(ctx, part, false);
    assert.equal(message.parts.find((p) => p.toolCallId === part.toolCallId).state, 'output-denied', describeParts(message));
    assert.equal(message.parts.at(-1).text, 'OK, I did not save the note.');
    assert.ok(!savedNotes().includes('harness-deny.txt'));
  });

  it('a tampered approval (input rewritten on the wire) never reaches the program', T, async () => {
    const ctx = approvalChat({
      rewrite: (body, q, nth) => {
        if (nth !== 1) return undefined;
        body.messages.at(-1).parts.find((p) => p.type === 'tool-save_note').input.text = 'rm -rf /';
        return body;
      },
    });
    const part = await askToSave(ctx, 'harness tamper');
    const message = await answer(ctx, part, true);
    assert.ok(!savedNotes().includes('harness-tamper.txt'), 'not saved');
    assert.equal(message.parts.at(-1).text, 'I did not save the note: the approval was missing or not valid.');
    const continuation = ctx.requests.filter((q) => q.method === 'POST')[1].chunks;
    assert.ok(!continuation.some((c) => c.toolCallId === part.toolCallId), 'no tool chunk for the tampered call');
  });
});

// ------------------------------------------------------------------------------------------------
// A Pydantic AI agent as the agent (examples/pydantic_ai/agent.py, its scripted demo model)
// ------------------------------------------------------------------------------------------------

describe('a Pydantic AI agent as the agent', () => {
  let pyd;
  let report;
  before(async () => {
    const env = { SLICE_SECONDS: '0' }; // every model step is a slice
    [pyd, report] = await Promise.all([
      startServer({ env: { AGENT: 'examples.pydantic_ai.agent:agent', TOOL_APPROVAL_SECRET: SECRET, ...env } }),
      startServer({ env: { AGENT: 'examples.pydantic_ai.agent:report', TOOL_APPROVAL_SECRET: SECRET, ...env } }),
    ]);
  }, { timeout: 60000 });
  after(async () => { await Promise.all([pyd?.stop(), report?.stop()]); });

  /** Ask, approve the deferred `remove` call with the real Chat, return the final message. */
  async function tidyUp(server) {
    const rec = recordingFetch();
    const ctx = { finishes: [], errors: [], runIds: [] };
    const chat = new Chat({
      transport: makeTransport(server.base, { fetch: rec.fetch, onChatSendMessage: (r) => ctx.runIds.push(r.headers.get('x-workflow-run-id')) }),
      sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
      onFinish: (e) => { ctx.finishes.push(e); },
      onError: (e) => { ctx.errors.push(e); },
    });
    await chat.sendMessage({ text: 'Tidy up the stock list.' });
    await waitFor(() => ctx.finishes.length === 1, { what: 'the pause' });
    const paused = await (await fetch(`${server.base}/api/runs/${ctx.runIds[0]}`)).json();
    const part = chat.lastMessage.parts.find((p) => p.type === 'tool-remove');
    assert.equal(part?.state, 'approval-requested', describeParts(chat.lastMessage));
    const live = rec.requests[0].chunks;
    assert.deepEqual(await replay(server, ctx.runIds[0]), live, 'replay from 0 == live stream');
    // The demo model streams: text a word at a time, tool input a few characters at a time.
    assert.ok(live.filter((c) => c.type === 'text-delta').length > 1, 'text streams token by token');
    assert.ok(live.filter((c) => c.type === 'tool-input-delta').length > 1, 'tool input streams');
    await chat.addToolApprovalResponse({ id: part.approval.id, approved: true });
    await waitFor(() => ctx.finishes.length === 2 && chat.status === 'ready', { what: 'the continuation' });
    assert.deepEqual(ctx.errors, []);
    const done = await (await fetch(`${server.base}/api/runs/${ctx.runIds[1]}`)).json();
    return { message: chat.lastMessage, part, paused, done };
  }

  it('steps are slices, the deferred tool is a signed approval, the approved call runs in the same message', T, async () => {
    const { message, part, paused, done } = await tidyUp(pyd);
    assert.equal(paused.status, 'awaiting_tool_approval');
    assert.ok(paused.slices >= 3, `one slice per model step: ${paused.slices}`);
    // The agent runs its own tools: the runtime (not the host) runs the approved call.
    assert.deepEqual(paused.pendingApprovals, [{ approvalId: part.approval.id, toolCallId: part.toolCallId, toolName: 'remove', input: { name: 'beta' }, providerExecuted: true }]);
    assert.equal(part.approval.signature, await signToolApproval({ secret: SECRET, approvalId: part.approval.id, toolCallId: part.toolCallId, toolName: 'remove', input: { name: 'beta' } }));
    assert.deepEqual(message.parts.filter((p) => p.type === 'tool-lookup').map((p) => p.output), [{ item: 'alpha', count: 12 }, { item: 'beta', count: 0 }]);
    assert.equal(message.parts.find((p) => p.type === 'tool-remove').state, 'output-available');
    assert.equal(message.parts.at(-1).text, 'Alpha is in stock. Beta: beta removed.');
    assert.equal(done.status, 'finished');
    assert.equal(done.output, undefined, 'a text agent has no structured output');
  });

  it('structured output reaches the run\'s result (the run API\'s output)', T, async () => {
    const { done } = await tidyUp(report);
    assert.equal(done.status, 'finished');
    assert.deepEqual(done.output, { removed: ['beta'], in_stock: ['alpha'] });
  });
});

describe('a harness program in a persistent session', () => {
  it('a step that takes three slices completes in one process; nothing is redone, no reset-step', { timeout: 60000 }, async () => {
    const run = await turn(servers.persistent, 'Run a long task in 2 parts');
    assert.equal(run.runStatus.status, 'finished');
    assert.ok(run.runStatus.slices >= 6, `slices: ${run.runStatus.slices}`);
    assert.deepEqual(logged(sessionLog).map(([, step]) => step), ['work 1', 'work 2']);
    assert.equal(new Set(logged(sessionLog).map(([pid]) => pid)).size, 1, 'one process served every slice');
    assert.ok(!types(run.chunks).includes('reset-step'));
    assert.equal(run.message.parts.at(-1).text, 'All 2 parts are done.');
    const replayed = await replay(servers.persistent, run.runId);
    assert.deepEqual(replayed, run.chunks, 'GET replay == live stream, chunk for chunk');
    assert.ok(bridgePids(servers.persistent).length === 1, 'the session stays for the next turn');
  });
});
