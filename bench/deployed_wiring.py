"""The deployed wiring end to end under moto: latency, AWS requests and dollars, side by side.

The real ``template.yaml`` is deployed into moto (``tests/deploy/stack.py``: DynamoDB, S3, the real
state machine run by moto's interpreter, the real slice handler invoked in-process), and the real
chat function app (``functions/chat/app.py``, its environment from the template) is served on
loopback by the server the chat function runs (``lambda_fastpath.httpd``; uvicorn in a
baseline tree from before it); it runs a chat run's first slice itself (``--env INLINE_FIRST_SLICE=0``: the
slice function runs every slice). A paced model (``_deployed.build_agent``) streams through all of it:

1. latency: ``--turns`` chat turns (``--ttft`` to the first token, then ``--deltas`` text deltas
   every ``--interval-ms``) POSTed over HTTP, interleaved with the same model streamed directly by
   a bare SSE endpoint. Added time to
   first chunk and per-chunk added latency (delta received - delta emitted), deployed minus direct;
2. cost: one 10-step run of 2,000 chunks at 100 deltas/s (0.2 s to first token per step) POSTed and
   streamed to ``finish``. Every AWS request of the functions is counted (botocore events, DynamoDB
   capacity from item sizes) and priced with Lambda compute (both functions at their configured
   memory; the chat function for as long as it streams), Step Functions transitions, requests;
3. resume: ``GET /api/chat/{run}/stream?startIndex=-5`` of finished runs of 1,000 and 100,000
   chunks (checkpoints of ~10 KB and ~500 KB), from a fresh chat app (cold) and the same app (warm).

The baseline is the same script run against the tree of ``--baseline`` (default: the commit before
issue 10's chunk log; ``none`` to skip), unpacked with ``git archive`` into a temporary directory
and measured in a subprocess first, so that both columns come from one run on one machine.

    .venv/bin/python bench/deployed_wiring.py [--turns 5] [--baseline ac6721e|none]

Prints the figures and reports each against its ``deployed.*`` target (``bench/_targets.py``), the
rows ``make bench`` gathers into its table.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import logging
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import _deployed
import httpx
from _common import (
    REPO,
    RequestMeter,
    busy_ms,
    deployed_server,
    machine,
    median,
    overhead_note,
    overhead_rows,
    pct,
    price_banner,
    serve,
    table,
)
from _deployed import EMITTED, SETTINGS, Metered, build_finished_run, by_op, calibrate, is_log_request, is_seal_request
from _targets import (
    ADDED_CHUNK_P50_MS,
    ADDED_CHUNK_P99_MS,
    ADDED_TTFC_P50_MS,
    FLUSHES_PER_SECOND,
    RESUME_RATIO,
    RESUME_REQUESTS,
    RUN_DOLLARS,
    TODAY_DOLLARS_PER_STREAM_SECOND,
    WRITES_PER_FLUSH,
)
from _targets import report as report_target
from durable_harness.telemetry.costs import lambda_compute, lambda_requests, sfn_dollars

BASELINE = "ac6721e"
"""The tree before issue 10's chunk log: what the issue's "today" figures describe."""
PRINCIPAL = "anonymous"  # AuthMode none
EVENTBRIDGE_PER_M = 1.00
COSTS_MODULE = "layers/harness/durable_harness/telemetry/costs.py"  # the prices, which a baseline tree may lack


# --- measuring ----------------------------------------------------------------------------------------


def turn(client: httpx.Client, url: str, text: str) -> tuple[float, float, list[float]]:
    """POST one turn; (ms to the first text-delta, ms to its emission by the model, per-delta ms)."""
    body = json.dumps({"messages": [{"id": "u", "role": "user", "parts": [{"type": "text", "text": text}]}]})
    from durable_harness.protocol.sse import SSEParser

    parser, first, added = SSEParser(), None, []
    sent = time.perf_counter()
    with client.stream("POST", f"{url}/api/chat", content=body, timeout=60) as response:
        for raw in response.iter_raw():
            now = time.perf_counter()
            for data in parser.feed(raw):
                if data == "[DONE]":
                    continue
                chunk = json.loads(data)
                if chunk["type"] == "text-delta":
                    first = first if first is not None else now - sent
                    added.append(now - EMITTED[chunk["delta"][1:-1]])
    assert first is not None, "no text-delta received"
    emitted = EMITTED[f"{text}:0"] - sent
    return first * 1000, emitted * 1000, [a * 1000 for a in added]


def latency(metered: Metered, turns: int) -> dict[str, Any]:
    """Deployed and direct turns, interleaved; the figures in ms."""
    from durable_harness.models.scripted import FunctionModel
    from relay_latency import bare_sse_app

    direct_model: FunctionModel = _deployed.build_agent().model
    out: dict[str, dict[str, list[float]]] = {p: {"ttfc": [], "emit": [], "chunk": []} for p in ("deployed", "direct")}
    with (
        serve(metered.chat_app(), server=deployed_server()) as deployed_url,
        serve(bare_sse_app(direct_model)) as direct_url,
        httpx.Client() as deployed_client,
        httpx.Client() as direct_client,
    ):
        paths = (("deployed", deployed_url, deployed_client), ("direct", direct_url, direct_client))
        for n in range(turns + 1):  # the first turn of each path warms up (imports, connections)
            for path, url, client in paths:
                ttfc, emit, chunks = turn(client, url, f"lat:{path}{n}")
                if n:
                    out[path]["ttfc"].append(ttfc)
                    out[path]["emit"].append(emit)
                    out[path]["chunk"] += chunks
            if n == 0:
                # This process holds moto's whole state (what AWS's services hold, deployed), and a
                # collection of Python's oldest generation walks all of it: 210-270 ms, a couple of
                # times in 16 turns, in either tree, stalling whichever stream is running. The chat
                # function's own heap is a fraction of it: keep what exists after the warm-up out
                # of the collections (gen 2 then takes ~30 ms).
                gc.collect()
                gc.freeze()
    d, b = out["deployed"], out["direct"]
    return {
        "ttfc_deployed": median(d["ttfc"]), "ttfc_direct": median(b["ttfc"]),
        "startup_deployed": median(d["emit"]), "startup_direct": median(b["emit"]),
        "chunk_p50_deployed": pct(d["chunk"], 0.5), "chunk_p99_deployed": pct(d["chunk"], 0.99),
        "chunk_p50_direct": pct(b["chunk"], 0.5), "chunk_p99_direct": pct(b["chunk"], 0.99),
        "first_chunk_deployed": median([t - e for t, e in zip(d["ttfc"], d["emit"], strict=True)]),
    }  # fmt: skip


def cost(metered: Metered) -> dict[str, Any]:
    """The 10-step run through the stack; its requests, flushes and dollars."""
    stack, meter = metered.stack, metered.meter
    meter.reset()
    metered.flushes.clear()
    metered.invocations.clear()
    with serve(metered.chat_app(), server=deployed_server()) as url, httpx.Client() as client:
        body = json.dumps({"messages": [{"id": "u", "role": "user", "parts": [{"type": "text", "text": "cost"}]}]})
        began = time.monotonic()
        with client.stream("POST", f"{url}/api/chat", content=body, timeout=120) as response:
            run_id = response.headers["x-workflow-run-id"]
            received = b"".join(response.iter_raw())
        streamed = time.monotonic() - began
    transitions = metered.transitions(run_id)
    from durable_harness.protocol.sse import SSEParser

    chunks = sum(1 for data in SSEParser().feed(received) if data != "[DONE]")
    assert b'"type":"finish"' in received, received[-300:]
    requests = list(meter.requests)
    memory = {fn.logical_id: fn.memory for fn in stack.functions.values()}
    slice_s = sum(seconds for name, seconds in metered.invocations if name == "SliceFunction")
    log_meter, seal_meter, record_meter = RequestMeter(), RequestMeter(), RequestMeter()
    log_meter.requests = [r for r in requests if is_log_request(r) and not is_seal_request(r)]
    seal_meter.requests = [r for r in requests if is_seal_request(r)]
    record_meter.requests = [r for r in requests if not is_log_request(r)]
    log_d, seal_d, record_d = _dollars(log_meter), _dollars(seal_meter), _dollars(record_meter)
    compute_slice = lambda_compute(memory["SliceFunction"], slice_s)
    compute_chat = lambda_compute(memory["ChatFunction"], streamed)
    invocations = len(metered.invocations) + 1
    events = sum(1 for r in requests if r.op == "PutEvents")
    rows = {
        "chunk log: S3 requests": log_d["s3_put"] + log_d["s3_get"],
        "chunk log: DynamoDB writes (WRU)": log_d["ddb_write"],
        "chunk log: DynamoDB reads (RRU)": log_d["ddb_read"],
        "chunk log: sealing into S3 (segment PUT + index update)": sum(seal_d.values()),
        "run records (checkpoints): DynamoDB and S3": sum(record_d.values()),
        "Step Functions transitions": sfn_dollars(transitions),
        "Lambda slice function (GB-s)": compute_slice,
        "Lambda chat function while it streams (GB-s)": compute_chat,
        "Lambda requests": lambda_requests(invocations),
        f"EventBridge PutEvents (${EVENTBRIDGE_PER_M:.2f}/million)": events * EVENTBRIDGE_PER_M / 1e6,
    }
    counts = Counter(name for name, _ in metered.invocations)
    counts["ChatFunction"] += 1  # the POST that streamed the run
    rows.update(overhead_rows(dict(counts), memory))
    per_second = (sum(log_d.values()) + sum(seal_d.values()) + compute_slice + compute_chat) / streamed
    # The hot path's writes: what each flush costs (a seal is per run or per size, counted apart).
    writes = [r for r in requests if r.label.endswith("|append") and r.op in ("PutItem", "UpdateItem", "PutObject")
              and not is_seal_request(r)]  # fmt: skip
    seals = sum(1 for r in seal_meter.requests if r.service == "s3")
    times = sorted(t for t, _ in metered.flushes)
    window = max((sum(1 for u in times if t - 1.0 < u <= t) for t in times), default=0)
    return {
        "run_id": run_id, "chunks": chunks, "streamed_s": streamed, "slice_s": slice_s, "rows": rows,
        "total": sum(rows.values()), "per_second": per_second, "flushes": len(times),
        "writes_per_flush": len(writes) / max(1, len(times)), "max_flushes_1s": window,
        "mean_flushes_s": (len(times) - 1) / max(times[-1] - times[0], 1e-9) if len(times) > 1 else 0.0,
        "by_op": by_op(requests),
        "log_requests": len(log_meter.requests), "transitions": transitions, "invocations": invocations,
        "seals": seals, "seal_requests": len(seal_meter.requests), "seal_dollars": sum(seal_d.values()),
        "memory": memory, "events": events,
    }  # fmt: skip


def _dollars(meter: RequestMeter) -> dict[str, float]:
    return meter.dollars()


def resume(metered: Metered, reps: int) -> dict[str, Any]:
    """Tail resumes of finished 1k and 100k runs over HTTP, cold and warm: ms and requests."""
    runs = {1_000: ("wrun_" + "1k".rjust(26, "0"), 10_000), 100_000: ("wrun_" + "100k".rjust(26, "0"), 500_000)}
    for n, (run_id, state_bytes) in runs.items():
        build_finished_run(metered, run_id, n, state_bytes, PRINCIPAL)
    holder: dict[str, Any] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":  # one server; the app behind it is replaced for each cold resume
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        await holder["app"](scope, receive, send)

    out: dict[str, Any] = {}
    meter = metered.meter
    with serve(app, server=deployed_server()) as url, httpx.Client() as client:
        for mode in ("cold", "warm"):
            holder["app"] = metered.chat_app()
            times: dict[int, list[float]] = {n: [] for n in runs}
            nets: dict[int, list[float]] = {n: [] for n in runs}
            requests: dict[int, list[Any]] = {n: [] for n in runs}
            for rep in range(reps + (mode == "warm")):  # the two runs alternate: both see the same load
                for n, (run_id, _) in runs.items():
                    if mode == "cold":
                        holder["app"] = metered.chat_app()
                    meter.reset()
                    began = time.perf_counter()
                    response = client.get(f"{url}/api/chat/{run_id}/stream?startIndex=-5", timeout=30)
                    elapsed = (time.perf_counter() - began) * 1000
                    assert response.status_code == 200 and response.text.count("data: ") == 6, response.text[-300:]
                    if mode == "warm" and rep == 0:
                        continue  # warms the app up
                    times[n].append(elapsed)
                    nets[n].append(elapsed - busy_ms(meter.requests, {"Query", "ListObjectsV2"}))
                    requests[n].append(list(meter.requests))
            for n in runs:
                out[f"{mode}_{n}_ms"] = median(times[n])
                out[f"{mode}_{n}_net_ms"] = median(nets[n])
                out[f"{mode}_{n}_requests"] = max(len(r) for r in requests[n])
                ops = by_op(requests[n][-1]).items()
                out[f"{mode}_{n}_ops"] = ", ".join(f"{op} x{k}" if k > 1 else op for op, k in ops)
    return out


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Everything, against the tree this script runs in."""
    from tests.deploy.serve_stack import _aws_environment

    _aws_environment()
    # moto's interpreter logs an error for each optional JSONPath of the ASL it does not find.
    logging.getLogger("moto.stepfunctions").setLevel(logging.CRITICAL)
    SETTINGS.deltas, SETTINGS.interval, SETTINGS.first = args.deltas, args.interval_ms / 1000, args.ttft
    SETTINGS.per_step = calibrate(args.steps, args.chunks)
    SETTINGS.steps, SETTINGS.rate, SETTINGS.ttft = args.steps, args.rate, args.ttft
    overrides = {"Agent": "_deployed:build_agent", "ModelId": "demo", "AuthMode": "none"}
    with contextlib.redirect_stdout(io.StringIO()), Metered(overrides) as metered:  # the handlers log to stdout
        for fn in metered.stack.functions.values():
            fn.env.update(dict(kv.split("=", 1) for kv in args.env))
        results: dict[str, Any] = {}
        if "latency" in args.parts:
            results["latency"] = latency(metered, args.turns)
        if "cost" in args.parts:
            results["cost"] = cost(metered)
        if "resume" in args.parts:
            results["resume"] = resume(metered, args.reps)
    results["memory"] = {fn.logical_id: fn.memory for fn in metered.stack.functions.values()}
    return results


# --- the baseline -------------------------------------------------------------------------------------


BASELINE_SCRIPTS = ("deployed_wiring.py", "_deployed.py", "_common.py", "_targets.py", "relay_latency.py", "_stages.py")


@contextlib.contextmanager
def baseline_tree(rev: str, scripts: tuple[str, ...] = BASELINE_SCRIPTS) -> Iterator[Path]:
    """The tree of ``rev`` (git archive) with ``scripts`` (this script and its helpers; the
    measuring code) copied from this tree into its bench/ (``first_chunk.py --baseline`` too)."""
    with tempfile.TemporaryDirectory(prefix="dh-baseline-") as tmp:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        for name in scripts:
            shutil.copy(REPO / "bench" / name, Path(tmp) / "bench" / name)
        costs = Path(tmp) / COSTS_MODULE
        if not costs.exists():  # a tree from before the library kept the prices: the helpers need them
            costs.parent.mkdir(exist_ok=True)  # (a namespace package in a tree without telemetry/)
            shutil.copy(REPO / COSTS_MODULE, costs)
        yield Path(tmp)


def measure_baseline(args: argparse.Namespace) -> dict[str, Any] | None:
    """The figures of the ``--baseline`` tree (a subprocess in a ``git archive`` of it), or None."""
    if args.baseline == "none":
        return None
    with baseline_tree(args.baseline) as tree, tempfile.NamedTemporaryFile(suffix=".json") as out:
        command = [sys.executable, str(tree / "bench" / "deployed_wiring.py"), "--child", out.name, *args.passed]
        env = {**__import__("os").environ, "PYTHONPATH": f"{tree / 'layers' / 'harness'}:{tree}"}
        done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            print(f"baseline {args.baseline}: failed, measured nothing\n{done.stderr[-2000:]}", file=sys.stderr)
            return None
        result: dict[str, Any] = json.loads(Path(out.name).read_text())
        return result


# --- reporting ----------------------------------------------------------------------------------------


def report(new: dict[str, Any], old: dict[str, Any] | None, args: argparse.Namespace) -> None:
    """Print the tables, and report each figure against its target (``bench/_targets.py``)."""

    def both(key: str, part: str, fmt: str = "{:.1f}") -> list[str]:
        return [fmt.format(x[part][key]) if x else "-" for x in (old, new)]

    lat, cost_, res = new["latency"], new["cost"], new["resume"]
    print(f"deployed_wiring: {machine()}")
    print(price_banner())
    print(f"baseline: {args.baseline} (the same script against that tree); new: this tree\n")
    print(f"1. latency: {args.turns} turns per path after a warm-up; the model takes {args.ttft:g} s to its first "
          f"token, then {args.deltas} deltas every {args.interval_ms:g} ms")  # fmt: skip
    rows = [
        ["time to first chunk p50, deployed (ms)", *both("ttfc_deployed", "latency")],
        ["  of which: model's first delta after the POST (start-up)", *both("startup_deployed", "latency")],
        ["  of which: first delta's way through the log", *both("first_chunk_deployed", "latency")],
        ["time to first chunk p50, direct (ms)", *both("ttfc_direct", "latency")],
        ["per-chunk latency p50 / p99, deployed (ms)",
         *[f"{x['latency']['chunk_p50_deployed']:.1f} / {x['latency']['chunk_p99_deployed']:.1f}" if x else "-"
           for x in (old, new)]],
        ["per-chunk latency p50 / p99, direct (ms)",
         *[f"{x['latency']['chunk_p50_direct']:.2f} / {x['latency']['chunk_p99_direct']:.2f}" if x else "-"
           for x in (old, new)]],
    ]  # fmt: skip
    print(table(["", "baseline", "new"], rows))
    c_old = old["cost"] if old else None
    print(f"\n2. a {len(SETTINGS.per_step)}-step run of {cost_['chunks']:,} chunks at {args.rate:g} deltas/s, "
          f"{args.ttft:g} s to first token per step; streamed {cost_['streamed_s']:.1f} s")  # fmt: skip
    items = list(dict.fromkeys([*(c_old["rows"] if c_old else {}), *cost_["rows"]]))
    rows = [[k, f"${c_old['rows'][k]:.6f}" if c_old and k in c_old["rows"] else "-",
             f"${cost_['rows'][k]:.6f}" if k in cost_["rows"] else "-"] for k in items]  # fmt: skip
    rows.append(["total", f"${c_old['total']:.6f}" if c_old else "-", f"${cost_['total']:.6f}"])
    print(table(["item", "baseline", "new"], rows))
    print(overhead_note())
    for name, x in (("baseline", c_old), ("new", cost_)):
        if x:
            print(f"  {name}: slice function {x['memory']['SliceFunction']} MB x {x['slice_s']:.1f} s, chat function "
                  f"{x['memory']['ChatFunction']} MB x {x['streamed_s']:.1f} s; {x['transitions']} state transitions; "
                  f"{x['invocations']} Lambda requests; {x['events']} events")  # fmt: skip
            print(f"  {name} requests: " + ", ".join(f"{op} {n:g}" for op, n in x["by_op"].items()))
            print(f"  {name}: {x['flushes']} flushes, {x['writes_per_flush']:.2f} writes each; "
                  f"{x['log_requests']} chunk-log requests in all")  # fmt: skip
    print(f"\n3. resume at the tail (GET ?startIndex=-5) of finished runs; median of {args.reps}")
    r_old = old["resume"] if old else None
    rows = []
    for mode in ("cold", "warm"):
        for n in (1_000, 100_000):
            rows.append([f"{mode}, {n:,} chunks",
                         *[f"{x[f'{mode}_{n}_ms']:.1f} ms ({x[f'{mode}_{n}_net_ms']:.1f} net), "
                           f"{x[f'{mode}_{n}_requests']} requests: {x[f'{mode}_{n}_ops']}"
                           if x else "-" for x in (r_old, res)]])  # fmt: skip
    print(table(["resume", "baseline", "new"], rows))
    print(
        "  net: without the time in Query (new) or ListObjectsV2 (baseline). moto answers both by walking (and "
        "sorting) every item of the table or key of the bucket, here those of all the runs so far; DynamoDB and "
        "S3 read only the partition or key range asked for."
    )

    added_first = lat["ttfc_deployed"] - lat["ttfc_direct"]
    added_p50 = lat["chunk_p50_deployed"] - lat["chunk_p50_direct"]
    added_p99 = lat["chunk_p99_deployed"] - lat["chunk_p99_direct"]
    requests = max(res[f"{m}_{n}_requests"] for m in ("cold", "warm") for n in (1_000, 100_000))
    ratios = [res[f"{m}_100000_ms"] / res[f"{m}_1000_ms"] for m in ("cold", "warm")]
    adjusted = [res[f"{m}_100000_net_ms"] / res[f"{m}_1000_net_ms"] for m in ("cold", "warm")]
    half = TODAY_DOLLARS_PER_STREAM_SECOND / 2
    baseline_second = f"; the baseline measured ${old['cost']['per_second']:.7f}" if old else ""
    # Why a row would miss: where its figure goes, from this run's own measurements.
    chunk_path = (f"a chunk waits in the slice's writer for its flush (group commit, paced), then its PutItem, then "
                  f"the chat function's follower reads it: deployed p50 {lat['chunk_p50_deployed']:.1f} / p99 "
                  f"{lat['chunk_p99_deployed']:.1f} ms against {lat['chunk_p50_direct']:.2f} / "
                  f"{lat['chunk_p99_direct']:.2f} ms straight from the model; {cost_['flushes']} flushes of "
                  f"{cost_['writes_per_flush']:.2f} writes")  # fmt: skip
    first_path = (f"start-up (from the POST to the model's first delta: the run's creation, the first slice's claim) "
                  f"{lat['startup_deployed']:.1f} ms, then the first delta's way through the log "
                  f"{lat['first_chunk_deployed']:.1f} ms; direct {lat['ttfc_direct']:.1f} ms")  # fmt: skip
    cost_parts = ", ".join(f"{k} ${v:.6f}" for k, v in sorted(cost_["rows"].items(), key=lambda kv: -kv[1]))
    requests_by_op = ", ".join(f"{op} {n:g}" for op, n in cost_["by_op"].items())
    resume_ops = "; ".join(f"{m} {n:,}: {res[f'{m}_{n}_requests']} requests ({res[f'{m}_{n}_ops']}), "
                           f"{res[f'{m}_{n}_ms']:.1f} ms ({res[f'{m}_{n}_net_ms']:.1f} net)"
                           for m in ("cold", "warm") for n in (1_000, 100_000))  # fmt: skip
    result_rows = [
        ("deployed.chunk_latency.p50", f"{added_p50:+.1f} ms", added_p50 <= ADDED_CHUNK_P50_MS, chunk_path),
        ("deployed.chunk_latency.p99", f"{added_p99:+.1f} ms", added_p99 <= ADDED_CHUNK_P99_MS, chunk_path),
        ("deployed.ttfc.p50", f"{added_first:+.1f} ms ({lat['first_chunk_deployed']:.1f} ms of it through the log, "
         f"the rest start-up)", added_first <= ADDED_TTFC_P50_MS, first_path),
        ("deployed.writes_per_flush", f"{cost_['writes_per_flush']:.2f} ({cost_['flushes']} flushes; sealing apart: "
         f"{cost_['seals']} seal(s) of {cost_['seal_requests']} requests, ${cost_['seal_dollars']:.7f})",
         cost_["writes_per_flush"] <= WRITES_PER_FLUSH,
         f"{cost_['log_requests']} chunk-log requests for {cost_['flushes']} flushes; the run's requests: "
         f"{requests_by_op}"),
        ("deployed.flushes_per_second",
         f"max {cost_['max_flushes_1s']} in any 1 s (mean {cost_['mean_flushes_s']:.1f}/s)",
         cost_["max_flushes_1s"] <= FLUSHES_PER_SECOND,
         f"the writer's pace (STREAM_FLUSH_SECONDS, token bucket in chunks/writer.py) let {cost_['max_flushes_1s']} "
         f"flushes through in one second, {cost_['flushes']} in {cost_['streamed_s']:.1f} s of streaming"),
        ("deployed.run_cost", f"${cost_['total']:.5f} ({args.steps} steps, {cost_['chunks']:,} chunks)",
         cost_["total"] <= RUN_DOLLARS, f"by item: {cost_parts}; requests: {requests_by_op}"),
        ("deployed.cost_per_second",
         f"${cost_['per_second']:.7f} ({cost_['per_second'] / TODAY_DOLLARS_PER_STREAM_SECOND:.0%} "
         f"of the issue's today{baseline_second})", cost_["per_second"] <= half,
         f"${cost_['total']:.6f} over {cost_['streamed_s']:.1f} s streamed; by item: {cost_parts}"),
        ("deployed.resume_requests", f"{requests} (cold and warm, 1k and 100k chunks)", requests <= RESUME_REQUESTS,
         resume_ops),
        ("deployed.resume_ratio", f"cold x{adjusted[0]:.2f}, warm x{adjusted[1]:.2f} outside moto's Query/LIST "
         f"(raw x{ratios[0]:.2f} / x{ratios[1]:.2f})", max(adjusted) <= RESUME_RATIO, resume_ops),
    ]  # fmt: skip
    print("\ntargets (issue 10):")
    for target_id, measured, met, why in result_rows:
        report_target(target_id, measured, met, why)
    if old:
        print(f"\nbaseline for the same rows: added per-chunk p50 "
              f"{old['latency']['chunk_p50_deployed'] - old['latency']['chunk_p50_direct']:+.1f} ms, p99 "
              f"{old['latency']['chunk_p99_deployed'] - old['latency']['chunk_p99_direct']:+.1f} ms; added TTFC "
              f"{old['latency']['ttfc_deployed'] - old['latency']['ttfc_direct']:+.1f} ms; writes per flush "
              f"{old['cost']['writes_per_flush']:.2f}; max flushes in 1 s {old['cost']['max_flushes_1s']}; run "
              f"${old['cost']['total']:.5f}; per second ${old['cost']['per_second']:.7f}")  # fmt: skip


def main() -> None:
    """Measure the baseline (subprocess), then this tree; print and report the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=5, help="latency turns per path (after one warm-up)")
    parser.add_argument("--deltas", type=int, default=100, help="text deltas per latency turn")
    parser.add_argument("--interval-ms", type=float, default=10.0, help="between latency deltas")
    parser.add_argument("--chunks", type=int, default=2000, help="chunks of the cost run")
    parser.add_argument("--steps", type=int, default=10, help="steps of the cost run")
    parser.add_argument("--rate", type=float, default=100.0, help="deltas per second of the cost run")
    parser.add_argument("--ttft", type=float, default=0.2, help="the model's seconds to first token (each step)")
    parser.add_argument("--reps", type=int, default=30, help="resumes per case")
    parser.add_argument("--baseline", default=BASELINE, help="git revision measured as the baseline, or none")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an environment variable for every function, e.g. STREAM_FLUSH_SECONDS=0.05",
    )
    parser.add_argument("--parts", default="latency,cost,resume",
                        help="what to measure (comma-separated); a partial run prints raw figures only")  # fmt: skip
    parser.add_argument("--child", help=argparse.SUPPRESS)  # measure only, write the raw figures here
    args = parser.parse_args()
    args.passed = [f"--{k.replace('_', '-')}={getattr(args, k)}" for k in
                   ("turns", "deltas", "interval_ms", "chunks", "steps", "rate", "ttft", "reps")]  # fmt: skip
    args.parts = set(args.parts.split(","))
    if args.child:
        Path(args.child).write_text(json.dumps(measure(args)))
        return
    if args.parts != {"latency", "cost", "resume"}:  # a partial run (while tuning): the raw figures only
        print(json.dumps(measure(args), indent=1))
        return
    old = measure_baseline(args)
    new = measure(args)
    report(new, old, args)


if __name__ == "__main__":
    main()
