import './styles.css';

import { createSession } from './chat.js';
import { isToolPart, MessageList } from './render.js';
import { storage } from './storage.js';

const $ = (id) => document.getElementById(id);
const ui = {
  messages: $('messages'),
  empty: $('empty'),
  status: $('status'),
  reconnect: $('reconnect'),
  dismiss: $('dismiss'),
  form: $('composer'),
  prompt: $('prompt'),
  send: $('send'),
  stop: $('stop'),
  token: $('token'),
  newChat: $('new-chat'),
};

let session;
let renderQueued = false;
const list = new MessageList(ui.messages, { onApproval });

function onApproval(approvalId, approved, actions) {
  for (const button of actions.querySelectorAll('button')) button.disabled = true;
  session.chat.addToolApprovalResponse({ id: approvalId, approved }).catch(showError);
}

/** "Failed to fetch chat: 404 {json error}" (the transport's wording) -> a readable line. */
function describeError(error) {
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

function showError(error) {
  console.error(error);
  ui.status.dataset.status = 'error';
  ui.status.textContent = describeError(error);
}

function scheduleRender() {
  if (renderQueued) return;
  renderQueued = true;
  // A microtask, not requestAnimationFrame: a background tab (or a headless one) still updates.
  queueMicrotask(() => {
    renderQueued = false;
    try {
      render();
    } catch (error) {
      console.error('render failed', error); // the next change renders again
    }
  });
}

function nearBottom() {
  const doc = document.scrollingElement ?? document.documentElement;
  return doc.scrollHeight - doc.scrollTop - doc.clientHeight < 120;
}

function statusText(chat) {
  const runNote = session.runId ? ` (run ${session.runId})` : '';
  switch (chat.status) {
    case 'submitted':
      return session.resuming ? `Reconnecting to the reply${runNote}…` : 'Sending…';
    case 'streaming':
      return session.resuming ? `Streaming (resumed)${runNote}…` : `Streaming${runNote}…`;
    case 'error':
      return describeError(chat.error);
    default: {
      const waiting = chat.lastMessage?.role === 'assistant'
        && chat.lastMessage.parts.some((p) => isToolPart(p) && p.state === 'approval-requested');
      return waiting ? 'Ready: a tool call is waiting for your approval' : 'Ready';
    }
  }
}

function render() {
  const { chat } = session;
  const busy = chat.status === 'submitted' || chat.status === 'streaming';
  const stick = nearBottom();
  const last = chat.lastMessage;
  list.render(chat.messages, { streamingId: busy && last?.role === 'assistant' ? last.id : undefined });
  ui.empty.hidden = chat.messages.length > 0;
  ui.messages.setAttribute('aria-busy', String(busy));

  ui.status.dataset.status = chat.status;
  ui.status.textContent = statusText(chat);
  ui.reconnect.hidden = !(chat.status === 'error' && session.runId);
  ui.dismiss.hidden = chat.status !== 'error';
  ui.send.disabled = busy;
  ui.stop.hidden = !busy;
  if (stick && busy) window.scrollTo({ top: document.documentElement.scrollHeight });
}

async function send(text) {
  if (!text.trim()) return;
  const { chat } = session;
  if (chat.status === 'submitted' || chat.status === 'streaming') return;
  if (chat.status === 'error') chat.clearError();
  ui.prompt.value = '';
  window.scrollTo({ top: document.documentElement.scrollHeight });
  await chat.sendMessage({ text });
}

function start() {
  session = createSession({ onChange: scheduleRender });
  render();
  // A reply was streaming when the page went away: pick it up where the run is now.
  if (session.runId) session.resume().catch(showError);
}

ui.form.addEventListener('submit', (event) => {
  event.preventDefault();
  send(ui.prompt.value).catch(showError);
});

ui.prompt.addEventListener('keydown', (event) => {
  if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    ui.form.requestSubmit();
  }
});

for (const button of document.querySelectorAll('.suggestion')) {
  button.addEventListener('click', () => {
    ui.prompt.value = button.textContent;
    ui.prompt.focus();
  });
}

ui.stop.addEventListener('click', () => { session.cancel().catch(showError); });
ui.reconnect.addEventListener('click', () => { session.resume().catch(showError); });
ui.dismiss.addEventListener('click', () => { session.chat.clearError(); });

ui.newChat.addEventListener('click', async () => {
  const old = session;
  await old.dispose();
  storage.clearChat();
  start();
  ui.prompt.focus();
});

ui.token.value = storage.loadToken();
$('settings-form').addEventListener('submit', (event) => {
  event.preventDefault(); // Enter in the token field: the token is already saved
  ui.token.closest('details').open = false;
});
ui.token.addEventListener('input', () => storage.saveToken(ui.token.value.trim()));

start();
