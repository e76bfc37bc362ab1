"""Persistent sessions: what the bridge costs a slice, against what it replaces.

Side by side in one run, over one small program (it writes timestamped lines when told to):

* **reattach**: the time from an attach's start to its first line, when the program has written
  lines while nobody was attached (a slice that starts and reads on from its cursor): through a
  warm connection, and through a new client that finds the bridge in the registry first (a new
  slice process, a restarted server); next to it, what slice mode pays instead at each slice: a
  fresh process of the same program to its first line;
* **per-line overhead**: the latency from the program's write of a line (its ``CLOCK_MONOTONIC``
  stamp, shared by all processes on Linux) to its receipt, through the bridge (numbered, logged,
  streamed as SSE over loopback HTTP) against a direct pipe to the same program; medians and p99
  over ``--lines`` lines written ``--interval-ms`` apart.

Each figure is a median over its samples; the script stops sampling at ``--max-seconds``.

    .venv/bin/python bench/sessions.py [--lines 2000] [--interval-ms 1] [--reattaches 30] [--max-seconds 60]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path

from _common import machine, median, pct, table
from durable_harness.harness.bridge import BridgeConnection, find, find_or_start

PROGRAM = r"""
import json, sys, time
for raw in sys.stdin:
    line = json.loads(raw)
    if line["type"] == "destroy":
        break
    for i in range(line.get("n", 0)):
        if i and line.get("interval"):
            time.sleep(line["interval"])
        sys.stdout.write(json.dumps({"type": "text-delta", "id": "t", "delta": str(time.monotonic_ns())}) + "\n")
        sys.stdout.flush()
    if line.get("finish"):
        sys.stdout.write('{"type":"finish","finishReason":{"unified":"stop"},'
                         '"totalUsage":{"inputTokens":{},"outputTokens":{}}}\n')
        sys.stdout.flush()
"""

SESSION = "sess_bench_sessions_0123456789abcdef"


def stamp_latency_ms(delta: str, received_ns: int) -> float:
    """Milliseconds from the program's stamp to its receipt."""
    return (received_ns - int(delta)) / 1e6


async def direct_pipe(command: list[str], lines: int, interval: float) -> list[float]:
    """Per-line latency reading the program's stdout straight from a pipe."""
    proc = await asyncio.create_subprocess_exec(*command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps({"type": "start", "n": lines, "interval": interval}).encode() + b"\n")
    await proc.stdin.drain()
    latencies = []
    for _ in range(lines):
        raw = await proc.stdout.readline()
        latencies.append(stamp_latency_ms(json.loads(raw)["delta"], time.monotonic_ns()))
    proc.stdin.close()
    await proc.wait()
    return latencies


async def through_bridge(bridge: BridgeConnection, boot: str, cursor: int, lines: int, interval: float) -> list[float]:
    """Per-line latency through the bridge: one attach streaming a turn of ``lines`` lines."""
    await bridge.send({"type": "start", "n": lines, "interval": interval, "finish": True}, boot)
    latencies = []
    async for numbered in bridge.attach(boot, cursor, deadline_seconds=600):
        if numbered.line.get("type") == "text-delta":
            latencies.append(stamp_latency_ms(numbered.line["delta"], time.monotonic_ns()))
    return latencies


async def fresh_process_first_line(command: list[str]) -> float:
    """Slice mode's cost per slice: a new process of the program, to its first line (ms)."""
    began = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(*command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b'{"type":"start","n":1}\n')
    await proc.stdin.drain()
    await proc.stdout.readline()
    elapsed = (time.perf_counter() - began) * 1000
    proc.stdin.close()
    await proc.wait()
    return elapsed


async def reattach_first_line(bridge: BridgeConnection, boot: str, cursor: int) -> tuple[float, int]:
    """Time (ms) from an attach's start to its first line; the cursor after it."""
    began = time.perf_counter()
    attachment = bridge.attach(boot, cursor, deadline_seconds=30)
    async with contextlib.aclosing(attachment.__aiter__()) as lines:
        async for _ in lines:
            break
    return (time.perf_counter() - began) * 1000, attachment.cursor


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=2000, help="lines per per-line run")
    parser.add_argument("--interval-ms", type=float, default=1.0, help="time between two lines of the program")
    parser.add_argument("--reattaches", type=int, default=30, help="reattach samples per kind")
    parser.add_argument("--max-seconds", type=float, default=60.0, help="stop sampling after this long")
    args = parser.parse_args()
    stop_at = time.monotonic() + args.max_seconds
    interval = args.interval_ms / 1000
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "program.py"
        script.write_text(PROGRAM)
        command = [sys.executable, str(script)]
        data = Path(tmp) / "data"
        bridge = await find_or_start(data, SESSION, command, idle_seconds=300)
        try:
            boot = await bridge.start()
            # Reattach: the program writes one line while nobody is attached, then a slice reads on.
            warm, cold, fresh = [], [], []
            cursor = 0
            for _ in range(args.reattaches):
                if time.monotonic() > stop_at:
                    break
                await bridge.send({"type": "start", "n": 1}, boot)
                await _until_written(bridge, cursor + 1)
                ms, cursor = await reattach_first_line(bridge, boot, cursor)
                warm.append(ms)
                await bridge.send({"type": "start", "n": 1}, boot)
                await _until_written(bridge, cursor + 1)
                began = time.perf_counter()
                client = find(data, SESSION)  # a new slice process: the registry, a new connection
                assert client is not None
                _, cursor = await reattach_first_line(client, boot, cursor)
                cold.append((time.perf_counter() - began) * 1000)
                await client.aclose()
                fresh.append(await fresh_process_first_line(command))
            # Per-line overhead: the same turn through a direct pipe and through the bridge, in turns.
            direct, bridged = [], []
            status = await bridge.status()
            cursor = status["cursor"]
            for _ in range(3):
                if time.monotonic() > stop_at and direct:
                    break
                direct += await direct_pipe(command, args.lines, interval)
                bridged += await through_bridge(bridge, boot, cursor, args.lines, interval)
                cursor = (await bridge.status())["cursor"]
        finally:
            await bridge.destroy()
            await bridge.aclose()
    print(f"# Persistent sessions: the bridge ({machine()})\n")
    print(table(
        ["first line after a reattach", "median ms", "p99 ms", "samples"],
        [
            ["bridge, warm connection", median(warm), pct(warm, 0.99), len(warm)],
            ["bridge, new client (registry lookup + connect)", median(cold), pct(cold, 0.99), len(cold)],
            ["slice mode: a fresh program process", median(fresh), pct(fresh, 0.99), len(fresh)],
        ],
    ))  # fmt: skip
    print()
    print(table(
        ["per-line latency (write -> receipt)", "median ms", "p99 ms", "lines"],
        [
            ["direct pipe", median(direct), pct(direct, 0.99), len(direct)],
            ["through the bridge", median(bridged), pct(bridged, 0.99), len(bridged)],
            ["overhead of the bridge", median(bridged) - median(direct), pct(bridged, 0.99) - pct(direct, 0.99), ""],
        ],
    ))  # fmt: skip


async def _until_written(bridge: BridgeConnection, count: int) -> None:
    """Wait until the bridge has logged ``count`` lines of the boot (the program wrote them)."""
    while (await bridge.status())["cursor"] < count:
        await asyncio.sleep(0.001)


if __name__ == "__main__":
    asyncio.run(main())
