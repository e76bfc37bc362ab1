// The browser talks to this route handler only; it forwards to the durable-harness chat API
// (DURABLE_HARNESS_URL: the local kit or a deployed Function URL) and adds the bearer token
// (DURABLE_HARNESS_TOKEN), which therefore never reaches the browser. Same origin for the
// browser, so no CORS either. Only what the chat needs is forwarded:
//   POST /api/chat                        start a turn (the reply streams back as SSE)
//   GET  /api/chat/<id>/stream            resume a run's stream (?startIndex=N)
//   POST /api/runs/<id>/cancel            Stop
// Anything else is a 404 here: the proxy is not an open door to the rest of the API.
export const dynamic = 'force-dynamic'; // never cached or prerendered
export const runtime = 'nodejs';

const UPSTREAM = (process.env.DURABLE_HARNESS_URL ?? 'http://127.0.0.1:8000').replace(/\/+$/, '');
const TOKEN = process.env.DURABLE_HARNESS_TOKEN ?? '';
const ID = '[A-Za-z0-9_-]{1,200}';
const ROUTES = [
  { method: 'POST', path: /^chat$/ },
  { method: 'GET', path: new RegExp(`^chat/${ID}/stream$`) },
  { method: 'POST', path: new RegExp(`^runs/${ID}/cancel$`) },
];
// Response headers the client reads (the run id, the stream's type); hop-by-hop ones stay behind.
const PASSED = ['content-type', 'x-workflow-run-id', 'x-workflow-stream-tail-index', 'retry-after', 'allow'];

async function forward(request, { params }) {
  const path = (await params).path.join('/');
  if (!ROUTES.some((route) => route.method === request.method && route.path.test(path))) {
    return Response.json({ error: { code: 'not_found', message: `${request.method} /api/${path} is not proxied` } }, { status: 404 });
  }
  const target = `${UPSTREAM}/api/${path}${new URL(request.url).search}`;
  const headers = { accept: request.headers.get('accept') ?? '*/*' };
  if (request.headers.get('content-type')) headers['content-type'] = request.headers.get('content-type');
  if (TOKEN) headers.authorization = `Bearer ${TOKEN}`;
  let upstream;
  try {
    upstream = await fetch(target, {
      method: request.method,
      headers,
      body: request.method === 'POST' ? await request.text() : undefined,
      signal: request.signal, // the browser went away: stop reading (the run itself goes on, durably)
      cache: 'no-store',
    });
  } catch (error) {
    if (request.signal.aborted) return new Response(null, { status: 499 });
    return Response.json({ error: { code: 'upstream_unreachable', message: `cannot reach ${UPSTREAM}: ${error.cause?.code ?? error.message}` } }, { status: 502 });
  }
  const out = new Headers();
  for (const name of PASSED) {
    const value = upstream.headers.get(name);
    if (value != null) out.set(name, value);
  }
  // The SSE body is passed through as it arrives: `no-transform` keeps `next start`'s gzip (and
  // any proxy in front) from buffering it, `x-accel-buffering: no` does the same for nginx.
  out.set('cache-control', 'no-cache, no-transform');
  out.set('x-accel-buffering', 'no');
  return new Response(upstream.body, { status: upstream.status, headers: out });
}

export { forward as GET, forward as POST };
