// The runs inspector's entry (/runs): the caller's runs, or one run's page (/runs?run=<runId>).
import '../zod-jitless.js'; // first: before any module that uses zod is evaluated
import '../styles.css';
import './runs.css';

import { createRoot } from 'react-dom/client';

import { Settings } from '../Settings.jsx';
import { RunList } from './RunList.jsx';
import { RunPage } from './RunPage.jsx';

function RunsApp() {
  const params = new URLSearchParams(window.location.search);
  const runId = params.get('run');
  return (
    <>
      <header className="topbar">
        <div className="brand">
          <h1><a className="brand__link" href="./runs">Runs</a></h1>
          <p className="tagline">What your runs did: their steps, tool calls, approvals and waits.</p>
        </div>
        <nav className="topbar__actions" aria-label="Pages">
          <a className="button button--ghost" href="./">Chat</a>
          <Settings />
        </nav>
      </header>
      <main className="inspector">
        {runId ? <RunPage runId={runId} /> : <RunList status={params.get('status') ?? ''} chat={params.get('chat') ?? ''} />}
      </main>
    </>
  );
}

createRoot(document.getElementById('app')).render(<RunsApp />);
