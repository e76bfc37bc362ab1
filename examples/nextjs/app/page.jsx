'use client';
// The page. localStorage exists only in the browser, so the chat is rendered once it has been read
// (the server-rendered HTML is the empty shell).
import { useEffect, useState } from 'react';

import { chatStore } from '../lib/chat-store.js';
import { Chat } from './Chat.jsx';

export default function Page() {
  const [saved, setSaved] = useState(null);
  useEffect(() => setSaved(chatStore.load()), []);
  const newChat = () => {
    chatStore.clear();
    setSaved({ chat: null, runId: null, key: crypto.randomUUID() });
  };
  return (
    <main>
      <header className="bar">
        <h1>durable-harness × Next.js</h1>
        <button type="button" onClick={newChat}>New chat</button>
      </header>
      {saved == null ? <p className="status">Loading…</p> : <Chat key={saved.key ?? 'stored'} saved={saved} />}
    </main>
  );
}
