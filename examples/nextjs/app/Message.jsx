'use client';
// One UIMessage: text, reasoning, and each tool call as a card with its input, its output or
// error, and Approve / Deny while it waits for approval. Everything is rendered as text.
const STATES = {
  'input-streaming': 'preparing input',
  'input-available': 'running',
  'approval-requested': 'waiting for approval',
  'approval-responded': 'answered',
  'output-available': 'done',
  'output-error': 'error',
  'output-denied': 'denied',
};

const isTool = (part) => part.type === 'dynamic-tool' || part.type.startsWith('tool-');
const toolName = (part) => (part.type === 'dynamic-tool' ? part.toolName : part.type.slice('tool-'.length));
const json = (value) => (value === undefined ? '' : JSON.stringify(value, null, 2));

function ToolCard({ part, onApproval }) {
  const name = toolName(part);
  return (
    <details className="tool" data-part="tool" data-tool={name} data-state={part.state}
             open={part.state === 'approval-requested'}>
      <summary>⚙ <code>{name}</code> <span className="badge">{STATES[part.state] ?? part.state}</span></summary>
      {part.input !== undefined && <pre data-field="input">{json(part.input)}</pre>}
      {part.state === 'output-available' && <pre data-field="output">{json(part.output)}</pre>}
      {part.state === 'output-error' && <pre data-field="error">{part.errorText}</pre>}
      {part.state === 'output-denied' && <p>Denied{part.approval?.reason ? `: ${part.approval.reason}` : ''}.</p>}
      {part.state === 'approval-requested' && part.approval && (
        <p>
          Allow {name} to run with this input?{' '}
          <button type="button" onClick={() => onApproval(part.approval.id, true)}>Approve</button>{' '}
          <button type="button" onClick={() => onApproval(part.approval.id, false)}>Deny</button>
        </p>
      )}
    </details>
  );
}

export function Message({ message, onApproval }) {
  return (
    <article className={`message ${message.role}`} data-role={message.role} data-message-id={message.id}>
      {message.parts.map((part, index) => {
        if (part.type === 'text') return <p key={index} data-part="text">{part.text}</p>;
        if (part.type === 'reasoning') return <p key={index} className="reasoning" data-part="reasoning">{part.text}</p>;
        if (isTool(part)) return <ToolCard key={index} part={part} onApproval={onApproval} />;
        return null; // step-start, data-*, sources, files: not shown in this example
      })}
    </article>
  );
}
