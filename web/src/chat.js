// The real AI SDK client, framework-free: `AbstractChat` from `ai` (what useChat wraps) over a
// small observable state, and `WorkflowChatTransport` from `@ai-sdk/workflow`.
import { AbstractChat, lastAssistantMessageIsCompleteWithApprovalResponses } from 'ai';
import { WorkflowChatTransport } from '@ai-sdk/workflow/client';

import { storage } from './storage.js';

/** The ChatState that AbstractChat drives; every change calls `onChange` (the page re-renders). */
class ObservableChatState {
  #status = 'ready';
  #error = undefined;
  #messages;
  #onChange;

  constructor(messages, onChange) {
    this.#messages = messages;
    this.#onChange = onChange;
  }

  get status() { return this.#status; }
  set status(value) { this.#status = value; this.#onChange(); }
  get error() { return this.#error; }
  set error(value) { this.#error = value; this.#onChange(); }
  get messages() { return this.#messages; }
  set messages(value) { this.#messages = value; this.#onChange(); }

  pushMessage = (message) => { this.messages = this.#messages.concat(message); };
  popMessage = () => { this.messages = this.#messages.slice(0, -1); };
  replaceMessage = (index, message) => {
    this.messages = [...this.#messages.slice(0, index), this.snapshot(message), ...this.#messages.slice(index + 1)];
  };
  snapshot = (value) => structuredClone(value);
}

export class Chat extends AbstractChat {
  constructor({ messages = [], onChange, ...init }) {
    super({ ...init, state: new ObservableChatState(messages, onChange) });
  }
}

/** `/api/chat` relative to the page, so the page also works behind a path prefix. */
export const CHAT_API = new URL('api/chat', document.baseURI).href.replace(/\/$/, '');

export function authHeaders() {
  const token = storage.loadToken().trim();
  return token ? { authorization: `Bearer ${token}` } : undefined;
}

export function streamUrl(runId) {
  return `${CHAT_API}/${encodeURIComponent(runId)}/stream`;
}

/**
 * One chat session: a Chat over a WorkflowChatTransport whose hooks keep localStorage in step.
 *
 * Persistence, and why a reload neither loses nor duplicates anything:
 * - the history is saved as it is POSTed (prepareSendMessagesRequest), and the run id when the
 *   POST succeeds (onChatSendMessage: x-workflow-run-id); nothing is saved while a reply streams;
 * - when the run's stream ends with `finish` (onChatEnd) the run id is removed and the finished
 *   messages are saved (onFinish);
 * - after a reload with a run id stored, the saved history is restored and `resumeStream()`
 *   replays the run from chunk 0 (prepareReconnectToStreamRequest maps the URL to
 *   `/api/chat/<runId>/stream`): a new turn is rebuilt as one assistant message, and a
 *   continuation after an approval streams into the stored assistant message, which the run's
 *   `start.messageId` (the persisted id) makes the Chat replace in place.
 */
export function createSession({ onChange }) {
  const saved = storage.loadChat();
  const session = { chat: undefined, runId: storage.loadRun()?.runId ?? null, resuming: false, disposed: false };

  const transport = new WorkflowChatTransport({
    api: CHAT_API,
    prepareSendMessagesRequest: ({ id, messages, body }) => {
      if (!session.disposed) storage.saveChat(id, messages);
      return { body: { ...body, id, messages }, headers: authHeaders() };
    },
    onChatSendMessage: (response) => {
      const runId = response.headers.get('x-workflow-run-id');
      if (session.disposed || !runId) return;
      session.runId = runId;
      storage.saveRun(runId, session.chat.id);
      onChange();
    },
    prepareReconnectToStreamRequest: ({ api }) => ({
      api: session.runId ? streamUrl(session.runId) : api,
      headers: authHeaders(),
    }),
    onChatEnd: () => {
      if (session.disposed) return;
      session.runId = null;
      session.resuming = false;
      storage.clearRun();
    },
  });

  session.chat = new Chat({
    id: saved?.id,
    messages: saved?.messages ?? [],
    transport,
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    onChange: () => { if (!session.disposed) onChange(); },
    onFinish: ({ messages }) => {
      if (session.disposed) return;
      session.resuming = false;
      // Save only what is whole: with a run still active (an error mid-stream), the stored
      // history stays as it was POSTed, so a reload or Reconnect replays the run onto it.
      if (session.runId == null) storage.saveChat(session.chat.id, messages);
      onChange();
    },
    onError: (error) => {
      if (session.disposed) return;
      // A 4xx for the run (unknown run, another principal's, bad credentials) will not get
      // better by retrying: forget the run and keep the history as it was posted.
      if (session.runId && /Failed to fetch chat: 4\d\d/.test(String(error?.message))) {
        session.runId = null;
        storage.clearRun();
      }
    },
  });

  /** Replay the active run onto the stored history (after a reload, or the Reconnect button). */
  session.resume = async () => {
    if (!session.runId) return;
    const stored = storage.loadChat();
    if (stored && stored.id === session.chat.id) session.chat.messages = stored.messages;
    session.chat.clearError();
    session.resuming = true;
    onChange();
    await session.chat.resumeStream();
  };

  /** Stop the reply: cancel the run on the server (its stream then ends with `finish`). */
  session.cancel = async () => {
    const runId = session.runId;
    if (runId) {
      try {
        const base = CHAT_API.replace(/\/chat$/, '');
        const res = await fetch(`${base}/runs/${encodeURIComponent(runId)}/cancel`, {
          method: 'POST',
          headers: authHeaders(),
        });
        if (res.ok || res.status === 409) return; // cancelled, or it had ended already
      } catch {
        // fall through: at least stop reading
      }
    }
    await session.chat.stop();
  };

  session.dispose = async () => {
    session.disposed = true;
    await session.chat.stop();
  };

  return session;
}
