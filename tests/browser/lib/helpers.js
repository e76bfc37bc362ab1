// Browser-test helpers: the Python chat server as a child process (as tests/node/lib/helpers.js
// starts it), Debian's Chromium driven by playwright-core, and a view of the page's DOM.
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';

import { chromium } from 'playwright-core';

const HERE = path.dirname(fileURLToPath(import.meta.url));
export const REPO_ROOT = path.resolve(HERE, '..', '..', '..');
export const PYTHON = process.env.PYTHON ?? path.join(REPO_ROOT, '.venv', 'bin', 'python');
export const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
export const ARTIFACTS = path.join(REPO_ROOT, 'tests', 'artifacts');
export const STATIC_INDEX = path.join(REPO_ROOT, 'layers', 'harness', 'durable_harness', 'server', 'static', 'index.html');

/** Bounded waits: every DOM wait in these tests gives up after this long. */
export const WAIT_MS = 20_000;

/** What the tests need; `page: false` for a test that does not load the built chat page. */
export function checkPrerequisites({ page = true } = {}) {
  const missing = [];
  if (page && !existsSync(STATIC_INDEX)) missing.push(`the built page (${path.relative(REPO_ROOT, STATIC_INDEX)}): run \`make web\``);
  if (!existsSync(CHROMIUM)) missing.push(`${CHROMIUM}: \`apt-get install -y chromium\``);
  if (!existsSync(PYTHON)) missing.push(`${PYTHON}: run \`make setup\``);
  if (missing.length) throw new Error(`browser tests need:\n  ${missing.join('\n  ')}`);
}

// ---------------------------------------------------------------------------------------------
// The Python server
// ---------------------------------------------------------------------------------------------

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
 * `python -m durable_harness serve` (default agent: my_agent with the demo model; `agent` names
 * another) on a free port, a fresh data dir and a fresh NOTES_DIR; resolves once GET /health
 * answers 200. `port` and `dataDir` start it where another one was (a restart on the same data:
 * the caller then owns the data dir, which `stop()` leaves); `kill()` SIGKILLs it.
 */
export async function startServer({ demoDelay = 0.02, env = {}, attempts = 150, agent, port: fixedPort, dataDir: fixedDataDir } = {}) {
  const port = fixedPort ?? await freePort();
  const dataDir = fixedDataDir ?? mkdtempSync(path.join(os.tmpdir(), 'dh-browser-'));
  const notesDir = path.join(dataDir, 'notes');
  const args = [
    '-m', 'durable_harness', 'serve',
    '--host', '127.0.0.1',
    '--port', String(port),
    '--data-dir', dataDir,
    '--demo-delay', String(demoDelay),
    '--log-level', 'warning',
    ...(agent ? ['--agent', agent] : []),
  ];
  const child = spawn(PYTHON, args, {
    cwd: REPO_ROOT,
    detached: true, // its own process group, so stop() ends the whole group
    stdio: ['ignore', 'pipe', 'pipe'],
    env: {
      ...process.env,
      PYTHONUNBUFFERED: '1',
      MODEL_ID: 'demo',
      AUTH_MODE: 'none',
      SERVE_WEB_PAGE: '1',
      NOTES_DIR: notesDir,
      ...env,
    },
  });
  let output = '';
  child.stdout.setEncoding('utf8').on('data', (d) => { output += d; });
  child.stderr.setEncoding('utf8').on('data', (d) => { output += d; });
  let exited = null;
  const exitPromise = new Promise((resolve) => {
    child.on('exit', (code, signal) => { exited = { code, signal }; resolve(exited); });
    child.on('error', (err) => { exited = { error: err.message }; resolve(exited); });
  });
  const base = `http://127.0.0.1:${port}`;
  const server = {
    base,
    port,
    dataDir,
    notesDir,
    logs: () => output,
    async stop() {
      if (exited == null) {
        try { process.kill(-child.pid, 'SIGTERM'); } catch { /* gone */ }
        if ((await Promise.race([exitPromise, sleep(5000).then(() => 'timeout')])) === 'timeout') {
          try { process.kill(-child.pid, 'SIGKILL'); } catch { /* gone */ }
          await exitPromise;
        }
      }
      if (fixedDataDir == null) rmSync(dataDir, { recursive: true, force: true });
    },
    /** SIGKILL the server's process group (a crash); resolves once it is gone, the data dir kept. */
    async kill() {
      if (exited == null) {
        try { process.kill(-child.pid, 'SIGKILL'); } catch { /* gone */ }
      }
      return exitPromise;
    },
  };
  let last = 'no attempt';
  for (let i = 0; i < attempts && exited == null; i++) {
    try {
      const res = await fetch(`${base}/health`, { signal: AbortSignal.timeout(2000) });
      if (res.status === 200) return server;
      last = `GET /health -> ${res.status}`;
    } catch (err) {
      last = String(err?.cause?.code ?? err?.message ?? err);
    }
    await sleep(100); // polling a starting process: there is no event to wait for
  }
  await server.stop();
  throw new Error(`server did not come up on ${base} (${exited ? JSON.stringify(exited) : last})\n${output}`);
}

/** The demo model's whole reply to `text`, read straight from the API (the uninterrupted reply). */
export async function referenceReply(base, text) {
  const body = { messages: [{ id: 'ref-u1', role: 'user', parts: [{ type: 'text', text }] }] };
  const res = await fetch(`${base}/api/chat`, { method: 'POST', body: JSON.stringify(body), signal: AbortSignal.timeout(WAIT_MS) });
  if (!res.ok) throw new Error(`reference POST: ${res.status} ${await res.text()}`);
  let reply = '';
  for (const event of (await res.text()).split('\n\n')) {
    if (!event.startsWith('data: ') || event === 'data: [DONE]') continue;
    const chunk = JSON.parse(event.slice(6));
    if (chunk.type === 'text-delta') reply += chunk.delta;
  }
  return reply;
}

// ---------------------------------------------------------------------------------------------
// The browser
// ---------------------------------------------------------------------------------------------

export const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/**
 * Debian's Chromium with a fresh profile (Playwright passes the folder as --user-data-dir).
 * Every request the page makes is recorded; `foreign()` lists those not to the server's origin.
 */
export async function openBrowser(base) {
  const profile = mkdtempSync(path.join(os.tmpdir(), 'dh-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: CHROMIUM_ARGS,
    viewport: { width: 1000, height: 800 },
    timeout: WAIT_MS,
  });
  context.setDefaultTimeout(WAIT_MS);
  // Record every Content-Security-Policy violation (the server's CSP: same origin, no inline
  // code or style), so a test fails if the page ever needs more than the policy allows.
  await context.addInitScript(() => {
    window.__cspViolations = [];
    document.addEventListener('securitypolicyviolation', (event) => {
      window.__cspViolations.push(`${event.effectiveDirective} blocked ${event.blockedURI || 'inline'}`);
    });
  });
  const page = context.pages()[0] ?? (await context.newPage());
  const requests = [];
  const console_ = [];
  page.on('request', (request) => requests.push({ method: request.method(), url: request.url() }));
  page.on('console', (message) => console_.push(`${message.type()}: ${message.text()}`));
  page.on('pageerror', (error) => console_.push(`pageerror: ${error.message}`));
  return {
    context,
    page,
    requests,
    console: console_,
    foreign: () => requests.filter((r) => !r.url.startsWith(`${base}/`) && !r.url.startsWith('data:')),
    /** Console errors and uncaught page errors, less those matching `allow`. */
    errors: (allow = /$^/) => console_.filter((line) => /^(error|pageerror):/.test(line) && !allow.test(line)),
    /** The CSP violations the current document has seen. */
    cspViolations: () => page.evaluate(() => window.__cspViolations ?? ['the CSP recorder did not run']),
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

/** A PNG of what the window shows (the header and the composer are sticky) under tests/artifacts/. */
export async function screenshot(page, name, { fullPage = false } = {}) {
  mkdirSync(ARTIFACTS, { recursive: true });
  const file = path.join(ARTIFACTS, name);
  await page.screenshot({ path: file, fullPage });
  return file;
}

// ---------------------------------------------------------------------------------------------
// The page, as a person sees it
// ---------------------------------------------------------------------------------------------

/** Everything the tests check, read from the DOM (evaluated in the page). */
export function readPage(page) {
  return page.evaluate(() => {
    const messages = [...document.querySelectorAll('#messages > article')].map((article) => ({
      role: article.dataset.role,
      id: article.dataset.messageId,
      text: [...article.querySelectorAll('[data-part="text"]')].map((p) => p.textContent).join(''),
      reasoning: [...article.querySelectorAll('[data-part="reasoning"]')].map((p) => p.textContent).join(''),
      tools: [...article.querySelectorAll('[data-part="tool"]')].map((card) => ({
        name: card.dataset.tool,
        state: card.dataset.state,
        stopped: card.dataset.stopped === 'true',
        label: card.querySelector('[data-testid="tool-state"]')?.textContent,
        note: card.querySelector('.tool-card__note')?.textContent,
        output: card.querySelector('.tool-card__output pre')?.textContent,
      })),
    }));
    const status = document.getElementById('status');
    return {
      status: status.dataset.status,
      statusText: status.textContent,
      messages,
      assistants: messages.filter((m) => m.role === 'assistant'),
      users: messages.filter((m) => m.role === 'user'),
      storedRun: localStorage.getItem('durable-harness:run'),
      storedChat: JSON.parse(localStorage.getItem('durable-harness:chat') ?? 'null'),
    };
  });
}

/**
 * Wait until `predicate(state)` holds for the page state (see readPage; `read` reads another page's),
 * polling on DOM changes.
 */
export async function waitForPage(page, predicate, description, timeout = WAIT_MS, read = readPage) {
  const deadline = Date.now() + timeout;
  let state;
  for (;;) {
    state = await read(page);
    if (predicate(state)) return state;
    const left = deadline - Date.now();
    if (left <= 0) {
      throw new Error(`timed out after ${timeout} ms waiting for: ${description}\nlast page state: ${JSON.stringify(state, null, 1)}`);
    }
    // Resolves on the next DOM mutation (or after `left`/at most 1 s, to re-check storage).
    await page.evaluate((ms) => new Promise((resolve) => {
      const observer = new MutationObserver(() => { observer.disconnect(); resolve(); });
      observer.observe(document.body, { subtree: true, childList: true, characterData: true, attributes: true });
      setTimeout(() => { observer.disconnect(); resolve(); }, ms);
    }), Math.min(left, 1000));
  }
}

export async function sendMessage(page, text) {
  await page.getByRole('textbox', { name: 'Message' }).fill(text);
  await page.getByRole('button', { name: 'Send' }).click();
}

export function wordCount(text) {
  return text.split(/\s+/).filter(Boolean).length;
}
