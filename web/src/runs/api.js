// The runs inspector's requests: the run API of the chat app, with the token the chat page keeps
// (Settings, localStorage). Every request goes to this page's own origin; the server answers only
// with the caller's own runs (another principal's run is a 404, and the list reads only the
// caller's partition).
import { authHeaders } from '../storage.js';

const API = new URL('api', document.baseURI).href.replace(/\/$/, '');

/** An HTTP error with the API's `{"error": {code, message}}`. */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function request(path, { method = 'GET', body } = {}) {
  const headers = { ...authHeaders(), ...(body === undefined ? {} : { 'content-type': 'application/json' }) };
  const res = await fetch(`${API}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const data = await res.json().catch(() => null);
  if (!res.ok) {
    const hint = res.status === 401 ? ' Set an API token in Settings.' : '';
    throw new ApiError(res.status, data?.error?.code ?? 'http_error', `${data?.error?.message ?? `HTTP ${res.status}`}${hint}`);
  }
  return data;
}

const run = (runId) => `/runs/${encodeURIComponent(runId)}`;

/** One page of the caller's runs: `{runs, nextCursor}`. */
export function listRuns({ status, chat, limit, cursor } = {}) {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries({ status, chat, limit, cursor })) if (value) query.set(key, String(value));
  const text = query.toString();
  return request(`/runs${text ? `?${text}` : ''}`);
}

export const getStatus = (runId) => request(run(runId));
export const getResult = (runId) => request(`${run(runId)}/result`);
export const cancelRun = (runId) => request(`${run(runId)}/cancel`, { method: 'POST' });
/** Answer a paused run's approval; resolves to `{runId, status, stream}` of the continuation run. */
export const answerApproval = (runId, approvalId, approved) =>
  request(`${run(runId)}/approvals`, { method: 'POST', body: { approvals: [{ approvalId, approved }] } });

/**
 * Follow a run's log from chunk `start` (`GET /api/chat/<runId>/stream`) and call `onChunk(chunk)`
 * for each chunk until `finish` or `signal` aborts. A response that ends without `finish` (the
 * server's stream window, a dropped connection) is followed again from where it stopped, after a
 * pause that doubles up to 10 s.
 */
export async function followRun(runId, start, onChunk, signal) {
  let index = start;
  let pause = 500;
  for (;;) {
    let finished = false;
    try {
      const res = await fetch(`${API}/chat/${encodeURIComponent(runId)}/stream?startIndex=${index}`,
        { headers: authHeaders(), signal });
      if (!res.ok) {
        const data = await res.json().catch(() => null);
        throw new ApiError(res.status, data?.error?.code ?? 'http_error', data?.error?.message ?? `HTTP ${res.status}`);
      }
      for await (const chunk of sseChunks(res.body)) {
        index += 1;
        pause = 500;
        onChunk(chunk);
        if (chunk.type === 'finish') finished = true;
      }
    } catch (error) {
      if (signal.aborted || (error instanceof ApiError && error.status < 500)) throw error;
    }
    if (finished || signal.aborted) return;
    await new Promise((resolve) => { setTimeout(resolve, pause); });
    pause = Math.min(10_000, pause * 2);
  }
}

/** The JSON chunks of a server-sent event stream (`data: {...}` events; `[DONE]` and comments skipped). */
async function* sseChunks(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = event.split('\n').filter((line) => line.startsWith('data: ')).map((line) => line.slice(6)).join('\n');
      if (data && data !== '[DONE]') yield JSON.parse(data);
    }
  }
}
