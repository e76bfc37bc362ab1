// What the page keeps in localStorage, under one prefix:
//   chat  {id, messages}   the chat id and its messages (the history as last POSTed, or as
//                          finished): never a half-streamed assistant message, see main.js
//   run   {runId, chatId}  the run being streamed; set from x-workflow-run-id when a POST
//                          succeeds, removed when its stream ends with `finish`
//   token string           the optional API token (Authorization: Bearer)
const PREFIX = 'durable-harness:';

function read(key) {
  try {
    const raw = localStorage.getItem(PREFIX + key);
    return raw == null ? null : JSON.parse(raw);
  } catch {
    return null; // storage disabled or a corrupt entry: behave as if nothing was stored
  }
}

function write(key, value) {
  try {
    if (value == null) localStorage.removeItem(PREFIX + key);
    else localStorage.setItem(PREFIX + key, JSON.stringify(value));
  } catch {
    // quota exceeded or storage disabled: the page still works, it just won't survive a reload
  }
}

export const storage = {
  loadChat() {
    const chat = read('chat');
    if (chat == null || typeof chat.id !== 'string' || !Array.isArray(chat.messages)) return null;
    return chat;
  },
  saveChat(id, messages) { write('chat', { id, messages }); },

  loadRun() {
    const run = read('run');
    return run != null && typeof run.runId === 'string' ? run : null;
  },
  saveRun(runId, chatId) { write('run', { runId, chatId }); },
  clearRun() { write('run', null); },

  loadToken() {
    const token = read('token');
    return typeof token === 'string' ? token : '';
  },
  saveToken(token) { write('token', token ? token : null); },

  clearChat() {
    write('chat', null);
    write('run', null);
  },
};

/** The `Authorization` header of the stored token (none without one). */
export function authHeaders() {
  const token = storage.loadToken().trim();
  return token ? { authorization: `Bearer ${token}` } : undefined;
}
