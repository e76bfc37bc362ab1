// Tool-approval round trips with the REAL Vercel AI SDK client (`ai` 7.0.173 AbstractChat +
// `@ai-sdk/workflow` 2.0.43 WorkflowChatTransport) against the Python durable_harness server, run
// with TOOL_APPROVAL_SECRET (signed approval requests, reference §11) and NOTES_DIR (where the
// demo agent's `save_note` tool, which needs approval, writes its files).
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, createHmac } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

import { lastAssistantMessageIsCompleteWithApprovalResponses } from 'ai';
import { signToolApproval } from 'ai/internal';

import { Chat, describeParts, makeTransport, recordingFetch, startServer, waitFor } from '../lib/helpers.js';

const SECRET = 'topsecret-0123456789abcdefghijklmn';
const REFERENCE_SECRET = 'topsecret'; // the secret of the reference's signature vectors
const RUN_ID = /^wrun_[0-9a-z]{26}$/;
const T = { timeout: 20000 };

let server;
let base;
let notesDir;

before(async () => {
  notesDir = mkdtempSync(path.join(os.tmpdir(), 'dh-node-notes-'));
  server = await startServer({ demoDelay: 0.005, env: { TOOL_APPROVAL_SECRET: SECRET, NOTES_DIR: notesDir } });
  base = server.base;
}, { timeout: 30000 });

after(async () => {
  await server?.stop();
  if (notesDir) rmSync(notesDir, { recursive: true, force: true });
});

// -------------------------------------------------------------------------------------------------
// The approval signature, computed independently with node:crypto exactly as in reference §11
// -------------------------------------------------------------------------------------------------

/** Keys sorted recursively (UTF-16 code unit order, as JS `sort()`), no whitespace, JSON.stringify escaping. */
function canonicalJson(value) {
  if (value === null || value === undefined) return JSON.stringify(value);
  if (typeof value !== 'object') return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map((v) => (v === undefined ? 'null' : canonicalJson(v))).join(',')}]`;
  return `{${Object.keys(value).sort().map((k) => `${JSON.stringify(k)}:${canonicalJson(value[k])}`).join(',')}}`;
}

/** base64url without padding (Node's 'base64url' encoding never pads). */
function sign(secret, approvalId, toolCallId, toolName, input) {
  const inputDigest = createHash('sha256').update(canonicalJson(input), 'utf8').digest('base64url');
  const payload = JSON.stringify(['ai-sdk-tool-approval-v1', approvalId, toolCallId, toolName, inputDigest]);
  return createHmac('sha256', Buffer.from(secret, 'utf8')).update(payload, 'utf8').digest('base64url');
}

const VECTORS = [
  ['approval-abc', 'call_2', 'del', { path: 'notes/draft.txt' }, 'U2fOlljdXD-YhaTPK-P_cqLn9uzhW2ACrfSNjMHgIEE'],
  ['approval-call_2', 'call_2', 'del', { path: 'notes/draft.txt' }, 'teb6WHqttRiaa8nPLCnkHCfaZrhmfiFA99j7It6GDbs'],
  ['approval-call_11', 'call_11', 'deleteFile', { path: 'notes/draft.txt' }, 'FMwvgq3MwPAapUVCdi-3nA9CdVCODM0NdojMONvQr5s'],
  ['approval-call_7', 'call_7', 'writeFile', { path: 'docs/ü.md', opts: { mode: 'w', lines: [1, 2.5, null, true] }, a: 'x\ny' },
    'H6Fz1d84bCBB2N4b9xTX9KCoKTB0RlbZnkoEBxdVByM'],
];

// -------------------------------------------------------------------------------------------------
// Driving the real Chat through an approval round trip
// -------------------------------------------------------------------------------------------------

/** Every file in NOTES_DIR with its content. */
function notes() {
  return Object.fromEntries(readdirSync(notesDir).sort().map((f) => [f, readFileSync(path.join(notesDir, f), 'utf8')]));
}

const posts = (requests) => requests.filter((q) => q.method === 'POST');
const types = (chunks) => chunks.map((c) => c.type);
/** As it would go on the wire (the Chat's in-memory state keeps e.g. `reason: undefined`). */
const json = (value) => JSON.parse(JSON.stringify(value));
const toolParts = (message) => message.parts.filter((p) => p.type === 'tool-save_note');

/**
 * A real Chat over a real WorkflowChatTransport, configured like an app that approves in the UI:
 * `sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses`. `rewrite` tampers
 * with request bodies on the wire (see `recordingFetch`).
 */
function approvalChat({ rewrite } = {}) {
  const rec = recordingFetch({ rewrite });
  const ctx = { requests: rec.requests, finishes: [], errors: [], runIds: [] };
  const transport = makeTransport(base, {
    fetch: rec.fetch,
    onChatSendMessage: (res) => { ctx.runIds.push(res.headers.get('x-workflow-run-id')); },
  });
  ctx.chat = new Chat({
    transport,
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    onFinish: (e) => { ctx.finishes.push(e); },
    onError: (e) => { ctx.errors.push(e); },
  });
  return ctx;
}

/**
 * Turn 1: send `text` and wait until the assistant message holds a `tool-save_note` part in state
 * approval-requested. Checks the approval id and that its signature is the one computed here.
 */
async function requestApproval(ctx, text) {
  const { chat } = ctx;
  await chat.sendMessage({ text });
  await waitFor(() => chat.status !== 'submitted' && chat.status !== 'streaming', { what: 'turn 1 to end' });
  assert.equal(chat.status, 'ready', `turn 1 status (error: ${chat.error?.stack ?? chat.error})`);
  assert.deepEqual(ctx.errors, []);
  assert.equal(chat.messages.length, 2);
  const assistant = chat.lastMessage;
  assert.equal(assistant.role, 'assistant');
  const [part, ...more] = toolParts(assistant);
  assert.ok(part, `a tool-save_note part: ${describeParts(assistant)}`);
  assert.deepEqual(more, [], 'one tool-save_note part');
  assert.equal(part.state, 'approval-requested', describeParts(assistant));
  assert.equal(typeof part.toolCallId, 'string');
  assert.equal(part.approval.id, `approval-${part.toolCallId}`, 'approval id');
  assert.equal(typeof part.input?.title, 'string');
  assert.equal(typeof part.input?.text, 'string');
  const expected = sign(SECRET, part.approval.id, part.toolCallId, 'save_note', part.input);
  assert.equal(part.approval.signature, expected, 'approval.signature == HMAC computed per §11');

  const [post1] = posts(ctx.requests);
  assert.equal(post1.status, 200);
  assert.match(ctx.runIds[0] ?? '', RUN_ID);
  const chunks = post1.chunks;
  assert.equal(chunks[0].type, 'start');
  assert.equal(chunks[0].messageId, assistant.id, 'assistant id == start.messageId');
  assert.equal(chunks.at(-1).type, 'finish');
  const requestChunks = chunks.filter((c) => c.type === 'tool-approval-request');
  assert.deepEqual(requestChunks, [{ type: 'tool-approval-request', approvalId: part.approval.id, toolCallId: part.toolCallId, signature: expected }]);
  assert.ok(types(chunks).indexOf('tool-input-available') < types(chunks).indexOf('tool-approval-request'), 'input before approval request');
  assert.equal(chunks.at(-1).finishReason, 'tool-calls', 'turn 1 stops for the approval');
  assert.ok(!types(chunks).some((ty) => ty.startsWith('tool-output-')), 'no tool output before the approval');
  assert.equal(ctx.finishes.length, 1);
  assert.equal(ctx.finishes[0].isError, false);
  assert.equal(ctx.finishes[0].finishReason, 'tool-calls');
  return { assistant, part, signature: expected };
}

/** Answer the approval and wait for the automatic continuation POST to be finished. */
async function respond(ctx, response) {
  const { chat } = ctx;
  await chat.addToolApprovalResponse(response);
  await waitFor(() => ctx.finishes.length >= 2 && chat.status !== 'submitted' && chat.status !== 'streaming', {
    what: `the continuation to finish (status ${chat.status}, ${posts(ctx.requests).length} POSTs)`,
  });
  // No automatic re-send loop: give the Chat time to (wrongly) send again.
  await sleep(300);
  assert.deepEqual(ctx.requests.map((q) => `${q.method} ${q.path} -> ${q.status}`),
    [`POST /api/chat -> 200`, `POST /api/chat -> ${ctx.requests[1]?.status}`], 'exactly two POSTs, no GET, no loop');
  assert.equal(ctx.finishes.length, 2);
  const [, post2] = posts(ctx.requests);
  return { post2, sent: JSON.parse(post2.requestBody), original: JSON.parse(post2.originalBody), finish: ctx.finishes[1] };
}

/** The continuation finished normally in the SAME assistant message; returns the message. */
function assertContinuationOk(ctx, { assistant, post2 }) {
  const { chat } = ctx;
  assert.equal(chat.status, 'ready', `continuation status (error: ${chat.error?.stack ?? chat.error})`);
  assert.deepEqual(ctx.errors, []);
  assert.equal(ctx.finishes[1].isError, false);
  assert.equal(ctx.finishes[1].isDisconnect, false);
  assert.equal(ctx.finishes[1].isAbort, false);
  assert.equal(post2.status, 200);
  assert.match(ctx.runIds[1] ?? '', RUN_ID);
  assert.deepEqual(chat.messages.map((m) => m.role), ['user', 'assistant'], 'still ONE assistant message');
  assert.equal(chat.lastMessage.id, assistant.id, 'same assistant message id');
  const chunks = post2.chunks;
  assert.equal(chunks[0].type, 'start', `continuation chunks: ${types(chunks)}`);
  assert.equal(chunks[0].messageId, assistant.id, 'continuation start.messageId == original assistant id');
  assert.equal(chunks.at(-1).type, 'finish');
  assert.equal(chunks.filter((c) => c.type === 'finish').length, 1);
  return chat.lastMessage;
}

/** The text after the tool part (the model's answer in the continuation). */
function answerAfter(message, part) {
  const i = message.parts.findIndex((p) => p.type === part.type && p.toolCallId === part.toolCallId);
  const texts = message.parts.slice(i + 1).filter((p) => p.type === 'text');
  assert.ok(texts.length >= 1, `a text part after the tool part: ${describeParts(message)}`);
  for (const t of texts) assert.equal(t.state, 'done');
  return texts.map((t) => t.text).join('');
}

/** The posted assistant message's save_note part. */
function postedPart(body) {
  const assistant = body.messages.at(-1);
  assert.equal(assistant.role, 'assistant');
  return assistant.parts.find((p) => p.type === 'tool-save_note');
}

// -------------------------------------------------------------------------------------------------

describe('0. the signer used by these tests', () => {
  it('matches the §11 test vectors and the SDK\'s own signToolApproval', T, async () => {
    for (const [approvalId, toolCallId, toolName, input, signature] of VECTORS) {
      assert.equal(sign(REFERENCE_SECRET, approvalId, toolCallId, toolName, input), signature, approvalId);
      assert.equal(await signToolApproval({ secret: REFERENCE_SECRET, approvalId, toolCallId, toolName, input }), signature, `SDK ${approvalId}`);
    }
  });
});

describe('1. approve', () => {
  it('signed approval request -> addToolApprovalResponse(approved) -> the tool runs in the same assistant message', T, async (t) => {
    const ctx = approvalChat();
    const before = notes();
    const { assistant, part, signature } = await requestApproval(ctx, 'Save a note: buy milk and eggs');
    assert.deepEqual(part.input, { title: 'buy milk and eggs', text: 'buy milk and eggs' });
    assert.deepEqual(notes(), before, 'nothing written before the approval');

    const { post2, sent, original, finish } = await respond(ctx, { id: part.approval.id, approved: true });
    assert.deepEqual(sent, original, 'the body was not rewritten');
    // The second POST (§7.1): the whole history, the part approval-responded with the signature.
    assert.deepEqual(Object.keys(sent), ['messages']);
    assert.equal(sent.messages.length, 2);
    assert.equal(sent.messages[1].id, assistant.id);
    const posted = postedPart(sent);
    assert.equal(posted.state, 'approval-responded');
    assert.deepEqual(posted.approval, { id: part.approval.id, signature, approved: true });
    assert.deepEqual(posted.input, part.input);

    const message = assertContinuationOk(ctx, { assistant, post2 });
    const [tool] = toolParts(message);
    assert.equal(tool.state, 'output-available', describeParts(message));
    assert.equal(tool.toolCallId, part.toolCallId);
    assert.equal(tool.output.saved, 'buy-milk-and-eggs.txt');
    assert.deepEqual(json(tool.approval), { id: part.approval.id, signature, approved: true });
    const file = path.join(notesDir, tool.output.saved);
    assert.ok(existsSync(file), `${file} exists`);
    assert.equal(readFileSync(file, 'utf8'), 'buy milk and eggs\n');
    const answer = answerAfter(message, tool);
    assert.match(answer, /buy-milk-and-eggs\.txt/);
    assert.equal(finish.finishReason, 'stop');

    // 6. The approved continuation as received: start{same id}, then the tool output before any
    // new text, then the answer; no second approval request and no repeated tool input.
    t.diagnostic(`turn 1: ${types(posts(ctx.requests)[0].chunks).join(', ')}`);
    const chunks = post2.chunks;
    t.diagnostic(`approved continuation: ${types(chunks).join(', ')}`);
    const outputs = chunks.filter((c) => c.type === 'tool-output-available');
    assert.deepEqual(outputs.map((c) => c.toolCallId), [part.toolCallId]);
    assert.deepEqual(outputs[0].output, tool.output);
    const iOut = chunks.indexOf(outputs[0]);
    const iText = types(chunks).indexOf('text-start');
    assert.ok(iOut > 0 && iText > iOut, 'tool-output-available before the answer text');
    assert.ok(types(chunks).slice(iOut, iText).includes('start-step'), 'the answer is a new step');
    for (const type of ['tool-approval-request', 'tool-input-start', 'tool-input-available', 'tool-output-denied', 'error']) {
      assert.ok(!types(chunks).includes(type), `no ${type} in the continuation`);
    }
    assert.equal(chunks.at(-1).finishReason, 'stop');
  });
});

describe('2. deny', () => {
  it('addToolApprovalResponse(denied, reason) -> output-denied, nothing written, a text answer', T, async (t) => {
    const ctx = approvalChat();
    const before = notes();
    const { assistant, part, signature } = await requestApproval(ctx, 'Save a note: call the dentist on monday');
    const { post2, sent } = await respond(ctx, { id: part.approval.id, approved: false, reason: 'not today' });
    assert.deepEqual(postedPart(sent).approval, { id: part.approval.id, signature, approved: false, reason: 'not today' });

    const message = assertContinuationOk(ctx, { assistant, post2 });
    const [tool] = toolParts(message);
    assert.equal(tool.state, 'output-denied', describeParts(message));
    assert.deepEqual(json(tool.approval), { id: part.approval.id, signature, approved: false, reason: 'not today' });
    assert.equal(tool.output, undefined);
    assert.deepEqual(notes(), before, 'no file written');
    const answer = answerAfter(message, tool);
    assert.match(answer, /did not run save_note/);
    t.diagnostic(`denied continuation: ${types(post2.chunks).join(', ')}`);
    assert.deepEqual(post2.chunks.filter((c) => c.type === 'tool-output-denied'), [{ type: 'tool-output-denied', toolCallId: part.toolCallId }]);
    assert.ok(!types(post2.chunks).some((ty) => ty === 'tool-output-available' || ty === 'tool-output-error'));
  });
});

describe('3. tampered signature', () => {
  for (const [label, tamper] of [
    ['a flipped character', (s) => (s[0] === 'A' ? 'B' : 'A') + s.slice(1)],
    ['removed', () => undefined],
  ]) {
    it(`signature ${label} on the wire -> the tool does not run, the part stays approval-responded, a text answer`, T, async (t) => {
      const ctx = approvalChat({
        rewrite: (body, q, nth) => {
          if (nth !== 1) return undefined;
          const p = postedPart(body);
          const signature = tamper(p.approval.signature);
          if (signature === undefined) delete p.approval.signature;
          else p.approval.signature = signature;
          return body;
        },
      });
      const before = notes();
      const { assistant, part, signature } = await requestApproval(ctx, 'Save a note: pick up the parcel');
      const { post2, sent, original } = await respond(ctx, { id: part.approval.id, approved: true });
      assert.equal(postedPart(original).approval.signature, signature, 'the client sent the true signature');
      assert.notEqual(postedPart(sent).approval.signature, signature, 'the wire carried a bad one');

      const message = assertContinuationOk(ctx, { assistant, post2 });
      const [tool] = toolParts(message);
      assert.equal(tool.state, 'approval-responded', describeParts(message));
      assert.deepEqual(json(tool.approval), { id: part.approval.id, signature, approved: true });
      assert.deepEqual(notes(), before, 'the tool did not run: no file written');
      t.diagnostic(`bad-signature continuation: ${types(post2.chunks).join(', ')}`);
      for (const c of post2.chunks) {
        assert.notEqual(c.toolCallId, part.toolCallId, `no tool chunk for the call: ${JSON.stringify(c)}`);
      }
      const answer = answerAfter(message, tool);
      t.diagnostic(`answer: ${answer}`);
      assert.match(answer, /save_note .*not executed/, 'the model says the tool could not run');
      assert.equal(ctx.finishes[1].finishReason, 'stop');
    });
  }
});

describe('4. tampered input', () => {
  it('input.text rewritten on the wire (signature unchanged) -> the tool does not run', T, async (t) => {
    const EVIL = 'TAMPERED: this text was never signed';
    const ctx = approvalChat({
      rewrite: (body, q, nth) => {
        if (nth !== 1) return undefined;
        postedPart(body).input.text = EVIL;
        return body;
      },
    });
    const before = notes();
    const { assistant, part, signature } = await requestApproval(ctx, 'Save a note: water the plants today');
    const { post2, sent } = await respond(ctx, { id: part.approval.id, approved: true });
    const wire = postedPart(sent);
    assert.equal(wire.input.text, EVIL);
    assert.equal(wire.approval.signature, signature);
    assert.notEqual(sign(SECRET, part.approval.id, part.toolCallId, 'save_note', wire.input), signature, 'the signature no longer matches the input');

    const message = assertContinuationOk(ctx, { assistant, post2 });
    const after = notes();
    assert.ok(!Object.values(after).some((text) => text.includes(EVIL)), `no file with the tampered text: ${JSON.stringify(after)}`);
    assert.deepEqual(after, before, 'no file written at all');
    const [tool] = toolParts(message);
    assert.equal(tool.state, 'approval-responded', describeParts(message));
    t.diagnostic(`tampered-input continuation: ${types(post2.chunks).join(', ')}`);
    for (const c of post2.chunks) {
      assert.notEqual(c.toolCallId, part.toolCallId, `no tool chunk for the call: ${JSON.stringify(c)}`);
    }
    assert.match(answerAfter(message, tool), /save_note .*not executed/, 'the model says the tool could not run');
    assert.equal(ctx.finishes[1].finishReason, 'stop');
  });
});

describe('5. unknown approval id', () => {
  const NEVER = 'approval-call_never_issued';

  it('a raw POST whose approval response matches no request -> HTTP 400 {error:{code:"unknown_approval"}}', T, async () => {
    const ctx = approvalChat();
    const { part } = await requestApproval(ctx, 'Save a note: renew the passport');
    const before = notes();
    const [user, assistant] = structuredClone(ctx.chat.messages);
    const p = assistant.parts.find((x) => x.type === 'tool-save_note');
    p.state = 'approval-responded';
    p.approval = { ...p.approval, id: NEVER, approved: true };
    const res = await fetch(`${base}/api/chat`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ messages: [user, assistant] }),
    });
    const text = await res.text();
    assert.equal(res.status, 400, text);
    assert.match(res.headers.get('content-type') ?? '', /application\/json/);
    const body = JSON.parse(text);
    assert.equal(body.error?.code, 'unknown_approval', text);
    assert.equal(typeof body.error?.message, 'string');
    assert.equal(res.headers.get('x-workflow-run-id'), null, 'no run was started');
    assert.deepEqual(notes(), before);
    assert.equal(part.approval.id, `approval-${part.toolCallId}`);
  });

  it('through the transport: the Chat ends in status error after one continuation POST (no loop)', T, async () => {
    const ctx = approvalChat({
      rewrite: (body, q, nth) => {
        if (nth !== 1) return undefined;
        postedPart(body).approval.id = NEVER;
        return body;
      },
    });
    const before = notes();
    const { assistant, part } = await requestApproval(ctx, 'Save a note: book the train tickets');
    const { post2, finish } = await respond(ctx, { id: part.approval.id, approved: true });
    assert.equal(post2.status, 400);
    assert.equal(JSON.parse(post2.bodyText).error.code, 'unknown_approval');
    assert.equal(ctx.chat.status, 'error');
    assert.match(ctx.chat.error?.message ?? '', /Failed to fetch chat: 400 .*unknown_approval/);
    assert.equal(ctx.errors.length, 1);
    assert.equal(finish.isError, true);
    assert.deepEqual(ctx.chat.messages.map((m) => m.id), [ctx.chat.messages[0].id, assistant.id]);
    assert.equal(toolParts(ctx.chat.lastMessage)[0].state, 'approval-responded');
    assert.deepEqual(notes(), before, 'no file written');
    assert.equal(ctx.runIds.length, 1, 'no second run');
  });
});
