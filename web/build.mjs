// Build the chat page and the runs inspector into layers/harness/durable_harness/server/static/:
//   index.html             the chat page (no-cache: it names the current assets)
//   runs.html              the runs inspector, served at /runs (no-cache too)
//   assets/app-<hash>.js   the chat page's bundle (React + @ai-sdk/react + ai + @ai-sdk/workflow + the
//                          page), content-hashed
//   assets/app-<hash>.css
//   assets/runs-<hash>.js  the inspector's bundle (React + ai's readUIMessageStream + the page)
//   assets/runs-<hash>.css
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
  entryPoints: { app: 'src/main.jsx', runs: 'src/runs/main.jsx' },
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
const pick = (name, ext) => {
  const found = outputs.filter((file) => file.endsWith(ext) && path.basename(file).startsWith(`${name}-`));
  if (found.length !== 1) throw new Error(`expected one ${name}-*${ext} output, got ${found.join(', ') || 'none'}`);
  return `./assets/${path.basename(found[0])}`;
};
// One shell for both pages: the inspector's has its own title and bundle.
const shell = readFileSync(path.join(HERE, 'index.html'), 'utf8');
for (const [page, name, title] of [['index.html', 'app', null], ['runs.html', 'runs', 'durable-harness runs']]) {
  let html = shell.replace('%APP_JS%', pick(name, '.js')).replace('%APP_CSS%', pick(name, '.css'));
  if (title) html = html.replace(/<title>[^<]*<\/title>/, `<title>${title}</title>`);
  writeFileSync(path.join(outdir, page), html);
}
// The build output is never committed (also listed in the repository's .gitignore).
writeFileSync(path.join(outdir, '.gitignore'), '*\n');

const kib = (file) => {
  const size = (bytes) => `${(bytes / 1024).toFixed(1)} KiB`;
  return `${size(statSync(file).size)} (gzip ${size(gzipSync(readFileSync(file), { level: 9 }).length)})`;
};
for (const file of [path.join(outdir, 'index.html'), path.join(outdir, 'runs.html'), ...outputs]) {
  console.log(`  ${path.relative(process.cwd(), file)}  ${kib(file)}`);
}
console.log(`web: built in ${Math.round(performance.now() - started)} ms -> ${path.relative(process.cwd(), outdir) || '.'}`);

