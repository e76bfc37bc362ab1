// The example's only Next.js settings. `turbopack.root` / `outputFileTracingRoot`: this folder is
// the app's root (the repository around it has lock files of its own, which Next would otherwise
// take for a workspace root and warn about).
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));

/** @type {import('next').NextConfig} */
const config = {
  poweredByHeader: false,
  turbopack: { root: HERE },
  outputFileTracingRoot: HERE,
};

export default config;
