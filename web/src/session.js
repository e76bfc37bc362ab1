// One chat session: `Chat` from @ai-sdk/react (the class `useChat` subscribes to) over a
// `WorkflowChatTransport` whose hooks keep localStorage in step, plus what the page needs beyond
// the Chat: the active run id (for the status line, Stop and resume) and the cancel request.
import { Chat } from '@ai-sdk/react';
import { WorkflowChatTransport } from '@ai-sdk/workflow/client';
import { lastAssistantMessageIsCompleteWithApprovalResponses } from 'ai';

import { authHeaders, storage } from './storage.js';

/** `/api/chat` relative to the page, so the page also works behind a path prefix. */
export const CHAT_API = new URL('api/chat', document.baseURI).href.replace(/\/$/, '');

export { authHeaders } from './storage.js';

export function streamUrl(runId) {
  return `${CHAT_API}/${encodeURIComponent(runId)}/stream`;
}

export function cancelUrl(runId) {
  return `${CHAT_API.replace(/\/chat$/, '')}/runs/${encodeURIComponent(runId)}/cancel`;
}

/**
 * Create a session. `session.chat` goes to `useChat({ chat })`; `subscribe` / `getSnapshot`
 * (for useSyncExternalStore) report `{ runId, resuming }`, which the Chat does not know about.
 *
 * Persistence, and why a reload neither loses nor duplicates anything:
 * - the history is saved as it is POSTed (prepareSendMessagesRequest), and the run id when the
 *   POST succeeds (onChatSendMessage: x-workflow-run-id); nothing is saved while a reply streams;
 * - when the run's stream ends with `finish` (onChatEnd) the run id is removed and the finished
 *   messages are saved (onFinish);
 * - after a reload (or Reconnect) with a run id stored, the saved history is restored and
 *   `resume()` replays the run from chunk 0 (prepareReconnectToStreamRequest maps the URL to
 *   `/api/chat/<runId>/stream`): a new turn is rebuilt as one assistant message, and a
 *   continuation after an approval streams into the stored assistant message, which the run's
 *   `start.messageId` (the persisted id) makes the Chat replace in place.
 *
 * useChat's `resume: true` is not used: besides resuming on mount, it resumes when the tab becomes
 * visible after a dropped connection, onto the half-streamed message, which a replay from chunk 0
 * would duplicate.
 */
export function createSession() {
  const saved = storage.loadChat();
  const listeners = new Set();
  let meta = { runId: storage.loadRun()?.runId ?? null, resuming: false };
  const session = { chat: undefined, disposed: false };

  const setMeta = (patch) => {
    if (session.disposed) return;
    meta = { ...meta, ...patch };
    for (const listener of listeners) listener();
  };
  session.subscribe = (listener) => {
    listeners.add(listener);
    return () => listeners.delete(listener);
  };
  session.getSnapshot = () => meta;

  const transport = new WorkflowChatTransport({
    api: CHAT_API,
    prepareSendMessagesRequest: ({ id, messages, body }) => {
      if (!session.disposed) storage.saveChat(id, messages);
      return { body: { ...body, id, messages }, headers: authHeaders() };
    },
    onChatSendMessage: (response) => {
      const runId = response.headers.get('x-workflow-run-id');
      if (session.disposed || !runId) return;
      storage.saveRun(runId, session.chat.id);
      setMeta({ runId, resuming: false });
    },
    prepareReconnectToStreamRequest: ({ api }) => ({
      api: meta.runId ? streamUrl(meta.runId) : api,
      headers: authHeaders(),
    }),
    onChatEnd: () => {
      if (session.disposed) return;
      storage.clearRun();
      setMeta({ runId: null, resuming: false });
    },
  });

  session.chat = new Chat({
    id: saved?.id,
    messages: saved?.messages ?? [],
    transport,
    // After Approve / Deny (addToolApprovalResponse), post the history with the answers.
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    onFinish: ({ messages }) => {
      if (session.disposed) return;
      // Save only what is whole: with a run still active (an error mid-stream), the stored
      // history stays as it was POSTed, so a reload or Reconnect replays the run onto it.
      if (meta.runId == null) storage.saveChat(session.chat.id, messages);
      setMeta({ resuming: false });
    },
    onError: (error) => {
      if (session.disposed) return;
      // A 4xx for the run (unknown run, another principal's, bad credentials) will not get
      // better by retrying: forget the run and keep the history as it was posted.
      if (meta.runId && /Failed to fetch chat: 4\d\d/.test(String(error?.message))) {
        storage.clearRun();
        setMeta({ runId: null });
      }
    },
  });

  /**
   * Replay the active run onto the stored history; called once, when the page shows a new session
   * (after a reload, or Reconnect, which starts a new session from localStorage).
   */
  session.resume = async () => {
    if (!meta.runId || session.disposed) return;
    setMeta({ resuming: true });
    await session.chat.resumeStream();
  };

  /**
   * Stop the reply: cancel the run on the server (its stream then ends with `finish`). True when
   * the run was cancelled (the reply that ends was cut short), false when it had ended already.
   */
  session.cancel = async () => {
    const { runId } = meta;
    if (runId) {
      try {
        const res = await fetch(cancelUrl(runId), { method: 'POST', headers: authHeaders() });
        if (res.ok) return true;
        if (res.status === 409) return false; // it had ended already
      } catch {
        // fall through: at least stop reading
      }
    }
    await session.chat.stop();
    return true;
  };

  session.dispose = async () => {
    session.disposed = true;
    listeners.clear();
    await session.chat.stop();
  };

  return session;
}
