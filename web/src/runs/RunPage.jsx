// One run: its status and error, usage, the runs of its chat, its timeline and the message replayed
// from its log. A run that is still going is followed live (the stream route), can be cancelled, and
// a run paused for approval can be answered (which starts the continuation run and opens its page).
import { readUIMessageStream } from 'ai';
import { useCallback, useEffect, useMemo, useRef, useState } from 'react';

import { Message, json } from '../Message.jsx';
import { answerApproval, cancelRun, followRun, getResult, getStatus, listRuns } from './api.js';
import { StatusBadge, listHref } from './RunList.jsx';
import { buildTimeline, formatDuration, formatTime } from './timeline.js';

const ENDED = new Set(['finished', 'failed', 'cancelled']);
const TIMED = new Set(['start-step', 'finish-step', 'tool-input-available', 'tool-output-available',
  'tool-output-error', 'tool-approval-request']);

/** The run's chunks as they arrive (followed from chunk 0), and the message they make. */
function useRunLog(runId, onChunk) {
  const [chunks, setChunks] = useState([]);
  const [message, setMessage] = useState(null);
  const [done, setDone] = useState(false);
  const [error, setError] = useState(null);
  useEffect(() => {
    const abort = new AbortController();
    const all = [];
    let controller;
    const stream = new ReadableStream({ start(c) { controller = c; } });
    (async () => {
      for await (const snapshot of readUIMessageStream({ stream, onError: setError })) setMessage({ ...snapshot });
    })().catch(setError);
    let scheduled = false;
    const calls = new Set();
    followRun(runId, 0, (chunk) => {
      all.push(chunk);
      if (chunk.type === 'tool-input-start' || chunk.type === 'tool-input-available') calls.add(chunk.toolCallId);
      // A continuation's log has the results of calls asked in the paused run's message, which is
      // not this message: they are in the timeline only.
      if (!chunk.toolCallId || calls.has(chunk.toolCallId)) controller.enqueue(chunk);
      onChunk(chunk);
      if (!scheduled) { // one render per frame, however fast the chunks come
        scheduled = true;
        requestAnimationFrame(() => { scheduled = false; setChunks([...all]); });
      }
    }, abort.signal).then(() => {
      controller.close();
      setChunks([...all]);
      setDone(true);
    }, (e) => { if (!abort.signal.aborted) setError(e); });
    return () => abort.abort();
  }, [runId, onChunk]);
  return { chunks, message, done, error };
}

function Usage({ usage }) {
  if (!usage) return null;
  return <span className="usage">{usage.inputTokens ?? 0} in / {usage.outputTokens ?? 0} out tokens</span>;
}

const COST_PARTS = [['lambda', 'Lambda'], ['stepFunctions', 'Step Functions'], ['dynamodb', 'DynamoDB'], ['s3', 'S3'],
  ['logsAndTracing', 'logs, X-Ray, secrets']];

function usd(value) {
  return `$${value.toFixed(value >= 0.01 ? 4 : 6)}`;
}

/** The run's AWS cost estimate (the run API has it only when deployed), with its parts and basis. */
function Cost({ cost }) {
  if (!cost) {
    return <>not estimated<span className="hint"> (the estimate is made only when deployed: the local kit has no AWS bill)</span></>;
  }
  return (
    <>
      <span className="cost__total">{usd(cost.usd)}</span>
      <span className="hint"> estimated at AWS list prices of {cost.priceDate}; model tokens are not priced</span>
      <ul className="cost__parts">
        {COST_PARTS.map(([key, label]) => <li key={key} data-part={key}>{label} {usd(cost.parts?.[key] ?? 0)}</li>)}
      </ul>
      <details className="cost__basis">
        <summary>How it is estimated</summary>
        <ul>{(cost.basis?.notes ?? []).map((note, i) => <li key={i}>{note}</li>)}</ul>
        <pre>{json({ recorded: cost.basis?.recorded, estimated: cost.basis?.estimated })}</pre>
      </details>
    </>
  );
}

function Entry({ entry, start }) {
  const offset = entry.at != null && start != null ? `+${formatDuration(Math.round((entry.at - start) * 1000))}` : '';
  const when = <span className="timeline__at" title={formatTime(entry.at)}>{offset}</span>;
  switch (entry.kind) {
    case 'slice':
      return <li className="timeline__entry timeline__entry--slice" data-kind="slice">{when}<strong>Slice {entry.number}</strong> began at {formatTime(entry.at)}</li>;
    case 'step':
      return (
        <li className="timeline__entry timeline__entry--step" data-kind="step">
          {when}<strong>Model call (step {entry.number})</strong>
          {entry.durationMs != null && <span className="timeline__duration">{formatDuration(entry.durationMs)}</span>}
          {entry.text > 0 && <span className="timeline__note">{entry.text} characters of text</span>}
          {entry.reasoning > 0 && <span className="timeline__note">{entry.reasoning} of reasoning</span>}
          <Usage usage={entry.usage} />
        </li>
      );
    case 'tool':
      return (
        <li className="timeline__entry timeline__entry--tool" data-kind="tool" data-state={entry.state}>
          <details>
            <summary>
              {when}<strong>Tool <code>{entry.toolName}</code></strong>
              <span className="timeline__note">{entry.state}</span>
              {entry.durationMs != null && <span className="timeline__duration">{formatDuration(entry.durationMs)}</span>}
            </summary>
            {entry.input !== undefined && <><div className="tool-card__label">Input</div><pre className="tool-card__code">{json(entry.input)}</pre></>}
            {entry.output !== undefined && <><div className="tool-card__label">Output</div><pre className="tool-card__code">{json(entry.output)}</pre></>}
            {entry.errorText && <><div className="tool-card__label">Error</div><pre className="tool-card__code">{entry.errorText}</pre></>}
          </details>
        </li>
      );
    case 'approval':
      return <li className="timeline__entry" data-kind="approval">{when}<strong>Approval requested</strong> for <code>{entry.toolName}</code></li>;
    case 'denied':
      return <li className="timeline__entry" data-kind="denied"><strong>Denied</strong> by you: <code>{entry.toolName ?? entry.toolCallId}</code> did not run</li>;
    case 'error':
      return <li className="timeline__entry timeline__entry--error" data-kind="error"><strong>Error</strong> {entry.errorText}</li>;
    case 'abort':
      return <li className="timeline__entry" data-kind="abort"><strong>Aborted</strong> {entry.reason ?? ''}</li>;
    case 'finish':
      return <li className="timeline__entry" data-kind="finish"><strong>Finished</strong> ({entry.finishReason ?? 'no reason'})</li>;
    case 'wait':
      return (
        <li className="timeline__entry timeline__entry--wait" data-kind="wait">
          <strong>Waiting</strong> ({entry.status}){entry.pending.length > 0 && `: ${entry.pending.map((p) => p.toolName).join(', ')} needs your approval`}
        </li>
      );
    default:
      return null;
  }
}

function ChatRuns({ chatId, runId, refresh }) {
  const [runs, setRuns] = useState([]);
  useEffect(() => {
    listRuns({ chat: chatId, limit: 100 }).then((page) => setRuns(page.runs.slice().reverse()), () => setRuns([]));
  }, [chatId, refresh]);
  if (runs.length < 2) return null;
  return (
    <nav className="chat-runs" aria-label="Runs of this chat">
      <h3>Runs of this chat <a href={listHref({ chat: chatId })}>(list)</a></h3>
      <ol>
        {runs.map((run) => (
          <li key={run.runId} aria-current={run.runId === runId ? 'page' : undefined}>
            {run.runId === runId ? <code>{run.runId}</code>
              : <a href={`./runs?run=${encodeURIComponent(run.runId)}`}><code>{run.runId}</code></a>}
            {' '}<StatusBadge status={run.status} />
          </li>
        ))}
      </ol>
    </nav>
  );
}

export function RunPage({ runId }) {
  const [status, setStatus] = useState(null);
  const [result, setResult] = useState(null);
  const [error, setError] = useState(null);
  const [refresh, setRefresh] = useState(0);
  const pending = useRef(null);

  const load = useCallback(async () => {
    const now = await getStatus(runId);
    setStatus(now);
    if (ENDED.has(now.status) || now.status.startsWith('awaiting_')) setResult(await getResult(runId).catch(() => null));
  }, [runId]);

  useEffect(() => { load().catch(setError); }, [load, refresh]);

  // While the run streams, its status (slice and chunk times, pending approvals) is read again at
  // most once a second after a timed chunk, and once more at `finish`.
  const onChunk = useCallback((chunk) => {
    if (chunk.type === 'finish') {
      clearTimeout(pending.current);
      pending.current = null;
      setRefresh((n) => n + 1);
    } else if (TIMED.has(chunk.type) && pending.current == null) {
      pending.current = setTimeout(() => { pending.current = null; setRefresh((n) => n + 1); }, 1000);
    }
  }, []);
  useEffect(() => () => clearTimeout(pending.current), []);
  const log = useRunLog(runId, onChunk);

  const timeline = useMemo(() => buildTimeline(log.chunks, status, result), [log.chunks, status, result]);
  const start = status?.sliceTimes?.[0]?.[1] ?? status?.createdAt;
  const live = status != null && !ENDED.has(status.status) && !status.status.startsWith('awaiting_');
  const canCancel = status != null && !ENDED.has(status.status);

  const cancel = () => {
    cancelRun(runId).then(() => setRefresh((n) => n + 1), setError);
  };
  const onApproval = useCallback((approvalId, approved) => {
    answerApproval(runId, approvalId, approved).then(
      (next) => { window.location.assign(`./runs?run=${encodeURIComponent(next.runId)}`); },
      setError,
    );
  }, [runId]);
  const answerable = status?.status === 'awaiting_tool_approval' && !status.continuedBy;

  if (error && !status) return <p className="inspector__error" role="alert">{error.message}</p>;
  if (!status) return <p className="inspector__loading">Loading run {runId}…</p>;
  return (
    <article className="run" data-run-id={runId}>
      <header className="run__header">
        <h2><code>{runId}</code></h2>
        <StatusBadge status={status.status} />
        {live && <span className="run__live" id="live">live</span>}
        {canCancel && <button type="button" className="button button--danger button--small" id="cancel" onClick={cancel}>Cancel run</button>}
      </header>
      {error && <p className="inspector__error" role="alert">{error.message}</p>}
      {status.error && <p className="inspector__error" id="run-error">Error: {status.error}</p>}
      <dl className="run__facts">
        <dt>Created</dt><dd>{formatTime(status.createdAt)}</dd>
        {status.chatId && <><dt>Chat</dt><dd><a href={listHref({ chat: status.chatId })}><code>{status.chatId}</code></a></dd></>}
        {status.agent && <><dt>Agent</dt><dd><code>{status.agent}</code></dd></>}
        <dt>Slices</dt><dd>{status.slices}</dd>
        <dt>Chunks</dt><dd>{Math.max(status.chunkCount ?? 0, log.chunks.length)}</dd>
        {status.finishReason && <><dt>Finish</dt><dd>{status.finishReason}</dd></>}
        <dt>Usage</dt>
        <dd id="usage">
          {status.usage ? <Usage usage={status.usage} /> : 'not yet known'}
          <span className="hint"> (model tokens are not priced: the kit has no model price table)</span>
        </dd>
        <dt>Cost</dt>
        <dd id="cost"><Cost cost={status.cost} /></dd>
        {status.continuedBy && <><dt>Continued by</dt><dd><a href={`./runs?run=${encodeURIComponent(status.continuedBy)}`}><code>{status.continuedBy}</code></a></dd></>}
      </dl>
      {status.chatId && <ChatRuns chatId={status.chatId} runId={runId} refresh={refresh} />}
      <div className="run__columns">
        <section className="run__timeline" aria-labelledby="timeline-title">
          <h3 id="timeline-title">Timeline</h3>
          <ol className="timeline" id="timeline">
            {timeline.map((entry, i) => <Entry key={i} entry={entry} start={start} />)}
          </ol>
          {log.error && <p className="inspector__error">The log could not be read: {String(log.error.message ?? log.error)}</p>}
        </section>
        <section className="run__message" aria-labelledby="message-title">
          <h3 id="message-title">Message (replayed from the log)</h3>
          {log.message
            ? <Message message={log.message} streaming={!log.done} ended={log.done}
                       onApproval={answerable ? onApproval : () => setError(new Error('This run is not waiting for an answer.'))} />
            : <p className="hint">No chunks yet.</p>}
        </section>
      </div>
    </article>
  );
}
