// Settings in the top bar (the chat page's and the runs inspector's): the optional API token, kept in
// localStorage and sent as `Authorization: Bearer` by both pages.
import { useRef, useState } from 'react';

import { storage } from './storage.js';

export function Settings() {
  const [token, setToken] = useState(() => storage.loadToken());
  const details = useRef(null);
  return (
    <details className="settings" ref={details}>
      <summary>Settings</summary>
      <form className="settings__panel" onSubmit={(event) => {
        event.preventDefault(); // Enter in the token field: the token is already saved
        details.current.open = false;
      }}>
        <label htmlFor="token">API token</label>
        <input id="token" name="token" type="password" autoComplete="off" autoCapitalize="off" spellCheck="false"
               placeholder="only needed with AUTH_MODE=token" aria-describedby="token-hint" value={token}
               onChange={(event) => {
                 setToken(event.target.value);
                 storage.saveToken(event.target.value.trim());
               }} />
        <p id="token-hint" className="hint">Sent as <code>Authorization: Bearer …</code> and kept in this browser's local storage.</p>
      </form>
    </details>
  );
}
