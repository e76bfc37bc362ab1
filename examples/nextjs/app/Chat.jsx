'use client';
// The chat: useChat (@ai-sdk/react) over WorkflowChatTransport from '@ai-sdk/workflow/client'
// (not '@ai-sdk/workflow': that entry point pulls in the workflow server runtime and breaks
// `next build`). Every request goes to this app's own /api/... route handler, which adds the token.
import { useChat } from '@ai-sdk/react';
import { WorkflowChatTransport } from '@ai-sdk/workflow/client';
import { lastAssistantMessageIsCompleteWithApprovalResponses } from 'ai';
import { useEffect, useRef, useState } from 'react';

import { chatStore } from '../lib/chat-store.js';
import { Message } from './Message.jsx';

export function Chat({ saved }) {
  const runId = useRef(saved.runId); // the run being streamed, for Stop and for resuming
  const [transport] = useState(() => new WorkflowChatTransport({
    api: '/api/chat',
    // The history is saved as it is POSTed, so a reload mid-reply has it to replay the run onto.
    prepareSendMessagesRequest: ({ id, messages, body }) => {
      chatStore.saveChat(id, messages);
      return { body: { ...body, id, messages } };
    },
    onChatSendMessage: (response) => {
      runId.current = response.headers.get('x-workflow-run-id');
      if (runId.current) chatStore.saveRun(runId.current);
    },
    // Resume the run by its id, from chunk 0: the reply is rebuilt onto the saved history.
    prepareReconnectToStreamRequest: ({ api }) => ({
      api: runId.current ? `/api/chat/${encodeURIComponent(runId.current)}/stream` : api,
    }),
    onChatEnd: () => {
      runId.current = null;
      chatStore.clearRun();
    },
  }));
  const { id, messages, status, error, sendMessage, resumeStream, addToolApprovalResponse, stop } = useChat({
    id: saved.chat?.id,
    messages: saved.chat?.messages ?? [],
    transport,
    // After Approve / Deny, post the history with the answers: the run continues in the same message.
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    onFinish: ({ messages: finished }) => {
      if (runId.current == null) chatStore.saveChat(id, finished); // only a whole reply is saved
    },
    // A 4xx for the stored run (unknown, expired, another principal's) will not get better by
    // retrying: forget it, keep the history as it was posted.
    onError: (failure) => {
      if (runId.current && /Failed to fetch chat: 4\d\d/.test(String(failure?.message))) {
        runId.current = null;
        chatStore.clearRun();
      }
    },
  });

  // After a reload with a run still streaming: resume it once (not useChat's `resume: true`, which
  // also resumes onto a half-streamed message when the tab becomes visible again).
  const resumed = useRef(false);
  useEffect(() => {
    if (resumed.current || !runId.current) return;
    resumed.current = true;
    resumeStream();
  }, [resumeStream]);

  const [input, setInput] = useState('');
  const busy = status === 'submitted' || status === 'streaming';
  const onSubmit = (event) => {
    event.preventDefault();
    if (!input.trim() || busy) return;
    sendMessage({ text: input });
    setInput('');
  };
  // Stop cancels the run on the server (its stream then ends with `finish`), not just the reading.
  const onStop = async () => {
    if (runId.current) {
      const res = await fetch(`/api/runs/${encodeURIComponent(runId.current)}/cancel`, { method: 'POST' });
      if (res.ok || res.status === 409) return; // cancelled, or it had ended already
    }
    await stop();
  };

  return (
    <>
      <section id="messages" aria-live="polite">
        {messages.map((message) => (
          <Message key={message.id} message={message}
                   onApproval={(approvalId, approved) => addToolApprovalResponse({ id: approvalId, approved })} />
        ))}
      </section>
      <p id="status" className="status" data-status={status}>
        {status === 'error' ? `Error: ${error?.message}` : status}
      </p>
      <form className="composer" onSubmit={onSubmit}>
        <input aria-label="Message" value={input} onChange={(event) => setInput(event.target.value)}
               placeholder="What is the weather in Paris?" />
        {busy
          ? <button type="button" onClick={onStop}>Stop</button>
          : <button type="submit">Send</button>}
      </form>
    </>
  );
}
