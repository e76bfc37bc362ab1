// Build the chat page into layers/harness/durable_harness/server/static/:
//   index.html            (no-cache: it names the current assets)
//   assets/app-<hash>.js  the bundled client (React + @ai-sdk/react + ai + @ai-sdk/workflow + the
//                         page), content-hashed
//   assets/app-<hash>.css
// Usage: node build.mjs [--outdir DIR] [--sourcemap]
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { gzipSync } from 'node:zlib';

import * as esbuild from 'esbuild';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const DEFAULT_OUT = path.resolve(HERE, '..', 'layers', 'harness', 'durable_harness', 'server', 'static');
const { values } = parseArgs({
  options: { outdir: { type: 'string', default: DEFAULT_OUT }, sourcemap: { type: 'boolean', default: false } },
});
const outdir = path.resolve(values.outdir);
const started = performance.now();

// Only ever remove the output folder itself, and only if it looks like ours.
if (existsSync(outdir)) {
  const ours = existsSync(path.join(outdir, 'index.html')) || existsSync(path.join(outdir, 'assets'));
  if (!ours && readdirSync(outdir).length > 0) {
    throw new Error(`refusing to clear ${outdir}: it does not look like a previous build`);
  }
  rmSync(outdir, { recursive: true, force: true });
}
mkdirSync(path.join(outdir, 'assets'), { recursive: true });

const result = await esbuild.build({
  absWorkingDir: HERE,
  entryPoints: { app: 'src/main.jsx' },
  bundle: true,
  jsx: 'automatic', // React 17+ runtime: no `import React` in every .jsx file
  format: 'esm',
  platform: 'browser',
  target: ['es2022', 'chrome110', 'firefox115', 'safari16'],
  minify: true,
  sourcemap: values.sourcemap ? 'linked' : false,
  legalComments: 'linked',
  outdir: path.join(outdir, 'assets'),
  entryNames: '[name]-[hash]',
  assetNames: '[name]-[hash]',
  define: { 'process.env.NODE_ENV': '"production"' },
  metafile: true,
  logLevel: 'warning',
});

const outputs = Object.keys(result.metafile.outputs).map((file) => path.resolve(HERE, file));
const pick = (ext) => {
  const found = outputs.filter((file) => file.endsWith(ext) && path.basename(file).startsWith('app-'));
  if (found.length !== 1) throw new Error(`expected one app-*${ext} output, got ${found.join(', ') || 'none'}`);
  return `./assets/${path.basename(found[0])}`;
};
const html = readFileSync(path.join(HERE, 'index.html'), 'utf8')
  .replace('%APP_JS%', pick('.js'))
  .replace('%APP_CSS%', pick('.css'));
writeFileSync(path.join(outdir, 'index.html'), html);
// The build output is never committed (also listed in the repository's .gitignore).
writeFileSync(path.join(outdir, '.gitignore'), '*\n');

const kib = (file) => {
  const size = (bytes) => `${(bytes / 1024).toFixed(1)} KiB`;
  return `${size(statSync(file).size)} (gzip ${size(gzipSync(readFileSync(file), { level: 9 }).length)})`;
};
for (const file of [path.join(outdir, 'index.html'), ...outputs]) {
  console.log(`  ${path.relative(process.cwd(), file)}  ${kib(file)}`);
}
console.log(`web: built in ${Math.round(performance.now() - started)} ms -> ${path.relative(process.cwd(), outdir) || '.'}`);

