"""An HTTP model's first chunk through the kit, and many runs on one local server (issue 20).

The model is the paced OpenAI-compatible server (``_paced_model.py``) in its own process; every
text delta carries the ``time.monotonic()`` of its emission, which every process of the machine
shares, so the receiver computes ``receive - emit`` itself.

1. **Added time to first chunk, local**: a turn POSTed to the local kit (``build_local_kit``,
   served by uvicorn on loopback) against the same model request sent straight to the model
   server (the floor: one HTTP hop, no durability), interleaved A/B/B/A. Stage by stage: request
   sent -> the model server receives its request (what the kit does before calling the model)
   -> the first delta's emission (the model) -> the client receives it (the relay).
2. **The same, deployed wiring under moto**: the template deployed into moto and the real chat
   function (``_deployed.Metered``, the first slice run in the chat function), the agent on the
   paced HTTP model (``AGENT=_paced_model:build_agent``); the storage requests sent between the
   POST and the model's request are counted (their kinds listed).
3. **Concurrent runs**: ``--runs`` runs at once at ``--rate`` deltas/s on one local kit server in
   its own process (this process only reads); per-chunk added latency p50/p99 (receive - emit).
4. **Relay throughput**: ``--relay-runs`` runs of ``--relay-deltas`` deltas with no pacing, through
   the kit server and straight from the model server (the bare SSE path); chunks/s at the clients.

    .venv/bin/python bench/first_chunk.py [--turns 20] [--deployed-turns 8] [--runs 100] [--rate 100] [--baseline REV]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import io
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from _breakdown import (
    LOCAL_LABELS,
    LOCAL_STAGES,
    counts_of,
    deployed_breakdown,
    deployed_why,
    label_callers,
    local_why,
    probe_kit,
)
from _common import deployed_server, machine, median, pct, serve, table
from _paced_model import MODEL_ENV, URL_ENV, build_agent, emitted, model_name, model_requests, paced_server
from _server_cpu import Sampler, breakdown, cpu_summary, cpu_table, instrument, print_profile, profiled, sample
from _stages import StageProbe
from _targets import (
    CONCURRENT_P99_MS,
    CONCURRENT_RATE,
    CONCURRENT_RUNS,
    HTTP_TTFC_DEPLOYED_MS,
    HTTP_TTFC_LOCAL_MS,
    HTTP_TTFC_ROUND_TRIPS,
    RELAY_CHUNKS_PER_S,
    report,
)
from durable_harness.protocol.sse import SSEParser

STAGES = ("before the model request", "model: request -> first delta", "relay: emitted -> received")


def chat_body(text: str = "Go.") -> str:
    """The AI SDK client's POST body of a one-message turn of a new chat (a fresh message id: the
    kit answers a repeated one with the run it already has)."""
    message = {"id": f"u{time.monotonic_ns()}", "role": "user", "parts": [{"type": "text", "text": text}]}
    return json.dumps({"messages": [message]})


def kit_turn(client: httpx.Client, url: str, probe: StageProbe | None = None) -> tuple[float, float]:
    """POST a turn to a kit; (monotonic time sent, monotonic time its first text delta came, emission).
    ``probe`` (a kit in this process) hears when the turn was sent and its first delta came."""
    parser = SSEParser()
    sent = time.monotonic()
    if probe is not None:
        probe.begin(sent)
    first: tuple[float, float] | None = None
    with client.stream("POST", f"{url}/api/chat", content=chat_body(), timeout=60) as response:
        for raw in response.iter_raw():
            now = time.monotonic()
            for data in parser.feed(raw):
                if first is None and data != "[DONE]" and '"text-delta"' in data:
                    first = (now, emitted(json.loads(data)["delta"])[0])
                    if probe is not None:
                        probe.end(*first)
    assert first is not None, "no text delta"
    return sent, *first  # type: ignore[return-value]


def direct_turn(client: httpx.Client, base: str, model: str) -> tuple[float, float, float]:
    """The same model request sent straight to the model server; (sent, first delta received, emitted)."""
    body = {"model": model, "messages": [{"role": "user", "content": "Go."}], "stream": True}
    parser = SSEParser()
    sent = time.monotonic()
    first: tuple[float, float] | None = None
    with client.stream("POST", f"{base}/chat/completions", json=body, timeout=60) as response:
        for raw in response.iter_raw():
            now = time.monotonic()
            for data in parser.feed(raw):
                if first is None and "@" in data:
                    first = (now, emitted(data)[0])
    assert first is not None, "no text delta"
    return sent, *first


def ttfc(
    paths: dict[str, Any], base: str, turns: int, meter: Any = None, probe: StageProbe | None = None
) -> dict[str, Any]:
    """Turns of each path, A/B/B/A; per path the TTFC and the stages in ms (and the storage requests
    sent before the model request, with ``meter``); ``_turns``: the kit path's times and requests
    per turn; ``probe`` (the kit's) gets each turn's model request time as its ``model request`` stage."""
    out: dict[str, Any] = {p: {"ttfc": [], **{s: [] for s in STAGES}} for p in paths}
    kit_turns: list[dict[str, Any]] = []
    names = list(paths)
    for n in range(turns + 1):  # the first turn of each path warms up
        for name in names if n % 2 == 0 else names[::-1]:
            model_requests(base, reset=True)
            if meter is not None:
                meter.reset()
            sent, received, emit = paths[name]()
            arrived = model_requests(base)[0]["at"]
            if probe is not None and name == "kit":
                if n:
                    probe.turns[-1]["model request"] = arrived
                else:
                    probe.turns.pop()  # the warm-up's
            if not n:
                continue
            row = out[name]
            row["ttfc"].append((received - sent) * 1000)
            for stage, value in zip(STAGES, (arrived - sent, emit - arrived, received - emit), strict=True):
                row[stage].append(value * 1000)
            if name == "kit":
                requests = list(meter.requests) if meter is not None else []
                kit_turns.append({"sent": sent, "arrived": arrived, "emit": emit, "received": received,
                                  "requests": requests})  # fmt: skip
        if n == 0:
            gc.collect()
            gc.freeze()  # as deployed_wiring.py: keep moto's state out of the collections
    out["_turns"] = kit_turns
    before = counts_of(kit_turns) if meter is not None else []
    out["_before"] = {"counts": [float(sum(c.values())) for c in before]}
    out["_before_ops"] = {op: [float(c[op]) for c in before] for op in set().union(*before)} if before else {}
    return out


def local_ttfc(base: str, turns: int) -> dict[str, Any]:
    """The local kit against the direct request."""
    from durable_harness.server.local import build_local_kit

    name = model_name(deltas=5, rate=100)
    os.environ[URL_ENV], os.environ[MODEL_ENV] = base, name
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        kit = build_local_kit(build_agent(), tmp, static_dir=None)
        probe = StageProbe()
        url = stack.enter_context(serve(probe_kit(probe, kit)))
        kc, dc = stack.enter_context(httpx.Client()), stack.enter_context(httpx.Client())
        paths = {"kit": lambda: kit_turn(kc, url, probe), "direct": lambda: direct_turn(dc, base, name)}
        return ttfc(paths, base, turns, probe=probe) | {"_probe": probe}


def baseline_ttfc(base: str, turns: int, rev: str) -> dict[str, Any]:
    """``--baseline``: this tree's kit and ``rev``'s side by side, each a ``--serve-kit`` process
    (the same server, agent and model), against the direct request, interleaved turn by turn."""
    from deployed_wiring import baseline_tree

    name = model_name(deltas=5, rate=100)
    scripts = ("first_chunk.py", "_paced_model.py", "_common.py", "_targets.py", "_stages.py", "_breakdown.py",
               "_server_cpu.py")  # fmt: skip
    with baseline_tree(rev, scripts) as tree, contextlib.ExitStack() as stack:
        new = stack.enter_context(kit_server(base, name))
        old = stack.enter_context(kit_server(base, name, tree))
        nc, oc, dc = (stack.enter_context(httpx.Client()) for _ in range(3))
        paths = {"kit": lambda: kit_turn(nc, new), "baseline": lambda: kit_turn(oc, old),
                 "direct": lambda: direct_turn(dc, base, name)}  # fmt: skip
        return ttfc(paths, base, turns)


def deployed_ttfc(base: str, turns: int) -> dict[str, Any]:
    """The deployed chat function under moto against the direct request."""
    from _deployed import Metered

    from tests.deploy.serve_stack import _aws_environment

    _aws_environment()
    logging.getLogger("moto.stepfunctions").setLevel(logging.CRITICAL)
    name = model_name(deltas=5, rate=100)
    os.environ[URL_ENV], os.environ[MODEL_ENV] = base, name
    overrides = {"Agent": "_paced_model:build_agent", "ModelId": "demo", "AuthMode": "none"}
    with contextlib.redirect_stdout(io.StringIO()), Metered(overrides) as metered, contextlib.ExitStack() as stack:
        for fn in metered.stack.functions.values():
            fn.env.update({URL_ENV: base, MODEL_ENV: name})
        label_callers(metered.meter)  # each request says which library functions sent it
        url = stack.enter_context(serve(metered.chat_app(), server=deployed_server()))
        kc, dc = stack.enter_context(httpx.Client()), stack.enter_context(httpx.Client())
        paths = {"kit": lambda: kit_turn(kc, url), "direct": lambda: direct_turn(dc, base, name)}
        return ttfc(paths, base, turns, metered.meter)


# --- many runs on one local server ---------------------------------------------------------------------


CPU_ENV, PROFILE_ENV = "FIRST_CHUNK_CPU", "FIRST_CHUNK_PROFILE"


@contextlib.contextmanager
def kit_server(
    base: str, name: str, tree: Path | None = None, *, cpu: bool = False, profile: str | None = None
) -> Iterator[str]:
    """The local kit on the paced model in its own process (``--serve-kit``), this tree's or
    ``tree``'s (a baseline: its library, this script); yields its URL. ``cpu``: it answers
    ``_server_cpu.PATH`` with its CPU by thread and stage; ``profile``: it runs under cProfile,
    its stats written to that file when it stops."""
    env = os.environ | {URL_ENV: base, MODEL_ENV: name, CPU_ENV: "1" if cpu else "", PROFILE_ENV: profile or ""}
    script = Path(__file__).resolve()
    if tree is not None:
        env["PYTHONPATH"] = f"{tree / 'layers' / 'harness'}:{tree}"
        script = tree / "bench" / script.name
    proc = subprocess.Popen([sys.executable, str(script), "--serve-kit"], stdout=subprocess.PIPE, text=True,
                            env=env, cwd=script.parents[1])  # fmt: skip
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http://"):
            raise RuntimeError(f"the kit server did not start (said {url!r})")
        deadline = time.monotonic() + 60
        while True:  # ready when it accepts a connection
            try:
                socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class _QuietExit(uvicorn.Server):
    """uvicorn's server, returning after SIGTERM instead of raising it again (so that a profile is written)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Stop on SIGTERM or SIGINT, and return."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self.handle_exit)
        yield


def serve_kit() -> None:
    """``--serve-kit``: the local kit (uvicorn, one process) over a temporary data folder."""
    from durable_harness.server.local import build_local_kit

    with tempfile.TemporaryDirectory() as tmp:
        kit = build_local_kit(build_agent(), tmp, static_dir=None)
        app = instrument(kit.app, Sampler()) if os.environ.get(CPU_ENV) else kit.app
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.bind(("127.0.0.1", 0))
        print(f"http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
        profile = os.environ.get(PROFILE_ENV)
        with profiled(profile):
            (_QuietExit if profile else uvicorn.Server)(config).run(sockets=[sock])


async def many(url: str | None, base: str, name: str, runs: int, timeout: float) -> tuple[list[float], int, float]:
    """``runs`` turns at once through the kit at ``url`` (None: straight from the model server);
    (per-chunk added ms, text deltas received, seconds from the first request to the last delta)."""
    added: list[float] = []
    limits = httpx.Limits(max_connections=runs + 10, max_keepalive_connections=runs + 10)
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:

        async def one() -> None:
            parser = SSEParser()
            if url is None:
                body = {"model": name, "messages": [{"role": "user", "content": "Go."}], "stream": True}
                request = client.stream("POST", f"{base}/chat/completions", json=body)
            else:
                request = client.stream("POST", f"{url}/api/chat", content=chat_body())
            async with request as response:
                async for raw in response.aiter_raw():
                    now = time.monotonic()
                    for data in parser.feed(raw):
                        added.extend((now - t) * 1000 for t in emitted(data))

        began = time.monotonic()
        await asyncio.wait_for(asyncio.gather(*(one() for _ in range(runs))), timeout)
        return added, len(added), time.monotonic() - began


def concurrent(
    base: str, runs: int, rate: float, deltas: int, relay_runs: int, relay_deltas: int, profile: str | None = None
) -> dict[str, Any]:
    """Per-chunk latency of ``runs`` paced runs on one kit server, and the relay's chunks/s; with
    each, where the server spent its CPU (``_server_cpu.breakdown``). ``profile``: the paced runs'
    server runs under cProfile, its stats written to that file."""
    out: dict[str, Any] = {}
    paced = model_name(deltas=deltas, rate=rate)
    fast = model_name(deltas=relay_deltas, rate=0)
    with kit_server(base, paced, cpu=True, profile=profile) as url:
        asyncio.run(many(url, base, paced, 2, 60))  # warm-up
        before = sample(url)
        added, n, seconds = asyncio.run(many(url, base, paced, runs, 120))
        out["paced_cpu"] = breakdown(before, sample(url), n, seconds)
        out["paced"] = {"p50": pct(added, 0.5), "p99": pct(added, 0.99), "max": max(added), "n": n, "s": seconds}
    if profile:
        print_profile(profile)
    added, n, seconds = asyncio.run(many(None, base, paced, runs, 120))  # the same load, straight from the model
    out["paced_direct"] = {"p50": pct(added, 0.5), "p99": pct(added, 0.99), "max": max(added), "n": n, "s": seconds}
    with kit_server(base, fast, cpu=True) as url:
        asyncio.run(many(url, base, fast, 1, 60))
        before = sample(url)
        _, n, seconds = asyncio.run(many(url, base, fast, relay_runs, 120))
        out["relay_cpu"] = breakdown(before, sample(url), n, seconds)
        out["relay_kit"] = n / seconds
    _, n, seconds = asyncio.run(many(None, base, fast, relay_runs, 120))
    out["relay_direct"] = n / seconds
    return out


def stage_table(result: dict[str, Any]) -> str:
    """TTFC and its stages, p50 per path."""
    rows = []
    for path in [p for p in ("kit", "baseline", "direct") if p in result]:
        r = result[path]
        rows.append([path, median(r["ttfc"]), *(median(r[s]) for s in STAGES)])
    return table(["path", "TTFC p50 ms", *(f"{s} ms" for s in STAGES)], rows)


def main() -> None:
    """Measure, print, report."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=20, help="local TTFC turns per path")
    parser.add_argument("--deployed-turns", type=int, default=8, help="deployed TTFC turns per path (0: skip)")
    parser.add_argument("--runs", type=int, default=100, help="concurrent runs (0: skip)")
    parser.add_argument("--rate", type=float, default=100.0, help="deltas/s of each concurrent run")
    parser.add_argument("--deltas", type=int, default=200, help="deltas of each concurrent run")
    parser.add_argument("--relay-runs", type=int, default=10)
    parser.add_argument("--relay-deltas", type=int, default=3000)
    parser.add_argument(
        "--baseline",
        default="none",
        metavar="REV",
        help="local TTFC: this tree's kit and REV's (git archive), each in its own server process, "
        "interleaved turn by turn with the direct request (default none: the kit in this process)",
    )
    parser.add_argument(
        "--profile",
        metavar="FILE",
        help="run the concurrent runs' kit server under cProfile, its "
        "stats written to FILE and their top printed (a separate run: it slows the server)",
    )
    parser.add_argument("--serve-kit", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_kit:
        serve_kit()
        return
    print(f"first_chunk: {machine()}")
    with paced_server() as base:
        local = (
            local_ttfc(base, args.turns) if args.baseline == "none" else baseline_ttfc(base, args.turns, args.baseline)
        )
        deployed = deployed_ttfc(base, args.deployed_turns) if args.deployed_turns else None
        many_runs = (
            concurrent(base, args.runs, args.rate, args.deltas, args.relay_runs, args.relay_deltas, args.profile)
            if args.runs
            else None
        )
    report_local(local, args)
    if deployed is not None:
        report_deployed(deployed, args)
    if many_runs is not None:
        report_concurrent(many_runs, args)


# One sentence each of what in the library makes the time (read in its code), and what would have to change.
CAUSE_LOCAL = ("Cause: the POST makes two worker-thread trips in a row before the harness builds its request "
               "(ChatService.start_turn: Runner.create_run + LocalOrchestrator.take_lease; then Runner._begin_slice: "
               "store.load, store.claim, FileChunkLog.open, the `start` append), and the first delta waits for its "
               "own trip (ChunkWriter -> FileChunkLog.append); <= 3 ms needs the run created, claimed and opened in "
               "one trip with the model request sent beside it.")  # fmt: skip
CAUSE_DEPLOYED = ("Cause: the slice reads back and claims the run the POST just created (Runner._begin_slice: "
                  "store.load's Query, store.claim's UpdateItem, log.open's PutItem) after ChatService.start_turn's "
                  "TransactWriteItems, each a round trip before the model request; <= 25 ms and <= 2 round trips need "
                  "the chat function creating the run already claimed, its log opened, in that one transaction (the "
                  "first delta no longer waits out STREAM_FLUSH_SECONDS: the deployed writer has a burst of 2, "
                  "aws/runtime.py function_parts).")  # fmt: skip
CAUSE_CONCURRENT = ("Cause: every run's model client (httpx), harness, group commit and SSE response (uvicorn's h11) "
                    "run on the server process's one event loop thread (LocalOrchestrator drives runs as asyncio "
                    "tasks; its worker threads share the GIL), so the process gets about one core at most, and a "
                    "chunk costing more CPU than the budget above queues; meeting it needs the loop's CPU per chunk "
                    "under that budget (fewer socket reads, selector calls and writes per chunk) or the runs spread "
                    "over several processes.")  # fmt: skip


def report_local(local: dict[str, Any], args: argparse.Namespace) -> None:
    """Print the local TTFC tables and report ``http.ttfc.local``."""
    where = "" if args.baseline == "none" else f" (kit and baseline {args.baseline} each a server process)"
    print(f"\nlocal kit{where}, {args.turns} turns per path (5 deltas at 100/s), A/B/B/A, p50:\n" + stage_table(local))
    why = ""
    if "_probe" in local:
        rows = local["_probe"].table_rows(median, LOCAL_STAGES, LOCAL_LABELS)
        print("\nthe kit's turns stage by stage (_stages.py; p50 ms since the POST was sent, and since the stage "
              "before):\n" + table(["stage", "at", "step"], rows))  # fmt: skip
        why = local_why(local, rows, LOCAL_STAGES) + ". " + CAUSE_LOCAL
    added = median(local["kit"]["ttfc"]) - median(local["direct"]["ttfc"])
    before = median(local["kit"][STAGES[0]]) - median(local["direct"][STAGES[0]])
    versus = ""
    if "baseline" in local:
        old_added = median(local["baseline"]["ttfc"]) - median(local["direct"]["ttfc"])
        old_before = median(local["baseline"][STAGES[0]]) - median(local["direct"][STAGES[0]])
        versus = f"; baseline {args.baseline}: +{old_added:.1f} ms, {old_before:+.1f} ms before the model request"
    if not why:  # the kits in server processes: no probe, the three stages only
        k, d = ({st: median(local[path][st]) for st in STAGES} for path in ("kit", "direct"))
        why = "; ".join(f"{st} kit {k[st]:.1f}, direct {d[st]:.1f} ms" for st in STAGES) + ". " + CAUSE_LOCAL
    report("http.ttfc.local", f"+{added:.1f} ms p50 ({before:+.1f} ms of it before the model request; kit "
           f"{median(local['kit']['ttfc']):.1f}, direct {median(local['direct']['ttfc']):.1f} ms{versus})",
           added <= HTTP_TTFC_LOCAL_MS, why=why)  # fmt: skip


def report_deployed(deployed: dict[str, Any], args: argparse.Namespace) -> None:
    """Print the deployed TTFC tables and report ``http.ttfc.deployed``."""
    print(f"\ndeployed wiring under moto, {args.deployed_turns} turns per path, p50:\n" + stage_table(deployed))
    trips = median(deployed["_before"]["counts"])
    ops = ", ".join(f"{op} {median(v):g}" for op, v in sorted(deployed["_before_ops"].items()) if median(v))
    print(f"storage requests before the model request (p50): {trips:g} ({ops})")
    b = deployed_breakdown(deployed)
    headers = ["request (sent by)", "per turn", "turns", "ms p50"]
    print("\nthe storage requests before the model request, by the library functions that sent them (purpose: "
          f"request), in the order of their first sending; {b['outside']:.1f} ms p50 of the time before the model "
          "request is outside them:\n" + table(headers, b["rows"]))  # fmt: skip
    if b["wait"] is not None:
        print(f"the relay: the first delta waited {b['wait']:.1f} ms p50 for its flush (its PutItem sent), which "
              f"took {b['put']:.1f} ms; then {b['rest']:.1f} ms to the client")  # fmt: skip
    added = median(deployed["kit"]["ttfc"]) - median(deployed["direct"]["ttfc"])
    before = median(deployed["kit"][STAGES[0]]) - median(deployed["direct"][STAGES[0]])
    report("http.ttfc.deployed", f"+{added:.1f} ms p50, {trips:g} storage round trips before the model request "
           f"({ops}; {before:+.1f} ms before it)",
           added <= HTTP_TTFC_DEPLOYED_MS and trips <= HTTP_TTFC_ROUND_TRIPS,
           why=deployed_why(deployed, b) + ". " + CAUSE_DEPLOYED)  # fmt: skip


def report_concurrent(many_runs: dict[str, Any], args: argparse.Namespace) -> None:
    """Print the concurrent runs' figures and CPU tables, and report ``concurrent.*``."""
    p = many_runs["paced"]
    print(f"\n{args.runs} concurrent runs, {args.deltas} deltas at {args.rate:g}/s each, one local kit server "
          f"process: {p['n']:,} deltas in {p['s']:.1f} s; added per-chunk p50 {p['p50']:.1f} ms, p99 "
          f"{p['p99']:.1f} ms, max {p['max']:.0f} ms")  # fmt: skip
    q = many_runs["paced_direct"]
    print(f"the same {args.runs} runs straight from the model server (the floor at this machine's load): "
          f"added per-chunk p50 {q['p50']:.1f} ms, p99 {q['p99']:.1f} ms, max {q['max']:.0f} ms")  # fmt: skip
    print(f"relay, {args.relay_runs} runs x {args.relay_deltas} unpaced deltas: kit {many_runs['relay_kit']:,.0f} "
          f"chunks/s, bare SSE path (the model server) {many_runs['relay_direct']:,.0f} chunks/s")  # fmt: skip
    headers = ["thread", "stage (_server_cpu.py: samples every 5 ms)", "share", "µs CPU per chunk"]
    for key, what in (("paced_cpu", "the concurrent runs"), ("relay_cpu", "the relay")):
        b = many_runs[key]
        print(f"\nwhere the kit server spent its CPU during {what}: {cpu_summary(b, top=0)}\n"
              + table(headers, cpu_table(b)))  # fmt: skip
        print("the loop's busiest innermost functions: " + ", ".join(f"{f} {x:.0%}" for f, x in b["functions"]))
    full = args.runs >= CONCURRENT_RUNS and args.rate >= CONCURRENT_RATE  # a smaller load proves nothing
    budget = 1e6 / (args.runs * args.rate)
    report("concurrent.chunk_p99", f"{p['p99']:.1f} ms p99, {p['p50']:.1f} ms p50 ({args.runs} runs at "
           f"{args.rate:g}/s; straight from the model: {q['p99']:.1f} ms p99)",
           full and p["p99"] <= CONCURRENT_P99_MS,
           why=f"{p['p99'] - q['p99']:+.1f} ms p99 over the model's own; {args.runs} runs x {args.rate:g} deltas/s "
           f"leave one core {budget:.0f} µs per delta, and {cpu_summary(many_runs['paced_cpu'])}. "
           + CAUSE_CONCURRENT)  # fmt: skip
    relay = many_runs["relay_cpu"]
    report("concurrent.relay", f"{many_runs['relay_kit']:,.0f} chunks/s (bare SSE path "
           f"{many_runs['relay_direct']:,.0f}: the paced server and this client's own ceiling)",
           many_runs["relay_kit"] >= RELAY_CHUNKS_PER_S,
           why=f"{RELAY_CHUNKS_PER_S:,.0f} chunks/s on one core is {1e6 / RELAY_CHUNKS_PER_S:.0f} µs per chunk; "
           f"{cpu_summary(relay)}. " + CAUSE_CONCURRENT)  # fmt: skip


if __name__ == "__main__":
    main()
