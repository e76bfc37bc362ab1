"""The targets ``make bench`` checks, and how a benchmark script reports a measurement against one.

The contract between the benchmark scripts and ``bench/_run_all.py`` (what ``make bench`` runs):

* every ``bench/*.py`` whose name does not start with ``_`` is a benchmark; ``_run_all.py`` runs each
  with its default options, in a fresh process, with the environment variable ``BENCH_RESULTS``
  set to a directory;
* a script reports each figure it measures against one of :data:`TARGETS` by calling
  :func:`report` with the target's id, the measured figures as text, whether the target is met,
  and ``why``: for a measurement that misses its target, the reason and where the time (or the
  requests, the bytes) goes, stage by stage, from what the script measured (issue 20: a MISSED row
  says why). ``report`` refuses a miss without one. It prints one line (and the reason under it),
  and when ``BENCH_RESULTS`` is set it also appends one JSON object per line to
  ``$BENCH_RESULTS/<script name>.jsonl``::

      {"id": "cold_import.slice", "measured": "212 ms (median of 7)", "met": true, "why": "",
       "script": "cold_start.py", "metric": "...", "target": "..."}

  (``metric`` and ``target`` are copied from :data:`TARGETS`, for a reader of the file);
* ``_run_all.py`` ends with one table of every target in :data:`TARGETS`: each row a reported
  measurement, ``MET`` or ``MISSED``. A target no script reported is printed as ``not measured``
  (``MISSED``), never filled in. A target reported by several scripts (or several times) gets one
  row per report. An id that is not in :data:`TARGETS` is listed as an error: add it here first.
  Under the table, each MISSED row's reason, in the table's order.

The numbers a script compares with are the constants below, so that the script and the table
cannot disagree about a threshold.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

# --- thresholds (issue 10) ---------------------------------------------------------------------------

ADDED_CHUNK_P50_MS = 60.0
ADDED_CHUNK_P99_MS = 150.0
ADDED_TTFC_P50_MS = 80.0
WRITES_PER_FLUSH = 1
FLUSHES_PER_SECOND = 20.0
RUN_DOLLARS = 0.0012  # a 10-step, 2,000-chunk run at 100 deltas/s, all-in
TODAY_DOLLARS_PER_STREAM_SECOND = 0.0000875  # the "today", measured before the work
STREAM_SECOND_DOLLARS = TODAY_DOLLARS_PER_STREAM_SECOND / 2
RESUME_REQUESTS = 2
RESUME_RATIO = 1.2  # tail-resume time of a 100k-chunk run / a 1k-chunk run
CHECKPOINT_BYTES_RATIO = 3.0  # total checkpoint bytes of a 200-step run / its final state
SLICE_IMPORT_MS = 350.0
CHAT_IMPORT_MS = 200.0
LAYER_BYTES = 30_000_000  # "30 MB": decimal megabytes, the stricter reading (30 MiB = 31,457,280)
LOCAL_ADDED_TTFC_MS = 10.0
LOCAL_ADDED_CHUNK_P50_MS = 10.0

# --- thresholds (issue 20: the step boundary, long runs, many runs, an HTTP model's first chunk) -------

STEP_OVERHEAD_LOCAL_MS = 2.0  # durable - in-memory, per step, local kit
STEP_ROUND_TRIPS = 1.0  # storage round trips per step with the DynamoDB adapters
STEP_CPU_RATIO = 1.2  # the kit's CPU for step 1,000 / step 100 (model-request encoding apart)
STEP_CPU_LATE, STEP_CPU_EARLY = 1000, 100
STEP_WRU = 2.0  # DynamoDB write units per step of <= 1 KB
BURST_RESUME_RRU = 2.0  # read units of a tail resume (with the requests of RESUME_REQUESTS)
HTTP_TTFC_LOCAL_MS = 3.0  # added time to first chunk with an HTTP model, p50
HTTP_TTFC_DEPLOYED_MS = 25.0
HTTP_TTFC_ROUND_TRIPS = 2  # storage round trips before the model request starts, deployed
CONCURRENT_RUNS = 100
CONCURRENT_RATE = 100.0  # deltas/s of each run
CONCURRENT_P99_MS = 50.0
RELAY_CHUNKS_PER_S = 40_000.0


@dataclass(frozen=True)
class Target:
    """One target of the final table."""

    id: str
    metric: str
    target: str


_DEPLOYED = "deployed wiring"
TARGETS: tuple[Target, ...] = (
    Target("deployed.chunk_latency.p50", f"added per-chunk latency p50, {_DEPLOYED}", f"≤ {ADDED_CHUNK_P50_MS:.0f} ms"),
    Target("deployed.chunk_latency.p99", f"added per-chunk latency p99, {_DEPLOYED}", f"≤ {ADDED_CHUNK_P99_MS:.0f} ms"),
    Target("deployed.ttfc.p50", f"added time to first chunk p50, {_DEPLOYED}", f"≤ {ADDED_TTFC_P50_MS:.0f} ms"),
    Target("deployed.writes_per_flush", "storage writes per flush", f"{WRITES_PER_FLUSH}"),
    Target("deployed.flushes_per_second", "flushes per second per run", f"≤ {FLUSHES_PER_SECOND:.0f}"),
    Target("deployed.run_cost", "a 10-step, 2,000-chunk run at 100 deltas/s, all-in", f"≤ ${RUN_DOLLARS}"),
    Target("deployed.cost_per_second", "cost per second of streaming",
           f"≤ ${STREAM_SECOND_DOLLARS:.8f} (half of ${TODAY_DOLLARS_PER_STREAM_SECOND:.7f})"),
    Target("deployed.resume_requests", "tail resume through the HTTP endpoint, cold or warm: AWS requests",
           f"≤ {RESUME_REQUESTS}"),
    Target("deployed.resume_ratio", "tail resume through the HTTP endpoint: 100k/1k time ratio", f"≤ {RESUME_RATIO}"),
    Target("checkpoint.writes_per_step", "checkpoint writes per step", "1 (+ at most 1 per slice boundary)"),
    Target("checkpoint.no_growth", "checkpoint bytes written per step as history grows", "do not grow"),
    Target("checkpoint.bytes_200_steps", "total checkpoint bytes of a 200-step run / its final state",
           f"≤ {CHECKPOINT_BYTES_RATIO:.0f}x"),
    Target("cold_import.slice", "slice handler cold import, python3.12, sam build output",
           f"≤ {SLICE_IMPORT_MS:.0f} ms"),
    Target("cold_import.chat", "chat app cold import, python3.12, sam build output", f"≤ {CHAT_IMPORT_MS:.0f} ms"),
    Target("layer.size", "built layer, unzipped", f"≤ {LAYER_BYTES / 1e6:.0f} MB"),
    Target("local.ttfc", "local path: added time to first chunk p50", f"≤ {LOCAL_ADDED_TTFC_MS:.0f} ms"),
    Target("local.chunk_latency.p50", "local path: added per-chunk latency p50",
           f"≤ {LOCAL_ADDED_CHUNK_P50_MS:.0f} ms"),
    Target("waits.idle_cost", "a run waiting for an event, deployed: Lambda time, requests, transitions",
           "0 while it waits (issue 21)"),
    Target("step.overhead.local", "durable overhead per step, local kit, HTTP model",
           f"≤ {STEP_OVERHEAD_LOCAL_MS:.0f} ms"),
    Target("step.overhead.local_inprocess", "durable overhead per step, local kit, in-process model",
           f"≤ {STEP_OVERHEAD_LOCAL_MS:.0f} ms"),
    Target("step.overhead.dynamodb", "durable overhead per step, DynamoDB adapters (moto), HTTP model",
           f"≤ {STEP_ROUND_TRIPS:.0f} storage round trip per step"),
    Target("step.cpu_flat", f"the kit's CPU per step, step {STEP_CPU_LATE:,} / step {STEP_CPU_EARLY}, "
           "model-request encoding apart", f"≤ {STEP_CPU_RATIO}x"),
    Target("step.wru", "DynamoDB write units per step (≤ 1 KB step)", f"≤ {STEP_WRU:.0f}"),
    Target("deployed.burst_resume", "tail resume, log written in bursts: requests and RRU",
           f"≤ {RESUME_REQUESTS} requests, ≤ {BURST_RESUME_RRU:.0f} RRU"),
    Target("deployed.burst_resume_ratio", "tail resume, log written in bursts: 100k/1k time ratio",
           f"≤ {RESUME_RATIO}"),
    Target("http.ttfc.local", "added time to first chunk p50, HTTP model, local kit",
           f"≤ {HTTP_TTFC_LOCAL_MS:.0f} ms"),
    Target("http.ttfc.deployed", "added time to first chunk p50, HTTP model, deployed wiring (moto)",
           f"≤ {HTTP_TTFC_DEPLOYED_MS:.0f} ms, ≤ {HTTP_TTFC_ROUND_TRIPS} storage round trips before the model"),
    Target("concurrent.chunk_p99", f"{CONCURRENT_RUNS} concurrent runs at {CONCURRENT_RATE:.0f} deltas/s, one "
           "local server: added per-chunk p99", f"≤ {CONCURRENT_P99_MS:.0f} ms"),
    Target("concurrent.relay", "relay throughput, local server, end to end", f"≥ {RELAY_CHUNKS_PER_S:,.0f} chunks/s"),
)  # fmt: skip
BY_ID = {t.id: t for t in TARGETS}
RESULTS_ENV = "BENCH_RESULTS"


def report(target_id: str, measured: str, met: bool, why: str = "") -> None:
    """Print one measurement against target ``target_id``, and record it for ``make bench``'s table.

    ``why``: the reason a miss misses and its stage-by-stage breakdown (ignored when ``met``);
    required for a miss, so that no MISSED row stands without one.
    """
    target = BY_ID.get(target_id)
    if target is None:
        raise KeyError(f"unknown target id {target_id!r}: add it to TARGETS in bench/_targets.py")
    why = "" if met else why.strip()
    if not met and not why:
        raise ValueError(f"{target_id} MISSED ({measured}) without a reason: pass report(..., why=...)")
    print(f"  {target.metric} {target.target}: {'MET' if met else 'MISSED'} ({measured})")
    if why:
        print(f"    why: {why}")
    out = os.environ.get(RESULTS_ENV)
    if not out:
        return
    script = Path(sys.argv[0]).name
    row = {"id": target_id, "measured": measured, "met": bool(met), "why": why, "script": script,
           "metric": target.metric, "target": target.target}  # fmt: skip
    with open(Path(out) / f"{Path(script).stem}.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(row, ensure_ascii=False) + "\n")


PEERS_FILE = "peers.best.jsonl"


def report_peer(target_id: str, best: str) -> None:
    """Record the best peer's figure for target ``target_id`` (``bench/peers.py``): ``make bench``'s
    table prints it in its "best peer" column, next to the kit's rows of that target."""
    if target_id not in BY_ID:
        raise KeyError(f"unknown target id {target_id!r}: add it to TARGETS in bench/_targets.py")
    print(f"  best peer, {BY_ID[target_id].metric}: {best}")
    out = os.environ.get(RESULTS_ENV)
    if out:
        with open(Path(out) / PEERS_FILE, "a", encoding="utf-8") as f:
            f.write(json.dumps({"peer_of": target_id, "best": best}, ensure_ascii=False) + "\n")
