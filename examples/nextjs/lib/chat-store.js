// What the browser keeps in localStorage so that a reload resumes the reply:
//   chat  {id, messages}  the history as last POSTed or as finished (never a half-streamed reply)
//   run   runId           the run being streamed: set from the POST's x-workflow-run-id, removed
//                         when its stream ends with `finish`
// No token: the route handler (app/api/[...path]/route.js) adds it on the server.
const KEY = 'nextjs-example:';

function read(key) {
  try {
    return JSON.parse(localStorage.getItem(KEY + key) ?? 'null');
  } catch {
    return null; // storage disabled or a corrupt entry: start afresh
  }
}

function write(key, value) {
  try {
    if (value == null) localStorage.removeItem(KEY + key);
    else localStorage.setItem(KEY + key, JSON.stringify(value));
  } catch {
    // quota or disabled storage: the chat works, it just won't survive a reload
  }
}

export const chatStore = {
  load() {
    const chat = read('chat');
    const ok = chat != null && typeof chat.id === 'string' && Array.isArray(chat.messages);
    const runId = read('run');
    return { chat: ok ? chat : null, runId: typeof runId === 'string' ? runId : null };
  },
  saveChat(id, messages) { write('chat', { id, messages }); },
  saveRun(runId) { write('run', runId); },
  clearRun() { write('run', null); },
  clear() { write('chat', null); write('run', null); },
};
