// Imported first (see main.jsx), before the AI SDK's modules run. The AI SDK validates with zod;
// without `jitless`, zod probes `new Function` once (already while those modules load), and the
// server's CSP (no 'unsafe-eval') refuses it: the browser reports a violation even though zod
// catches the error and falls back to the same interpreted mode this setting selects.
import { config } from 'zod/v4/core';

config({ jitless: true });
