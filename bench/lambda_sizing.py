"""Lambda sizing: the CPU the deployed wiring needs while it streams, and what each memory size gives.

Lambda gives a function CPU in proportion to its memory (1,769 MB = one vCPU), and bills GB-seconds
for as long as it runs, so the chat and slice functions, which run for the whole stream, cost in
proportion to their memory. Their CPU-heavy moments are the cold start (which runs in the init
phase, where Lambda gives burst CPU whatever the memory) and short bursts (a request, a flush);
between them they wait on the model and on storage. This script measures that CPU.

One process runs the deployed wiring under moto (relay_latency.py's: the chat app over HTTP on
loopback, the real S3 log and DynamoDB store, 100 ms flush and poll, a slice runner on its own
clients) and streams one turn from a paced model. Measured, with moto's own work (the AWS side,
timed inside moto's request hook) and the HTTP client's (the browser's) taken out:

* CPU per second of streaming, both functions together: an upper bound for either;
* CPU from the POST to the first text delta: the burst a new turn costs (both functions);

and, for each memory size, the share of a vCPU it buys, how much of it streaming uses, how long
the burst takes at that share, and the GB-s price of a 24.3 s stream (the 10-step, 2,000-chunk run
of storage_cost.py).

    .venv/bin/python bench/lambda_sizing.py [--deltas 300] [--rate 100] [--turns 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from typing import Any

import httpx
from _common import PRICES, MotoAws, machine, serve, table
from relay_latency import EMITTED, deployed_app, paced_model

FULL_VCPU_MB = 1769  # Lambda: "at 1,769 MB, a function has the equivalent of one vCPU"
RUN_SECONDS = 24.3  # the 10-step, 2,000-chunk run at 100 deltas/s (storage_cost.py)
MEMORY_SIZES = (256, 512, 1024, 1769)


class MotoMeter:
    """CPU time spent inside moto (the AWS side, which Lambda does not run), by thread CPU clocks."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._lock = threading.Lock()

    def __enter__(self) -> MotoMeter:
        from moto.core.botocore_stubber import BotocoreStubber

        self._cls, self._original = BotocoreStubber, BotocoreStubber.process_request
        meter, original = self, self._original

        def process_request(stub: Any, request: Any) -> Any:
            t0 = time.thread_time()
            try:
                return original(stub, request)
            finally:
                with meter._lock:
                    meter.seconds += time.thread_time() - t0

        BotocoreStubber.process_request = process_request  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        self._cls.process_request = self._original  # type: ignore[method-assign]


def turn(client: httpx.Client, url: str, tag: str, moto: MotoMeter) -> dict[str, float]:
    """One turn; the harness's CPU (process minus moto minus this client thread) in total and to the first delta."""
    body = json.dumps({"messages": [{"id": "u", "role": "user", "parts": [{"type": "text", "text": tag}]}]})
    p0, m0, c0, t0 = time.process_time(), moto.seconds, time.thread_time(), time.perf_counter()
    burst = None
    with client.stream("POST", f"{url}/api/chat", content=body, timeout=120) as response:
        for raw in response.iter_raw():
            if burst is None and b'"text-delta"' in raw:
                burst = (time.process_time() - p0) - (moto.seconds - m0) - (time.thread_time() - c0)
    wall = time.perf_counter() - t0
    cpu = (time.process_time() - p0) - (moto.seconds - m0) - (time.thread_time() - c0)
    return {"cpu": cpu, "wall": wall, "burst": burst if burst is not None else float("nan"),
            "moto": moto.seconds - m0}  # fmt: skip


def main() -> None:
    """Measure and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--deltas", type=int, default=300, help="text deltas per turn")
    parser.add_argument("--rate", type=float, default=100.0, help="deltas per second")
    parser.add_argument("--turns", type=int, default=3, help="measured turns (after one warm-up turn)")
    args = parser.parse_args()
    model = paced_model(args.deltas, 1 / args.rate)
    results = []
    with MotoAws() as aws, MotoMeter() as moto, \
            serve(deployed_app(model, aws, poll_seconds=0.1), server="httpd") as url, \
            httpx.Client() as client:  # fmt: skip
        for i in range(args.turns + 1):
            r = turn(client, url, f"t{i}", moto)
            if i:
                results.append(r)
            EMITTED.clear()
    per_s = statistics.median(r["cpu"] / r["wall"] for r in results) * 1000
    burst = statistics.median(r["burst"] for r in results) * 1000
    moto_s = statistics.median(r["moto"] / r["wall"] for r in results) * 1000
    wall = statistics.median(r["wall"] for r in results)

    print(f"lambda_sizing: {machine()}")
    print(f"deployed wiring under moto, {args.turns} turns of {args.deltas} deltas at {args.rate:.0f}/s "
          f"({wall:.1f} s each), 100 ms flush and poll\n")  # fmt: skip
    print(f"harness CPU while streaming (chat + slice together): {per_s:.1f} ms per second "
          f"(moto's AWS side, excluded: {moto_s:.1f} ms/s)")  # fmt: skip
    print(f"harness CPU from the POST to the first text delta (chat + slice together): {burst:.1f} ms\n")
    rows = []
    for mb in MEMORY_SIZES:
        share = mb / FULL_VCPU_MB
        dollars = mb / 1024 * RUN_SECONDS * PRICES["lambda_gb_s_arm64"]
        rows.append([mb, f"{share:.2f}", f"{per_s / (share * 1000):.1%}", burst / share, f"${dollars:.6f}"])
    print(table(["memory MB", "vCPU share", "streaming uses (upper bound)", "first-delta burst ms at that share",
                 f"GB-s price of one function over a {RUN_SECONDS} s stream"], rows))  # fmt: skip
    print("\n(the burst ms assume the whole burst ran at the function's share; the cold start itself runs in the "
          "init phase, with burst CPU whatever the memory)")  # fmt: skip


if __name__ == "__main__":
    main()
