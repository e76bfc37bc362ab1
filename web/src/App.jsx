// The page: a top bar (Settings with the API token, New chat), the conversation, and the composer
// with its status line. The conversation state is `useChat({ chat })` over the session's Chat.
import { useChat } from '@ai-sdk/react';
import { Component, useCallback, useEffect, useLayoutEffect, useMemo, useRef, useState, useSyncExternalStore } from 'react';

import { isToolPart, Message } from './Message.jsx';
import { createSession } from './session.js';
import { Settings } from './Settings.jsx';
import { storage } from './storage.js';

const SUGGESTIONS = ['What is the weather in Paris?', 'Save a note: buy milk'];

/** "Failed to fetch chat: 404 {json error}" (the transport's wording) -> a readable line. */
export function describeError(error) {
  const text = String(error?.message ?? error ?? 'something went wrong');
  const http = /^Failed to fetch chat: (\d{3}) ([\s\S]*)$/.exec(text);
  if (!http) return `Error: ${text}`;
  let detail = http[2].trim();
  try {
    detail = JSON.parse(detail).error?.message ?? detail;
  } catch {
    // not JSON: keep the body as it is
  }
  const hint = http[1] === '401' ? ' Set an API token in Settings.' : '';
  return `Error (HTTP ${http[1]}): ${detail}${hint}`;
}

/** How long to wait before the `attempt`-th reconnect (from 0): 1 s doubling to 30 s, ±20 %
 * (spread out, so that the pages of a restarted server do not all come back at the same moment). */
export function reconnectDelay(attempt) {
  return Math.min(30_000, 1000 * 2 ** attempt) * (0.8 + 0.4 * Math.random());
}

function statusText({ status, error, lastMessage, runId, resuming, stopped, retryIn }) {
  const runNote = runId ? ` (run ${runId})` : '';
  switch (status) {
    case 'submitted':
      return resuming ? `Reconnecting to the reply${runNote}…` : 'Sending…';
    case 'streaming':
      if (stopped) return 'Stopping…';
      return resuming ? `Streaming (resumed)${runNote}…` : `Streaming${runNote}…`;
    case 'error':
      return describeError(error);
    case 'reconnecting':
      return `Connection lost (${describeError(error)}). Reconnecting in ${Math.ceil(retryIn / 1000)} s…`;
    case 'stopped':
      return 'Stopped: the reply was cut short. Send a message to go on.';
    default: {
      const waiting = lastMessage?.role === 'assistant'
        && lastMessage.parts.some((p) => isToolPart(p) && p.state === 'approval-requested');
      return waiting ? 'Ready: a tool call is waiting for your approval' : 'Ready';
    }
  }
}

function nearBottom() {
  const doc = document.scrollingElement ?? document.documentElement;
  return doc.scrollHeight - doc.scrollTop - doc.clientHeight < 120;
}

function scrollToBottom() {
  window.scrollTo({ top: document.documentElement.scrollHeight });
}

/** Keeps the composer usable if rendering a message ever throws (the error goes to the console). */
class RenderGuard extends Component {
  state = { failed: false };

  static getDerivedStateFromError() {
    return { failed: true };
  }

  componentDidUpdate(previous) {
    if (this.state.failed && previous.messages !== this.props.messages) this.setState({ failed: false });
  }

  render() {
    if (this.state.failed) return <p className="render-error" role="alert">This conversation could not be shown.</p>;
    return this.props.children;
  }
}

function ChatView({ session, focusPrompt, reconnectAttempt, onReconnect, onConnected }) {
  const { messages, status, error, sendMessage, clearError, addToolApprovalResponse } = useChat({ chat: session.chat });
  const { runId, resuming } = useSyncExternalStore(session.subscribe, session.getSnapshot);
  // A rejected action (send, approval, cancel, resume) that the Chat did not report itself.
  const [actionError, setActionError] = useState(null);
  const [input, setInput] = useState('');
  // Stop was pressed and the server cancelled the run: the reply that ends now was cut short.
  const [stopped, setStopped] = useState(false);
  const prompt = useRef(null);
  const form = useRef(null);
  const stick = useRef(true);

  const busy = status === 'submitted' || status === 'streaming';
  const lastMessage = messages.at(-1);
  // The Chat failed with the run still active (the connection dropped, the server went away or
  // answered 5xx; a 4xx forgets the run, see session.js): the page reconnects by itself.
  const retryIn = useMemo(
    () => (status === 'error' && runId && !actionError ? reconnectDelay(reconnectAttempt) : null),
    [status, runId, actionError, reconnectAttempt],
  );
  let shownStatus = actionError && !busy ? 'error' : status;
  if (retryIn != null) shownStatus = 'reconnecting';
  else if (stopped && status === 'ready') shownStatus = 'stopped';
  // The last reply will get no more chunks: a call still under way in it was stopped.
  const ended = !busy && !runId && shownStatus !== 'error';

  useEffect(() => {
    // A reply was streaming when the page went away: pick it up where the run is now.
    if (session.getSnapshot().runId) session.resume().catch(setActionError);
    if (focusPrompt) prompt.current.focus();
  }, [session, focusPrompt]);

  useEffect(() => {
    if (retryIn == null) return undefined;
    const timer = setTimeout(onReconnect, retryIn);
    window.addEventListener('online', onReconnect); // the network is back: no need to wait
    return () => {
      clearTimeout(timer);
      window.removeEventListener('online', onReconnect);
    };
  }, [retryIn, onReconnect]);

  useEffect(() => {
    // Connected again (a reply streams, or the run ended): the next drop waits 1 s again.
    if (status === 'streaming' || (status === 'ready' && !runId)) onConnected();
  }, [status, runId, onConnected]);

  useEffect(() => {
    const onScroll = () => { stick.current = nearBottom(); };
    window.addEventListener('scroll', onScroll, { passive: true });
    return () => window.removeEventListener('scroll', onScroll);
  }, []);

  // Follow a streaming reply, unless the reader scrolled up.
  useLayoutEffect(() => {
    if (busy && stick.current) scrollToBottom();
  }, [messages, busy]);

  const onApproval = useCallback((id, approved) => {
    addToolApprovalResponse({ id, approved }).catch(setActionError);
  }, [addToolApprovalResponse]);

  const send = () => {
    if (!input.trim() || busy) return;
    if (status === 'error') clearError();
    setActionError(null);
    setStopped(false);
    setInput('');
    stick.current = true;
    scrollToBottom();
    sendMessage({ text: input }).catch(setActionError);
  };

  const dismiss = () => {
    setActionError(null);
    clearError();
  };

  const streamingId = busy && lastMessage?.role === 'assistant' ? lastMessage.id : undefined;
  return (
    <>
      <main className="chat">
        <div id="messages" className="messages" role="log" aria-label="Conversation" aria-live="polite"
             aria-relevant="additions" aria-busy={busy}>
          <RenderGuard messages={messages}>
            {messages.map((message) => (
              <Message key={message.id} message={message} streaming={message.id === streamingId}
                       ended={message !== lastMessage || ended} onApproval={onApproval} />
            ))}
          </RenderGuard>
        </div>
        {messages.length === 0 && (
          <div id="empty" className="empty">
            <p>Ask anything. With the demo model, try:</p>
            <ul className="suggestions">
              {SUGGESTIONS.map((text) => (
                <li key={text}>
                  <button type="button" className="button button--ghost suggestion" onClick={() => {
                    setInput(text);
                    prompt.current.focus();
                  }}>{text}</button>
                </li>
              ))}
            </ul>
          </div>
        )}
      </main>

      <footer className="composer">
        <div className="statusbar">
          <p id="status" className="status" role="status" data-status={shownStatus}>
            {shownStatus === 'error' && actionError ? describeError(actionError)
              : statusText({ status: shownStatus, error, lastMessage, runId, resuming, stopped, retryIn })}
          </p>
          {(shownStatus === 'error' || shownStatus === 'reconnecting') && runId && (
            <button type="button" className="button button--ghost button--small" onClick={onReconnect}>Reconnect now</button>
          )}
          {shownStatus === 'error' && (
            <button type="button" className="button button--ghost button--small" onClick={dismiss}>Dismiss</button>
          )}
        </div>
        <form id="composer" className="composer__form" autoComplete="off" ref={form}
              onSubmit={(event) => { event.preventDefault(); send(); }}>
          <label htmlFor="prompt" className="visually-hidden">Message</label>
          <textarea id="prompt" name="prompt" rows={2} placeholder="Send a message" aria-describedby="prompt-hint" required
                    ref={prompt} value={input} onChange={(event) => setInput(event.target.value)}
                    onKeyDown={(event) => {
                      if (event.key === 'Enter' && !event.shiftKey && !event.nativeEvent.isComposing) {
                        event.preventDefault();
                        form.current.requestSubmit();
                      }
                    }} />
          <span id="prompt-hint" className="visually-hidden">Enter sends; Shift+Enter starts a new line.</span>
          <div className="composer__buttons">
            <button type="submit" className="button button--primary" disabled={busy}>Send</button>
            {busy && (
              <button type="button" className="button" onClick={() => {
                session.cancel().then((cancelled) => { if (cancelled) setStopped(true); }, setActionError);
              }}>Stop</button>
            )}
          </div>
        </form>
      </footer>
    </>
  );
}

export function App() {
  const [current, setCurrent] = useState(() => ({ session: createSession(), generation: 0, focusPrompt: false, attempt: 0 }));

  /** A fresh session from localStorage (it resumes a stored run), as a page reload would make. */
  const restart = async ({ clear, focusPrompt, attempt = 0 }) => {
    if (current.session.disposed) return; // a second click while the first is under way
    await current.session.dispose();
    if (clear) storage.clearChat();
    setCurrent(({ generation }) => ({ session: createSession(), generation: generation + 1, focusPrompt, attempt }));
  };
  const newChat = () => restart({ clear: true, focusPrompt: true });
  // Not chat.resumeStream() on the same Chat: after a dropped connection it keeps the half-streamed
  // reply and would append the run's replay (from chunk 0) to it; a fresh session replays the run
  // onto the history as it was POSTed, exactly as after a reload. Each reconnect in a row waits
  // longer (reconnectDelay), until one gets through (onConnected).
  // Stable while a reconnect is pending, so that its timer is not started again by a re-render.
  const reconnect = useCallback(
    () => restart({ clear: false, focusPrompt: false, attempt: current.attempt + 1 }),
    [current], // restart reads only `current`
  );
  const connected = useCallback(() => {
    setCurrent((now) => (now.attempt === 0 ? now : { ...now, attempt: 0 }));
  }, []);

  return (
    <>
      <a className="skip-link" href="#prompt">Skip to the message box</a>
      <header className="topbar">
        <div className="brand">
          <h1>durable-harness</h1>
          <p className="tagline">A durable agent: replies survive reloads and dropped connections.</p>
        </div>
        <div className="topbar__actions">
          <a className="button button--ghost" href="./runs">Runs</a>
          <Settings />
          <button type="button" className="button button--ghost" onClick={newChat}>New chat</button>
        </div>
      </header>
      <ChatView key={current.generation} session={current.session} focusPrompt={current.focusPrompt}
                reconnectAttempt={current.attempt} onReconnect={reconnect} onConnected={connected} />
    </>
  );
}
