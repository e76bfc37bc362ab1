// One UIMessage as an <article>: text (an assistant's as Markdown, see Markdown.jsx), reasoning
// (subdued), tool calls as cards (with Approve / Deny on a call waiting for approval), files and
// sources. No HTML from the model reaches the DOM.
import { memo, useEffect, useState } from 'react';

import { Markdown } from './Markdown.jsx';

const TOOL_STATES = {
  'input-streaming': 'Preparing input',
  'input-available': 'Running',
  'approval-requested': 'Waiting for approval',
  'approval-responded': 'Answered',
  'output-available': 'Done',
  'output-error': 'Error',
  'output-denied': 'Denied',
};

/** States of a call still under way: in a reply that has ended, such a call was stopped. */
const UNFINISHED = new Set(['input-streaming', 'input-available']);

const AUTHORS = { user: 'You', assistant: 'Assistant' };

export function isToolPart(part) {
  return part.type === 'dynamic-tool' || part.type.startsWith('tool-');
}

export function toolName(part) {
  return part.type === 'dynamic-tool' ? part.toolName : part.type.slice('tool-'.length);
}

/** A value as indented JSON ('' for undefined), or its text when it is not JSON. */
export function json(value) {
  if (value === undefined) return '';
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

function CodeSection({ label, value, className, role }) {
  return (
    <div className={`tool-card__section ${className}`} role={role}>
      <div className="tool-card__label">{label}</div>
      <pre className="tool-card__code">{value}</pre>
    </div>
  );
}

function ApprovalActions({ name, approvalId, onApproval }) {
  // Disabled once answered: the Chat then posts the continuation (sendAutomaticallyWhen).
  const [answered, setAnswered] = useState(false);
  const answer = (approved) => {
    setAnswered(true);
    onApproval(approvalId, approved);
  };
  return (
    <div className="tool-card__actions" role="group" aria-label={`Approve or deny ${name}`}>
      <p className="tool-card__question">Allow {name} to run with this input?</p>
      <button type="button" className="button button--primary" data-action="approve" disabled={answered}
              onClick={() => answer(true)}>Approve</button>
      <button type="button" className="button button--danger" data-action="deny" disabled={answered}
              onClick={() => answer(false)}>Deny</button>
    </div>
  );
}

function ToolCard({ part, ended, onApproval }) {
  const name = toolName(part);
  const stopped = ended && UNFINISHED.has(part.state);
  const label = stopped ? 'Stopped' : TOOL_STATES[part.state] ?? part.state;
  let input = null;
  if (part.input !== undefined) input = json(part.input);
  else if (part.rawInput !== undefined) input = String(part.rawInput);

  let result = null;
  if (part.state === 'output-available') {
    const outputLabel = part.preliminary ? 'Output (preliminary)' : 'Output';
    result = <CodeSection label={outputLabel} value={json(part.output)} className="tool-card__output" />;
  } else if (part.state === 'output-error') {
    const errorText = part.errorText ?? 'The tool failed.';
    result = <CodeSection label="Error" value={errorText} className="tool-card__error" role="note" />;
  } else if (stopped) {
    result = <p className="tool-card__note">The reply was stopped before this call finished.</p>;
  } else if (part.state === 'output-denied') {
    const reason = part.approval?.reason;
    result = <p className="tool-card__note">{reason ? `Denied: ${reason}` : 'You denied this call; it did not run.'}</p>;
  }

  let approval = null;
  if (part.state === 'approval-requested' && part.approval) {
    approval = <ApprovalActions key={part.approval.id} name={name} approvalId={part.approval.id} onApproval={onApproval} />;
  } else if (part.state === 'approval-responded' && part.approval) {
    approval = <p className="tool-card__note">{part.approval.approved ? 'Approved, running…' : 'Denied.'}</p>;
  }

  // One line (name, state, the input's start) until opened: the JSON would fill a phone's screen.
  // A call waiting for approval opens by itself, so that the input it asks about is in view.
  const waiting = part.state === 'approval-requested';
  const [open, setOpen] = useState(waiting);
  useEffect(() => {
    if (waiting) setOpen(true);
  }, [waiting]);

  return (
    <section className="part tool-card" data-part="tool" data-tool={name} data-state={part.state}
             data-stopped={stopped || undefined} aria-label={`Tool call ${name}: ${label}`}>
      <details className="tool-card__details" open={open} onToggle={(e) => setOpen(e.currentTarget.open)}>
        <summary className="tool-card__header">
          <span className="tool-card__icon" aria-hidden="true">⚙</span>
          <code className="tool-card__name">{name}</code>
          {input != null && <span className="tool-card__preview">{oneLine(input)}</span>}
          <span className={`badge badge--${stopped ? 'stopped' : part.state}`} data-testid="tool-state">{label}</span>
        </summary>
        {input != null && <CodeSection label="Input" value={input} className="tool-card__input" />}
        {result}
      </details>
      {approval}
    </section>
  );
}

/** A value's JSON on one line, for a collapsed card (CSS cuts it at the card's width). */
function oneLine(text) {
  return text.replace(/\s*\n\s*/g, ' ');
}

function Source({ part }) {
  if (part.type === 'source-url') {
    return (
      <div className="part part--source" data-part="source">
        Source: <a href={part.url} rel="noopener noreferrer" target="_blank">{part.title ?? part.url}</a>
      </div>
    );
  }
  return <div className="part part--source" data-part="source">Source: {part.title ?? part.filename ?? part.sourceId}</div>;
}

function Part({ part, role, ended, onApproval }) {
  if (part.type === 'text') {
    if (role !== 'assistant') return <div className="part part--text" data-part="text">{part.text}</div>;
    return <div className="part part--text part--markdown" data-part="text"><Markdown text={part.text} /></div>;
  }
  if (part.type === 'reasoning') {
    return (
      <div className="part part--reasoning" data-part="reasoning">
        <span className="part__label">Reasoning</span>
        <p className="reasoning__text">{part.text}</p>
      </div>
    );
  }
  if (isToolPart(part)) return <ToolCard part={part} ended={ended} onApproval={onApproval} />;
  if (part.type === 'file') return <div className="part part--file" data-part="file">📎 {part.filename ?? part.mediaType}</div>;
  if (part.type === 'source-url' || part.type === 'source-document') return <Source part={part} />;
  return null; // step-start, data-*, custom: nothing to show
}

/**
 * A message; memoized, so while a reply streams only the streaming message re-renders (the Chat
 * replaces just that message object on each chunk). `ended`: its reply will get no more chunks
 * (so a call still under way in it was stopped).
 */
export const Message = memo(function Message({ message, streaming, ended, onApproval }) {
  const author = AUTHORS[message.role] ?? 'System';
  const className = `message message--${message.role}${streaming ? ' message--streaming' : ''}`;
  return (
    <article className={className} data-role={message.role} data-message-id={message.id} aria-label={author}>
      <div className="message__author">{author}</div>
      <div className="message__body">
        {(message.parts ?? []).map((part, index) => (
          // Parts only ever grow at the end, so the index is a stable key.
          <Part key={index} part={part} role={message.role} ended={ended} onApproval={onApproval} />
        ))}
      </div>
    </article>
  );
});
