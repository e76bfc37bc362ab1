// The caller's runs, newest first, a page at a time (GET /api/runs), filtered by status or chat.
import { useEffect, useState } from 'react';

import { listRuns } from './api.js';
import { formatTime } from './timeline.js';

const FILTERS = [
  ['', 'All'],
  ['running', 'Running'],
  ['waiting', 'Waiting'],
  ['finished', 'Finished'],
  ['failed', 'Failed'],
  ['cancelled', 'Cancelled'],
];
const PAGE = 20;

/** `?status=…&chat=…` for links and the address bar (empty values left out). */
export function listHref({ status, chat }) {
  const query = new URLSearchParams();
  if (status) query.set('status', status);
  if (chat) query.set('chat', chat);
  const text = query.toString();
  return text ? `./runs?${text}` : './runs';
}

export function StatusBadge({ status }) {
  return <span className={`run-status run-status--${status}`} data-testid="run-status">{status}</span>;
}

export function RunList({ status: initialStatus, chat }) {
  const [status, setStatus] = useState(initialStatus);
  const [cursors, setCursors] = useState([null]); // the cursor of each page seen; the last is shown
  const [page, setPage] = useState(null);
  const [error, setError] = useState(null);
  const cursor = cursors.at(-1);

  useEffect(() => {
    let live = true;
    setError(null);
    listRuns({ status, chat, limit: PAGE, cursor }).then((data) => { if (live) setPage(data); }, (e) => { if (live) setError(e); });
    return () => { live = false; };
  }, [status, chat, cursor]);

  const filter = (value) => {
    setStatus(value);
    setCursors([null]);
    window.history.replaceState(null, '', listHref({ status: value, chat }));
  };

  return (
    <section className="run-list" aria-labelledby="runs-title">
      <div className="run-list__bar">
        <h2 id="runs-title">{chat ? <>Runs of chat <code>{chat}</code></> : 'Your runs'}</h2>
        {chat && <a href={listHref({ status })} className="button button--ghost button--small">All chats</a>}
        <label className="run-list__filter">
          Status{' '}
          <select id="status-filter" value={status} onChange={(e) => filter(e.target.value)}>
            {FILTERS.map(([value, label]) => <option key={value} value={value}>{label}</option>)}
          </select>
        </label>
      </div>
      {error && <p className="inspector__error" role="alert">{error.message}</p>}
      {page && page.runs.length === 0 && <p className="empty" id="no-runs">No runs{status ? ` with status ${status}` : ''}.</p>}
      {page && page.runs.length > 0 && (
        <ul className="runs" id="runs">
          {page.runs.map((run) => (
            <li key={run.runId} className="runs__item" data-run-id={run.runId}>
              <a className="runs__link" href={`./runs?run=${encodeURIComponent(run.runId)}`}>
                <code className="runs__id">{run.runId}</code>
              </a>
              <StatusBadge status={run.status} />
              <time className="runs__time" dateTime={run.createdAt}>{formatTime(run.createdAt)}</time>
              {run.chatId && (
                <a className="runs__chat" href={listHref({ chat: run.chatId })} title="This chat's runs">
                  chat <code>{run.chatId}</code>
                </a>
              )}
            </li>
          ))}
        </ul>
      )}
      <nav className="pager" aria-label="Pages">
        <button type="button" className="button button--small" disabled={cursors.length < 2}
                onClick={() => setCursors(cursors.slice(0, -1))}>Newer</button>
        <button type="button" className="button button--small" id="older" disabled={!page?.nextCursor}
                onClick={() => setCursors([...cursors, page.nextCursor])}>Older</button>
      </nav>
    </section>
  );
}
