// Helpers for the suites whose agent is a harness program (test/harness.test.js, test/sessions.test.js):
// turns with the real Chat, the program's own logs, the session bridges of a server's data folder,
// the approval round trip, and the invariants every run's stream keeps.
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';

import { lastAssistantMessageIsCompleteWithApprovalResponses } from 'ai';
import { signToolApproval } from 'ai/internal';

import {
  assembleMessage, Chat, collectChunks, createChat, describeParts, makeTransport, recordingFetch, sendTurn, waitFor,
} from './helpers.js';

export const types = (chunks) => chunks.map((c) => c.type);
/** A message's parts as they would go on the wire (the Chat keeps e.g. `reason: undefined`). */
export const parts = (message) => JSON.parse(JSON.stringify(message.parts));

/** The lines of a file the program appends to (none while it does not exist). */
const lines = (file) => (existsSync(file) ? readFileSync(file, 'utf8').split('\n').filter(Boolean) : []);

/** [pid, step] for each step the program noted in its STEP_LOG. */
export const logged = (file) => lines(file).map((line) => [Number(line.split(' ')[0]), line.split(' ').slice(1).join(' ')]);

/** Every line the program read on stdin, parsed (its INPUT_LOG, see tests/harness/faulty_notes.py). */
export const received = (file) => lines(file).map((line) => JSON.parse(line));

/** True while the process `pid` runs (a zombie, ended but not yet reaped by its parent, does not). */
export function alive(pid) {
  try {
    return readFileSync(`/proc/${pid}/stat`, 'utf8').split(')').at(-1).trim().split(' ')[0] !== 'Z';
  } catch {
    return false;
  }
}

/** True once the client was given a `type` chunk of the tool call `toolCallId` (over every request of `ctx`). */
export const shown = (ctx, type, toolCallId) => ctx.requests.flatMap((q) => q.chunks)
  .some((c) => c.type === type && c.toolCallId === toolCallId);

/**
 * The test's half of the `kill-mid-step` fault (tests/harness/faulty_notes.py, as
 * tests.harness.agents.kill_mid_step): once the client has been shown the second step's tool call,
 * SIGKILL the program (it waits mid-step there) and let the run's next program go on. The fault
 * follows what was observed, so it never races the runner.
 */
export async function killMidStep(ctx, faultDir, waitOptions = {}) {
  await waitFor(() => shown(ctx, 'tool-input-available', 'call_work_2') || ctx.info.finishEvent !== undefined,
    { what: 'call_work_2 shown', ...waitOptions });
  assert.ok(shown(ctx, 'tool-input-available', 'call_work_2'), `the second step's call was shown (status ${ctx.chat.status})`);
  const fault = (kind) => path.join(faultDir, `kill-mid-step-${ctx.info.runId}.${kind}`);
  const pid = Number(readFileSync(fault('pid'), 'utf8'));
  writeFileSync(fault('killed'), '');
  process.kill(pid, 'SIGKILL');
}

/** The bridges a server's persistent sessions run in (their pids, from its data folder's registry). */
export function bridgePids(server) {
  const folder = path.join(server.dataDir, 'sessions', 'bridges');
  if (!existsSync(folder)) return [];
  return readdirSync(folder).filter((f) => f.endsWith('.json'))
    .map((f) => recordedPid(path.join(folder, f)))
    .filter((pid) => pid !== null && alive(pid));
}

/** The pid a bridge's record names, or null when the record went between the folder's listing and
 * this read: a bridge removes its record as it ends (records are written atomically, by rename). */
function recordedPid(file) {
  try {
    return JSON.parse(readFileSync(file, 'utf8')).pid;
  } catch (error) {
    if (error.code === 'ENOENT') return null;
    throw error;
  }
}

/** End every session bridge of the server (SIGTERM: the bridge destroys its program) and wait for them. */
export async function destroySessions(server) {
  if (!server) return;
  for (const pid of bridgePids(server)) process.kill(pid, 'SIGTERM');
  await waitFor(() => bridgePids(server).length === 0, { what: 'the session bridges to end', timeoutMs: 20000 });
}

/**
 * A `createChat` context whose POSTs carry the chat's id (`chatId`), as the web client's do
 * (web/src/session.js): the server's session of a persistent harness is the chat's.
 */
export function chatWithId(base, chatId, options = {}) {
  return createChat({
    base,
    ...options,
    chatOptions: { id: chatId, ...options.chatOptions },
    transportOptions: { prepareSendMessagesRequest: ({ id, messages, body }) => ({ body: { ...body, id, messages } }) },
  });
}

/**
 * One turn with the real client (`whileRunning(ctx)` acts on it mid-turn); the run's status from
 * the run API. `ctx` (a `createChat` context) continues a chat; `chunks` is everything the client
 * was given, over every request of the turn.
 */
export async function turn(server, text, { whileRunning, ctx = createChat({ base: server.base }) } = {}) {
  const sent = sendTurn(ctx, text);
  await whileRunning?.(ctx);
  const result = await sent;
  assert.equal(result.status, 'ready', `turn status (error: ${result.error?.stack ?? result.error})`);
  const status = await (await fetch(`${server.base}/api/runs/${result.runId}`)).json();
  const requests = ctx.requests.slice(ctx.requests.findLastIndex((q) => q.method === 'POST'));
  return { ...result, runStatus: status, chunks: requests.flatMap((q) => q.chunks) };
}

/** The whole log of a run, replayed from 0 with the transport. */
export async function replay(server, runId) {
  const transport = makeTransport(server.base);
  return collectChunks(await transport.reconnectToStream({ chatId: runId, startIndex: 0 }));
}

/** What makes a chunk one of a kind in its step: the same key twice in one attempt of a step is a duplicate. */
function identity(chunk) {
  if (chunk.type === 'start' || chunk.type === 'finish') return chunk.type;
  if (/^(text|reasoning)-(start|end)$/.test(chunk.type)) return `${chunk.type} ${chunk.id}`;
  if (chunk.type.startsWith('tool-') && chunk.type !== 'tool-input-delta') return `${chunk.type} ${chunk.toolCallId}`;
  return undefined;
}

/**
 * The invariants of one run's stream as the client received it (`live`): `start` first, exactly
 * one `finish`, last; no chunk twice (a step redone after `reset-step` may show its chunks again);
 * the replay from 0 equals it chunk for chunk, and assembles (with the SDK's own reader) to
 * `message`'s parts when given.
 */
export async function assertRunInvariants(server, runId, live, message) {
  assertNoRepeats(live);
  const replayed = await replay(server, runId);
  assert.deepEqual(replayed, live, 'GET replay from 0 == what the client received, chunk for chunk');
  if (message !== undefined) {
    const { message: assembled, errors } = await assembleMessage(replayed);
    assert.deepEqual(errors, []);
    assert.deepEqual(parts(assembled), parts(message), 'the replay assembles to the live message');
  }
}

/** `start` first, exactly one `finish`, last, and no chunk twice (see `assertRunInvariants`). */
export function assertNoRepeats(live) {
  const kinds = types(live);
  assert.equal(kinds[0], 'start', kinds.join(','));
  assert.equal(kinds.filter((t) => t === 'finish').length, 1, `one finish: ${kinds.join(',')}`);
  assert.equal(kinds.at(-1), 'finish', `finish last: ${kinds.join(',')}`);
  const seen = new Map();
  let step = [];
  live.forEach((chunk, i) => {
    if (chunk.type === 'reset-step') { // the client drops the step's parts; it is shown again
      for (const key of step) seen.delete(key);
      step = [];
      return;
    }
    if (chunk.type === 'start-step') step = [];
    const key = identity(chunk);
    if (key === undefined) return;
    assert.ok(!seen.has(key), `chunk ${i} repeats chunk ${seen.get(key)}: ${JSON.stringify(chunk)} (${kinds.join(',')})`);
    seen.set(key, i);
    step.push(key);
  });
}

// ------------------------------------------------------------------------------------------------
// Approvals raised by the program (`Save a note: …`): signed by the server, answered with the real Chat
// ------------------------------------------------------------------------------------------------

/**
 * A real Chat configured like an app that approves in the UI (`sendAutomaticallyWhen:
 * lastAssistantMessageIsCompleteWithApprovalResponses`); `rewrite` tampers with request bodies on
 * the wire (see `recordingFetch`). `runIds` collects each POST's run id.
 */
export function approvalChat(base, { rewrite } = {}) {
  const rec = recordingFetch({ rewrite });
  const ctx = { requests: rec.requests, finishes: [], errors: [], runIds: [] };
  ctx.chat = new Chat({
    transport: makeTransport(base, { fetch: rec.fetch, onChatSendMessage: (r) => ctx.runIds.push(r.headers.get('x-workflow-run-id')) }),
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    onFinish: (e) => { ctx.finishes.push(e); },
    onError: (e) => { ctx.errors.push(e); },
  });
  return ctx;
}

/** Ask to save `note` and wait for the pause; the `save_note` part, its signature checked against the SDK's. */
export async function askToSave(ctx, note, secret) {
  await ctx.chat.sendMessage({ text: `Save a note: ${note}` });
  await waitFor(() => ctx.finishes.length === 1, { what: 'the pause' });
  const part = ctx.chat.lastMessage.parts.find((p) => p.type === 'tool-save_note');
  assert.equal(part?.state, 'approval-requested', describeParts(ctx.chat.lastMessage));
  const expected = await signToolApproval({ secret, approvalId: part.approval.id, toolCallId: part.toolCallId, toolName: 'save_note', input: part.input });
  assert.equal(part.approval.signature, expected, 'signed by the server like the SDK signs');
  return part;
}

/** Answer the approval with the Chat and wait for its automatic continuation; the assistant message. */
export async function answer(ctx, part, approved) {
  await ctx.chat.addToolApprovalResponse({ id: part.approval.id, approved, reason: approved ? undefined : 'not now' });
  await waitFor(() => ctx.finishes.length === 2 && ctx.chat.status === 'ready', { what: 'the continuation' });
  assert.deepEqual(ctx.errors, []);
  assert.equal(ctx.chat.messages.length, 2, 'one assistant message');
  return ctx.chat.lastMessage;
}
