// Test helpers: run the Python chat server as a child process, and drive it with the REAL
// Vercel AI SDK client (`AbstractChat` from `ai` + `WorkflowChatTransport` from `@ai-sdk/workflow`).
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';

import { AbstractChat, readUIMessageStream } from 'ai';
import { WorkflowChatTransport } from '@ai-sdk/workflow/client';

export { WorkflowChatTransport, readUIMessageStream };

const HERE = path.dirname(fileURLToPath(import.meta.url));
export const NODE_TESTS_DIR = path.resolve(HERE, '..');
export const REPO_ROOT = path.resolve(NODE_TESTS_DIR, '..', '..');
export const PYTHON = process.env.PYTHON ?? path.resolve(NODE_TESTS_DIR, '../../.venv/bin/python');

// ---------------------------------------------------------------------------------------------
// The Python server
// ---------------------------------------------------------------------------------------------

/** A free TCP port on 127.0.0.1 (bound once with port 0, then released). */
export async function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

/**
 * Start `python -m durable_harness serve` on a free port with a fresh temp data dir, and wait
 * until `GET /health` answers 200. Returns `{ base, port, dataDir, logs(), stop(), kill() }`;
 * `stop()` resolves to how the process ended (`{ code, signal }`), `kill(signal)` sends `signal`
 * (default SIGKILL) and resolves once the process is gone, leaving the data dir. `env` adds (or
 * overrides) environment variables of the server process, e.g. `TOOL_APPROVAL_SECRET`.
 * `args({ port, dataDir })` may return other Python arguments (another server script), see
 * `startStackServer`. `port` and `dataDir` restart a server where another one was (the caller
 * then owns the data dir: `stop()` leaves it); `agent` and `sliceSeconds` go to `serve`.
 */
export async function startServer({
  demoDelay = 0.005, attempts = 150, intervalMs = 100, env = {}, args: makeArgs,
  port: fixedPort, dataDir: fixedDataDir, agent, sliceSeconds,
} = {}) {
  const port = fixedPort ?? await freePort();
  const dataDir = fixedDataDir ?? mkdtempSync(path.join(os.tmpdir(), 'dh-node-compat-'));
  const args = makeArgs ? makeArgs({ port, dataDir }) : [
    '-m', 'durable_harness', 'serve',
    '--host', '127.0.0.1',
    '--port', String(port),
    '--data-dir', dataDir,
    '--demo-delay', String(demoDelay),
    '--log-level', 'warning',
    ...(agent ? ['--agent', agent] : []),
    ...(sliceSeconds != null ? ['--slice-seconds', String(sliceSeconds)] : []),
  ];
  const child = spawn(PYTHON, args, {
    cwd: REPO_ROOT,
    detached: true, // own process group, so stop() can kill the whole group
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, PYTHONUNBUFFERED: '1', ...env },
  });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d) => { stdout += d; });
  child.stderr.setEncoding('utf8').on('data', (d) => { stderr += d; });
  let exited = null;
  const exitPromise = new Promise((resolve) => {
    child.on('exit', (code, signal) => { exited = { code, signal }; resolve(exited); });
    child.on('error', (err) => { exited = { error: err }; stderr += `\nspawn error: ${err.message}`; resolve(exited); });
  });

  const base = `http://127.0.0.1:${port}`;
  const server = {
    base,
    port,
    dataDir,
    pid: child.pid,
    logs: () => ({ stdout, stderr }),
    async stop() {
      if (exited == null && child.pid != null) {
        try { process.kill(-child.pid, 'SIGTERM'); } catch { /* already gone */ }
        const timer = sleep(5000).then(() => 'timeout');
        if ((await Promise.race([exitPromise, timer])) === 'timeout') {
          try { process.kill(-child.pid, 'SIGKILL'); } catch { /* already gone */ }
          await exitPromise;
        }
      }
      if (fixedDataDir == null) rmSync(dataDir, { recursive: true, force: true });
      return exited;
    },
    async kill(signal = 'SIGKILL') {
      if (exited == null && child.pid != null) {
        try { process.kill(-child.pid, signal); } catch { /* already gone */ }
      }
      return exitPromise;
    },
  };

  let lastError = 'no attempt made';
  for (let i = 0; i < attempts; i++) {
    if (exited != null) break;
    try {
      const res = await fetch(`${base}/health`, { signal: AbortSignal.timeout(2000) });
      const body = await res.text();
      if (res.status === 200) return server;
      lastError = `GET /health -> ${res.status} ${body}`;
    } catch (err) {
      lastError = String(err?.cause?.code ?? err?.message ?? err);
    }
    await sleep(intervalMs);
  }
  await server.stop();
  throw new Error(
    `server did not come up on ${base} ` +
      `(${exited ? `exited ${JSON.stringify(exited)}` : `${attempts} health checks failed`}; last: ${lastError})\n` +
      `command: ${PYTHON} ${args.join(' ')}\n--- stderr ---\n${stderr}\n--- stdout ---\n${stdout}`,
  );
}

/**
 * Start `tests/deploy/serve_stack.py`: the chat function's app over the AWS adapters, with the
 * SAM template deployed into moto (DynamoDB, S3, the real state machine run by moto's Step
 * Functions interpreter, the real slice and finalizer handlers in-process), served by uvicorn on
 * a free port. With `token` the app runs in token auth mode (accepting that bearer token), else
 * in AuthMode none. `sliceSeconds` is the template's SliceSeconds (0: one step per slice).
 */
export async function startStackServer({ token, sliceSeconds = 0, agent, env = {}, attempts = 300 } = {}) {
  return startServer({
    attempts,
    env,
    args: ({ port }) => [
      path.join('tests', 'deploy', 'serve_stack.py'),
      '--port', String(port),
      '--slice-seconds', String(sliceSeconds),
      ...(token ? ['--token', token] : []),
      ...(agent ? ['--agent', agent] : []),
    ],
  });
}

// ---------------------------------------------------------------------------------------------
// A framework-free Chat (what useChat wraps): AbstractChat + a plain in-memory ChatState
// ---------------------------------------------------------------------------------------------

class NodeChatState {
  constructor(messages = []) {
    this.status = 'ready';
    this.error = undefined;
    this.messages = messages;
  }
  pushMessage = (message) => { this.messages = this.messages.concat(message); };
  popMessage = () => { this.messages = this.messages.slice(0, -1); };
  replaceMessage = (index, message) => {
    this.messages = [...this.messages.slice(0, index), this.snapshot(message), ...this.messages.slice(index + 1)];
  };
  snapshot = (value) => structuredClone(value);
}

/** `ai` 7 exports only `AbstractChat`; the framework packages add a reactive state. This is ours. */
export class Chat extends AbstractChat {
  constructor({ messages, ...init } = {}) {
    super({ ...init, state: new NodeChatState(messages) });
  }
}

// ---------------------------------------------------------------------------------------------
// A fetch wrapper that records every request / SSE event and can cut response bodies
// ---------------------------------------------------------------------------------------------

const EVENT_END = /\r\n\r\n|\n\n|\r\r/;

/** The joined `data:` of one raw SSE event, or undefined (comment-only / no data). */
function eventData(raw) {
  const lines = raw.split(/\r\n|\n|\r/);
  const data = [];
  for (const line of lines) {
    if (line.startsWith('data:')) data.push(line.slice(5).startsWith(' ') ? line.slice(6) : line.slice(5));
  }
  return data.length ? data.join('\n') : undefined;
}

/**
 * Pass an SSE body through, reporting each complete UI-chunk event (`[DONE]` and comments are not
 * chunks) to `onChunk`. With `cutAfter = K` the body ends right after the K-th chunk event:
 * `cutMode: 'close'` ends it cleanly, `'error'` errors it like a dropped connection (undici's
 * `TypeError: terminated`). The upstream body is cancelled, i.e. the TCP stream is dropped.
 */
export function tapSseBody(body, { onChunk, cutAfter = Infinity, cutMode = 'close', onCut } = {}) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  const encoder = new TextEncoder();
  let buf = '';
  let count = 0;
  let ended = false;
  let pendingError = false;
  const cut = (controller) => {
    ended = true;
    onCut?.(count);
    reader.cancel('cut by test').catch(() => {});
    // controller.error() discards chunks still queued anywhere in the consumer's pipe chain, so
    // error only once the consumer has pulled again (and the pipeline had a moment to drain):
    // the client then has parsed exactly the chunks before the cut, as with a real dropped socket.
    if (cutMode === 'error') pendingError = true;
    else controller.close();
  };
  return new ReadableStream({
    start(controller) {
      if (cutAfter <= 0) cut(controller);
    },
    async pull(controller) {
      if (pendingError) {
        await sleep(50);
        controller.error(new TypeError('terminated (connection cut by the test)'));
        return;
      }
      // Loop until something was enqueued (a pull that enqueues nothing would stall the stream).
      while (!ended) {
        const { done, value } = await reader.read();
        if (done) {
          buf += decoder.decode();
          if (buf) controller.enqueue(encoder.encode(buf)); // a trailing partial event, as received
          buf = '';
          ended = true;
          controller.close();
          return;
        }
        buf += decoder.decode(value, { stream: true });
        let out = '';
        let m;
        while ((m = EVENT_END.exec(buf)) !== null) {
          const end = m.index + m[0].length;
          const raw = buf.slice(0, end);
          buf = buf.slice(end);
          out += raw;
          const data = eventData(raw);
          if (data === undefined || data === '[DONE]') continue;
          count++;
          let parsed;
          try { parsed = JSON.parse(data); } catch { parsed = { __unparseable__: data }; }
          onChunk?.(parsed);
          if (count >= cutAfter) {
            controller.enqueue(encoder.encode(out));
            cut(controller);
            return;
          }
        }
        if (out) {
          controller.enqueue(encoder.encode(out));
          return;
        }
      }
    },
    cancel(reason) {
      ended = true;
      return reader.cancel(reason);
    },
  });
}

/**
 * A `fetch` for the transport that records each request as
 * `{ method, url, startIndex, status, headers, chunks, bodyText }` (chunks = parsed UI chunks that
 * the client was given). `cut(request, indexOfSameMethod)` may return `{ after, mode }` to cut that
 * response body after `after` chunk events. `rewrite(parsedBody, request, indexOfSameMethod)` may
 * return a replacement for a JSON request body (or undefined to send it unchanged), e.g. to tamper
 * with what the client sends; `request.originalBody` then keeps what the client meant to send and
 * `request.requestBody` what went on the wire.
 */
export function recordingFetch({ cut, rewrite } = {}) {
  const requests = [];
  const counters = { POST: 0, GET: 0 };
  const wrapped = async (input, init = {}) => {
    const url = typeof input === 'string' ? input : input.url;
    const method = (init.method ?? 'GET').toUpperCase();
    const nth = counters[method] = (counters[method] ?? 0) + 1;
    const u = new URL(url);
    const record = {
      method,
      url,
      path: u.pathname,
      startIndex: u.searchParams.has('startIndex') ? Number(u.searchParams.get('startIndex')) : undefined,
      requestBody: typeof init.body === 'string' ? init.body : undefined,
      originalBody: typeof init.body === 'string' ? init.body : undefined,
      status: undefined,
      headers: undefined,
      chunks: [],
      cutAt: undefined,
    };
    requests.push(record);
    if (rewrite && record.requestBody !== undefined) {
      const replacement = rewrite(JSON.parse(record.requestBody), record, nth - 1);
      if (replacement !== undefined) {
        record.requestBody = JSON.stringify(replacement);
        init = { ...init, body: record.requestBody };
      }
    }
    const response = await fetch(input, init);
    record.status = response.status;
    record.headers = response.headers;
    if (!response.ok || response.body == null) {
      record.bodyText = await response.text();
      return new Response(record.bodyText, { status: response.status, statusText: response.statusText, headers: response.headers });
    }
    const spec = cut?.(record, nth - 1);
    const body = tapSseBody(response.body, {
      onChunk: (c) => record.chunks.push(c),
      cutAfter: spec?.after ?? Infinity,
      cutMode: spec?.mode ?? 'close',
      onCut: (n) => { record.cutAt = n; },
    });
    return new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers });
  };
  return { fetch: wrapped, requests };
}

/**
 * A fetch that records every request and holds GETs while `hold()` is in force. `answered()`
 * waits until no request is waiting for its response headers: a kill then cuts a stream (which
 * the transport resumes) rather than a request (a refused GET fails the chat, §9.4).
 */
export function holdingFetch() {
  const rec = recordingFetch();
  let gate = Promise.resolve();
  let open = () => {};
  let waiting = 0;
  return {
    requests: rec.requests,
    hold() { gate = new Promise((resolve) => { open = resolve; }); },
    release() { open(); },
    async answered(timeoutMs = 20000) {
      const deadline = Date.now() + timeoutMs;
      while (waiting > 0) {
        if (Date.now() > deadline) throw new Error('timed out waiting for the response headers');
        await sleep(5);
      }
    },
    fetch: async (input, init = {}) => {
      if ((init.method ?? 'GET').toUpperCase() === 'GET') await gate;
      waiting++;
      try {
        return await rec.fetch(input, init);
      } finally {
        waiting--;
      }
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Running the real client
// ---------------------------------------------------------------------------------------------

/** Collect console.error / console.warn output (the transport logs reconnects there). */
export async function withCapturedConsole(fn) {
  const logged = { error: [], warn: [] };
  const { error, warn } = console;
  console.error = (...a) => logged.error.push(a.map(String).join(' '));
  console.warn = (...a) => logged.warn.push(a.map(String).join(' '));
  try {
    return { result: await fn(), logged };
  } finally {
    console.error = error;
    console.warn = warn;
  }
}

export function makeTransport(base, { fetch: f, ...options } = {}) {
  return new WorkflowChatTransport({ api: `${base}/api/chat`, fetch: f, ...options });
}

/**
 * A `Chat` over a real `WorkflowChatTransport`. `info` collects the run id of the latest POST
 * (`x-workflow-run-id`, read in `onChatSendMessage`), the Chat's onFinish event, the transport's
 * onChatEnd info and onError errors. Without a custom `fetch`, a `recordingFetch` is used and its
 * `requests` are returned.
 */
export function createChat({ base, fetch: f, transportOptions = {}, chatOptions = {} }) {
  const rec = f ? null : recordingFetch();
  const info = { runId: undefined, finishEvent: undefined, chatEnd: undefined, errors: [] };
  const transport = makeTransport(base, {
    fetch: f ?? rec.fetch,
    onChatSendMessage: (response) => { info.runId = response.headers.get('x-workflow-run-id'); },
    onChatEnd: (e) => { info.chatEnd = e; },
    ...transportOptions,
  });
  const chat = new Chat({
    transport,
    onFinish: (e) => { info.finishEvent = e; },
    onError: (e) => { info.errors.push(e); },
    ...chatOptions,
  });
  return { chat, transport, info, requests: rec?.requests };
}

/** Send one user message on a chat made by `createChat` and await the whole turn. */
export async function sendTurn({ chat, info, requests }, text) {
  info.runId = undefined;
  info.finishEvent = undefined;
  info.chatEnd = undefined;
  await chat.sendMessage({ text });
  return {
    chat,
    status: chat.status,
    error: chat.error,
    message: chat.lastMessage,
    messages: chat.messages,
    runId: info.runId,
    finishReason: info.finishEvent?.finishReason,
    finishEvent: info.finishEvent,
    chatEnd: info.chatEnd,
    errors: info.errors,
    requests,
  };
}

/**
 * One chat turn with the real client: a fresh `Chat` over a `WorkflowChatTransport`,
 * `sendMessage({text})` awaited to completion. See `sendTurn` for the result.
 */
export async function runChatTurn({ base, text, ...options }) {
  return sendTurn(createChat({ base, ...options }), text);
}

/** Read a ReadableStream of UI chunks to the end (rejects with the stream's error). */
export async function collectChunks(stream) {
  const chunks = [];
  const reader = stream.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return chunks;
    chunks.push(value);
  }
}

/** Assemble UI chunks into the final UIMessage with the SDK's own `readUIMessageStream`. */
export async function assembleMessage(chunks) {
  const stream = new ReadableStream({
    start(controller) {
      for (const c of chunks) controller.enqueue(c);
      controller.close();
    },
  });
  let last;
  const errors = [];
  for await (const message of readUIMessageStream({ stream, onError: (e) => errors.push(e), terminateOnError: true })) {
    last = message;
  }
  return { message: last, errors };
}

/** A user-visible summary of a message's parts, for assertion messages. */
export function describeParts(message) {
  return JSON.stringify(message?.parts?.map((p) => ({ ...p, text: p.text?.length > 40 ? `${p.text.slice(0, 40)}…` : p.text })), null, 1);
}

/**
 * Wait until `predicate()` holds, checking every `intervalMs`; throws after `timeoutMs` (generous:
 * a loaded machine is slow, and a condition that holds returns at once).
 */
export async function waitFor(predicate, { timeoutMs = 20000, intervalMs = 10, what = 'condition' } = {}) {
  const deadline = Date.now() + timeoutMs;
  while (!(await predicate())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(intervalMs);
  }
}

/** `wrun_` + 26 chars of [0-9a-z], never issued by the server. */
export function unknownRunId() {
  const alphabet = '0123456789abcdefghijklmnopqrstuvwxyz';
  let s = 'wrun_';
  for (let i = 0; i < 26; i++) s += alphabet[Math.floor(Math.random() * alphabet.length)];
  return s;
}
