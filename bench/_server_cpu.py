"""Where a kit server process spends its CPU under load (``first_chunk.py``'s concurrent runs; issue 20).

Cheap enough to stay on in the benchmark's normal run:

* **CPU seconds** of the process and of each of its threads (``/proc/self/task/<tid>/stat``): the
  event loop's thread (the main one, which uvicorn runs the loop in) apart from the worker threads
  (``asyncio.to_thread``: the file log's appends and reads, SQLite);
* **a sampling profiler**: a thread that looks at every other thread's Python stack every
  :data:`INTERVAL` seconds (``sys._current_frames``) and counts each sample under a stage
  (:func:`loop_stage`, :func:`worker_stage`). About 1 % of a core at 200 samples/s.

:func:`instrument` wraps the server's ASGI app so that ``GET`` :data:`PATH` answers both as JSON;
the benchmark reads it before and after a load (:func:`sample`) and :func:`breakdown` turns the
difference into CPU per chunk by stage. :func:`profiled` runs the server under ``cProfile`` instead
(``first_chunk.py --profile``: a separate run, as it slows the server about twice).
"""

from __future__ import annotations

import contextlib
import cProfile
import json
import os
import pstats
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import httpx

PATH = "/_bench/cpu"
INTERVAL = 0.005
IDLE = "idle (waiting in select)"
HOPS = "event loop: scheduling tasks, thread hand-offs"

# The loop thread's stages, by the innermost frame that belongs to one (module prefix -> stage).
_LOOP_MODULES = (
    ("durable_harness.models", "model client: its SSE read and parsed (httpx, json)"),
    ("durable_harness.protocol.sse", "model client: its SSE read and parsed (httpx, json)"),
    ("httpcore", "model client: its SSE read and parsed (httpx, json)"),
    ("httpx", "model client: its SSE read and parsed (httpx, json)"),
    ("durable_harness.agent", "harness: the agent loop, parts of the model call"),
    ("durable_harness.harness", "harness: the agent loop, parts of the model call"),
    ("durable_harness.runner", "runner + group commit: translate, encode, buffer"),
    ("durable_harness.protocol", "runner + group commit: translate, encode, buffer"),
    ("durable_harness.chunks", "runner + group commit: translate, encode, buffer"),
    ("durable_harness.server.notifier", "commit signal: wake the followers"),
    ("durable_harness.server", "followers + SSE edge (service.follow, app._pump)"),
    ("uvicorn", "uvicorn: HTTP framing of the responses (h11), requests"),
)
_SOCKET = "socket writes and reads (asyncio transports)"


def _module(frame: FrameType) -> str:
    return str(frame.f_globals.get("__name__", ""))


def loop_stage(frame: FrameType) -> str:
    """The stage of the event loop thread's sample whose innermost frame is ``frame``."""
    module, name = _module(frame), frame.f_code.co_name
    if module == "selectors" and name == "select":
        return IDLE
    if module == "asyncio.selector_events" and name in ("write", "_write_ready", "_read_ready__data_received",
                                                        "_read_ready", "_read_ready__get_buffer"):  # fmt: skip
        return _SOCKET
    if module.startswith(("asyncio", "concurrent.futures", "threading", "queue", "contextvars")):
        return HOPS
    at: FrameType | None = frame
    while at is not None:
        module = _module(at)
        for prefix, stage in _LOOP_MODULES:
            if module.startswith(prefix):
                return stage
        at = at.f_back
    return "other (the rest of the loop's Python)"


def worker_stage(frame: FrameType) -> str | None:
    """The stage of a worker thread's sample: the outermost library function it runs (what was
    handed to ``asyncio.to_thread``); None when it waits for work."""
    module = _module(frame)
    if module in ("threading", "queue") or (module, frame.f_code.co_name) == ("concurrent.futures.thread", "_worker"):
        return None
    outermost = None
    at: FrameType | None = frame
    while at is not None:
        if _module(at).startswith("durable_harness"):
            outermost = at
        at = at.f_back
    if outermost is None:
        return "other (no library frame)"
    return f"{outermost.f_code.co_qualname} ({_module(outermost).removeprefix('durable_harness.')})"


class Sampler:
    """Counts every other thread's stack, one sample per :data:`INTERVAL`, by stage."""

    def __init__(self) -> None:
        self.loop: Counter[str] = Counter()
        self.functions: Counter[str] = Counter()  # the loop's innermost functions (busy samples)
        self.workers: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        main, me = threading.main_thread().ident, threading.get_ident()
        while not self._stop.wait(INTERVAL):
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                if ident == main:
                    stage = loop_stage(frame)
                    self.loop[stage] += 1
                    if stage != IDLE:
                        self.functions[f"{frame.f_code.co_qualname} ({_module(frame)})"] += 1
                elif (stage := worker_stage(frame)) is not None:
                    self.workers[stage] += 1

    def close(self) -> None:
        """Stop sampling."""
        self._stop.set()
        self._thread.join()


def thread_cpu() -> dict[int, float]:
    """CPU seconds (user + system) of each thread of this process, by native thread id."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):  # a thread that just ended
            fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
            out[int(tid)] = (int(fields[11]) + int(fields[12])) / tick
    return out


def instrument(app: Any, sampler: Sampler) -> Any:
    """``app`` with ``GET`` :data:`PATH` answered with the process's CPU and the sampler's counts."""

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != PATH:
            await app(scope, receive, send)
            return
        threads = thread_cpu()
        loop = threads.pop(threading.main_thread().native_id or os.getpid(), 0.0)
        # dict() copies in one step (the sampler's thread goes on counting meanwhile)
        samples = {"loop": dict(sampler.loop), "functions": dict(sampler.functions), "workers": dict(sampler.workers)}
        body = json.dumps({"process": time.process_time(), "loop": loop, "workers": sum(threads.values()),
                           "samples": samples}).encode()  # fmt: skip
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})

    return wrapped


@contextlib.contextmanager
def profiled(path: str | None) -> Iterator[None]:
    """Run the block under ``cProfile`` (the calling thread: the event loop's) and write its stats
    to ``path``; nothing when ``path`` is None."""
    if not path:
        yield
        return
    profile = cProfile.Profile()
    profile.enable()
    try:
        yield
    finally:
        profile.disable()
        profile.dump_stats(path)


def print_profile(path: str, top: int = 15) -> None:
    """The ``top`` functions of a :func:`profiled` run by their own time, and by cumulative time."""
    for key in ("tottime", "cumulative"):
        print(f"\ncProfile of the kit server's event loop thread ({path}), top {top} by {key}:")
        pstats.Stats(path, stream=sys.stdout).sort_stats(key).print_stats(top)


# --- the benchmark's side -------------------------------------------------------------------------


def machine_busy() -> float:
    """CPU seconds the whole machine spent busy so far (all cores; ``/proc/stat``)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")  # minus idle and iowait


def sample(url: str) -> dict[str, Any]:
    """What the server at ``url`` says of its CPU, with the machine's and this process's CPU."""
    out: dict[str, Any] = httpx.get(url + PATH, timeout=30).json()
    times = os.times()
    out["client"], out["machine"] = times.user + times.system, machine_busy()
    return out


def breakdown(before: dict[str, Any], after: dict[str, Any], chunks: int, seconds: float) -> dict[str, Any]:
    """The CPU between two :func:`sample` s of one server over a load that relayed ``chunks`` in
    ``seconds``: cores used (process, loop thread, worker threads, this client, the machine) and
    per stage its share of the loop's busy samples and its µs of CPU per chunk."""
    cpu = {k: after[k] - before[k] for k in ("process", "loop", "workers", "client", "machine")}
    cores = {k: v / seconds for k, v in cpu.items()}
    counts = {k: Counter(after["samples"][k]) - Counter(before["samples"][k]) for k in after["samples"]}
    busy = sum(n for stage, n in counts["loop"].items() if stage != IDLE)
    total = busy + counts["loop"].get(IDLE, 0)
    loop = [(stage, n / busy, cpu["loop"] * n / busy / chunks * 1e6) for stage, n in counts["loop"].most_common()
            if stage != IDLE and busy]  # fmt: skip
    wsum = sum(counts["workers"].values())
    workers = [(stage, n / wsum, cpu["workers"] * n / wsum / chunks * 1e6)
               for stage, n in counts["workers"].most_common(4) if wsum]  # fmt: skip
    functions = [(name, n / busy) for name, n in counts["functions"].most_common(5) if busy]
    return {"cpu": cpu, "cores": cores, "per_chunk_us": cpu["process"] / chunks * 1e6, "loop": loop,
            "workers": workers, "functions": functions, "idle": counts["loop"].get(IDLE, 0) / total if total else 0.0,
            "samples": total}  # fmt: skip


def cpu_summary(b: dict[str, Any], top: int = 4) -> str:
    """One line of :func:`breakdown`'s figures, for a ``why``: the cores used, and the ``top`` stages
    of the loop with the two of the worker threads (none with ``top=0``)."""
    c = b["cores"]
    loop = ", ".join(f"{stage} {share:.0%} ({us:.0f} µs)" for stage, share, us in b["loop"][:top])
    workers = ", ".join(f"{stage} {us:.0f} µs" for stage, _, us in b["workers"][:2])
    used = (f"the server process used {c['process']:.2f} cores ({b['per_chunk_us']:.0f} µs of CPU per chunk): its "
            f"event loop thread {c['loop']:.2f} of a core ({b['idle']:.0%} of its samples idle in select), worker "
            f"threads {c['workers']:.2f}; the machine {c['machine']:.2f} of {os.cpu_count()} cores (this client "
            f"{c['client']:.2f})")  # fmt: skip
    if not top:
        return used
    functions = ", ".join(f"{name} {share:.0%}" for name, share in b["functions"][:3])
    return (f"{used}. The loop's busy samples (not in select; waits for the GIL or a core included), with their CPU "
            f"per chunk: {loop}; its busiest innermost functions: {functions}; worker threads: {workers}")  # fmt: skip


def cpu_table(b: dict[str, Any]) -> list[list[Any]]:
    """Rows (where, stage, share, µs of CPU per chunk) of :func:`breakdown`'s figures."""
    rows: list[list[Any]] = [["event loop", stage, f"{share:.0%}", us] for stage, share, us in b["loop"]]
    rows += [["worker threads", stage, f"{share:.0%}", us] for stage, share, us in b["workers"]]
    return rows
