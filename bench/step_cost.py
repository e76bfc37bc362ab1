"""The step boundary: durable overhead per step, DynamoDB writes per step, and CPU as history grows.

The model is the paced OpenAI-compatible server (``_paced_model.py``) in its own process, read by
the kit's own client (``OpenAIChatModel``) over loopback HTTP; the in-process scripted model is
kept as a second row. Each turn is a tool loop: every step streams text deltas and calls
``lookup`` (a ~200-byte result), the last one answers.

1. **Overhead per step** (issue 20): the same turn run in memory (``agent.generate()``, nothing
   durable) and durably, on the local kit's storage (SQLite + file log, 10 ms group commit,
   burst 2, as ``build_local_kit``; one store and log for all the turns, as a server keeps them)
   and on the DynamoDB adapters under moto (70 ms group commit, the deployed chat function's); every
   turn on one event loop; ABBA-interleaved rounds; (durable - memory) / steps. Where it
   goes: the time inside storage calls per step (each store/log method timed), the rest, and the
   storage round trips per step. DynamoDB write units per step are computed from the item sizes
   as DynamoDB bills them (``RequestMeter``: 1 KB units, transactions twice).
2. **CPU per step as history grows**: one long durable turn on the local kit (one delta per step,
   as fast as the model answers) with the process's CPU time taken at each model call; step
   1,000 against step 100 (means of the 10 steps around each), apart from encoding the model
   request (``request_content``: the body and its JSON, timed separately). The run is bounded by ``--long-seconds``:
   if it does not reach step 1,000 the ratio at the last step reached is given and the target
   is MISSED (not reached).

    .venv/bin/python bench/step_cost.py [--steps 20] [--deltas 20] [--rounds 3] [--long-steps 1000]
                                        [--long-seconds 75]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import itertools
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import MotoAws, RequestMeter, busy_ms, lookup_tool, machine, median, scripted_tool_agent, table, user_turn
from _paced_model import model_name, paced_server
from _targets import (
    STEP_CPU_EARLY,
    STEP_CPU_LATE,
    STEP_CPU_RATIO,
    STEP_OVERHEAD_LOCAL_MS,
    STEP_ROUND_TRIPS,
    STEP_WRU,
    report,
)
from durable_harness import ToolLoopAgent, step_count_is
from durable_harness.models.openai import OpenAIChatModel
from durable_harness.runner.runner import Runner
from durable_harness.storage.files import FileChunkLog
from durable_harness.storage.sqlite import SqliteCheckpointStore

DEPLOYED_FLUSH = 0.07  # functions/chat/app.py's STREAM_FLUSH_SECONDS default


class TimedModel(OpenAIChatModel):
    """The kit's OpenAI client, noting the process CPU time at each call and the encoding's CPU."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[float] = []  # process_time() as each model call starts
        self.encoding: list[float] = []  # CPU seconds to encode each request (body + JSON)

    def request_content(self, request: Any) -> bytes:
        """Encode as the client does (the body and its JSON, sent as it is), timing it."""
        began = time.process_time()
        content = super().request_content(request)
        self.encoding.append(time.process_time() - began)
        return content

    async def stream(self, request: Any) -> Any:
        """Note the CPU clock, then stream as the client does."""
        self.calls.append(time.process_time())
        async for part in super().stream(request):
            yield part


def http_agent(url: str, steps: int, deltas: int, rate: float) -> ToolLoopAgent:
    """The tool-loop agent on the paced HTTP model: ``steps`` model calls, all but the last calling ``lookup``."""
    model = TimedModel(model_name(deltas=deltas, rate=rate, tools=steps - 1), base_url=url, api_key="bench")
    return ToolLoopAgent(model=model, tools=[lookup_tool(200)], stop_when=[step_count_is(steps)])


class StorageTimer:
    """Wraps every public method of storage objects (on the instances) to sum the time spent in them."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls: Counter[str] = Counter()

    def attach(self, obj: Any, name: str) -> Any:
        """Time ``obj``'s public methods; returns ``obj``."""
        for attr in dir(type(obj)):
            fn = getattr(obj, attr, None)
            if attr.startswith("_") or not callable(fn) or isinstance(getattr(type(obj), attr, None), property):
                continue
            setattr(obj, attr, self._wrap(fn, f"{name}.{attr}"))
        return obj

    def _wrap(self, fn: Callable[..., Any], label: str) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(fn):

            async def timed_async(*args: Any, **kwargs: Any) -> Any:
                began = time.perf_counter()
                try:
                    return await fn(*args, **kwargs)
                finally:
                    self.seconds += time.perf_counter() - began
                    self.calls[label] += 1

            return timed_async

        def timed(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - began
                self.calls[label] += 1

        return timed


async def drive(runner: Runner, messages: list[Any]) -> Any:
    """Create a run and drive it to its end in one slice."""
    run_id = runner.create_run(messages).run_id
    while True:
        state = await runner.run_slice(run_id, budget_seconds=None)
        if state.terminal:
            return state


class Arms:
    """The arms of the overhead comparison, each measured turn appended to :attr:`seconds`."""

    def __init__(self, make_agent: Callable[[], Any], aws: MotoAws, root: Path) -> None:
        self.make_agent, self.aws, self.root = make_agent, aws, root
        self.seconds: dict[str, list[float]] = {"memory": [], "local": [], "dynamodb": []}
        self.cpu: dict[str, list[float]] = {k: [] for k in self.seconds}
        self.storage: dict[str, list[float]] = {"local": [], "dynamodb": []}
        self.calls: dict[str, Counter[str]] = {"local": Counter(), "dynamodb": Counter()}
        self.meter = RequestMeter()
        self.turns = 0
        # As a server runs: one event loop (and its worker threads) and one local store and log for
        # every turn, so a turn's figures hold no database creation, connection or thread start.
        self.loop = asyncio.Runner()
        self.local_timer = StorageTimer()
        self.local_store = self.local_timer.attach(SqliteCheckpointStore(root / "runs.sqlite3"), "store")
        self.local_log = self.local_timer.attach(FileChunkLog(root / "chunks"), "log")

    def run(self, arm: str, counted: bool) -> None:
        """One turn of ``arm``."""
        agent = self.make_agent()
        timer = StorageTimer()
        if arm == "memory":
            coro: Any = agent.generate(messages=user_turn())
        elif arm == "local":
            timer = self.local_timer
            timer.seconds, timer.calls = 0.0, Counter()
            runner = Runner(agent, self.local_store, self.local_log, flush_interval=0.01, flush_burst=2)
            coro = drive(runner, user_turn())
        else:
            ddb, s3 = self.aws.clients(meter=self.meter if counted else None)
            store = timer.attach(self.aws.store(ddb, s3), "store")
            log = timer.attach(self.aws.log(ddb, s3), "log")
            coro = drive(Runner(agent, store, log, flush_interval=DEPLOYED_FLUSH), user_turn())
        began, cpu = time.perf_counter(), time.process_time()
        self.loop.run(coro)
        if counted:
            self.seconds[arm].append(time.perf_counter() - began)
            self.cpu[arm].append(time.process_time() - cpu)
            if arm != "memory":
                self.storage[arm].append(timer.seconds)
                self.calls[arm].update(timer.calls)
            self.turns += arm == "dynamodb"


def overhead(name: str, make_agent: Callable[[], Any], steps: int, rounds: int) -> dict[str, Any]:
    """ABBA rounds of memory / local / DynamoDB turns; the per-step figures."""
    order = ["memory", "local", "dynamodb"]
    with MotoAws() as aws, tempfile.TemporaryDirectory() as tmp:
        arms = Arms(make_agent, aws, Path(tmp))
        for arm in order:  # warm-up: imports, connections, moto's first requests
            arms.run(arm, counted=False)
        for r in range(rounds):
            for arm in order if r % 2 == 0 else order[::-1]:
                arms.run(arm, counted=True)
        arms.loop.close()
        requests = list(arms.meter.requests)
    base = median(arms.seconds["memory"])
    out: dict[str, Any] = {"name": name, "memory_ms": base * 1000 / steps}
    for arm in ("local", "dynamodb"):
        total = median(arms.seconds[arm])
        out[arm] = {
            "per_step_ms": total * 1000 / steps,
            "added_ms": (total - base) * 1000 / steps,
            "cpu_added_ms": (median(arms.cpu[arm]) - median(arms.cpu["memory"])) * 1000 / steps,
            "storage_ms": median(arms.storage[arm]) * 1000 / steps,
            "calls": {k: v / (rounds * steps) for k, v in arms.calls[arm].most_common()},
        }
    turns = max(1, arms.turns)
    ops = Counter(r.op for r in requests)
    out["dynamodb"]["round_trips"] = len(requests) / turns / steps
    out["dynamodb"]["ops"] = {op: n / turns / steps for op, n in ops.most_common()}
    out["dynamodb"]["wru"] = sum(r.wru for r in requests) / turns / steps
    out["dynamodb"]["wru_by_op"] = {op: sum(r.wru for r in requests if r.op == op) / turns / steps for op in ops}
    out["dynamodb"]["bytes"] = sum(r.written for r in requests) / turns / steps
    out["dynamodb"]["aws_ms"] = busy_ms(requests, set(ops)) / turns / steps
    return out


def long_run(url: str, steps: int, seconds: float) -> dict[str, Any]:
    """One long durable turn on the local kit, stopped after ``seconds``; CPU per step by step."""
    agent = http_agent(url, steps, 1, 0)
    model: TimedModel = agent.model  # type: ignore[assignment]
    with tempfile.TemporaryDirectory() as tmp:
        runner = Runner(agent, SqliteCheckpointStore(Path(tmp) / "runs.sqlite3"), FileChunkLog(Path(tmp) / "chunks"),
                        flush_interval=0.01, flush_burst=2)  # fmt: skip

        async def bounded() -> None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(drive(runner, user_turn()), seconds)

        began = time.perf_counter()
        asyncio.run(bounded())
        wall = time.perf_counter() - began
    calls, enc = model.calls, model.encoding
    per_step = [b - a for a, b in itertools.pairwise(calls)]  # step k: call k to call k+1
    return {"reached": len(per_step), "wall": wall, "per_step": per_step, "encoding": enc[: len(per_step)]}


def window(values: list[float], step: int, half: int = 5) -> float:
    """The mean of ``values`` around 1-based ``step`` (``half`` on each side, within range)."""
    lo, hi = max(0, step - 1 - half), min(len(values), step - 1 + half)
    part = values[lo:hi]
    return sum(part) / len(part) if part else float("nan")


def main() -> None:
    """Measure and print; report the targets."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20, help="model calls per overhead turn")
    parser.add_argument("--deltas", type=int, default=20, help="text deltas per step")
    parser.add_argument("--rate", type=float, default=1000.0, help="deltas per second")
    parser.add_argument("--rounds", type=int, default=3, help="measured turns per arm (ABBA order)")
    parser.add_argument("--long-steps", type=int, default=STEP_CPU_LATE + 10)
    parser.add_argument("--long-seconds", type=float, default=75.0, help="bound on the long run")
    args = parser.parse_args()
    print(f"step_cost: {machine()}")
    with paced_server() as url:
        results = [
            overhead("HTTP model (paced server, loopback)",
                     lambda: http_agent(url, args.steps, args.deltas, args.rate), args.steps, args.rounds),
            overhead("in-process model",
                     lambda: scripted_tool_agent(steps=args.steps, deltas=args.deltas, rate=args.rate),
                     args.steps, args.rounds),
        ]  # fmt: skip
        long = long_run(url, args.long_steps, args.long_seconds)
    print(f"\n{args.steps}-step tool-loop turns, {args.deltas} deltas per step at {args.rate:g}/s, {args.rounds} "
          "measured turns per arm (ABBA), medians; per step:\n")  # fmt: skip
    rows = []
    for r in results:
        rows.append([r["name"], "in memory (generate)", r["memory_ms"], "", "", "", ""])
        for arm, label in (("local", "local kit (SQLite + files)"), ("dynamodb", "DynamoDB adapters (moto)")):
            a = r[arm]
            rows.append([r["name"], label, a["per_step_ms"], a["added_ms"], a["storage_ms"],
                         a["added_ms"] - a["storage_ms"], a["cpu_added_ms"]])  # fmt: skip
    print(table(["model", "arm", "ms/step", "added ms/step", "in storage calls (some overlap the stream)",
                 "elsewhere (waits, CPU)", "added CPU ms/step"], rows))  # fmt: skip
    http, inproc = results
    d = http["dynamodb"]
    print("\nstorage calls per step (HTTP model):")
    for arm in ("local", "dynamodb"):
        print(f"  {arm}: " + ", ".join(f"{k} {v:.2f}" for k, v in http[arm]["calls"].items()))
    print("(the DynamoDB arm's CPU includes moto's, which answers in this process)")
    print(
        f"DynamoDB requests per step: {d['round_trips']:.2f} ("
        + ", ".join(f"{op} {n:.2f}" for op, n in d["ops"].items())
        + f"); {d['aws_ms']:.1f} ms/step with a request in flight; WRU/step {d['wru']:.2f} ("
        + ", ".join(f"{op} {n:.2f}" for op, n in d["wru_by_op"].items() if n)
        + f"); {d['bytes']:,.0f} item bytes written per step"
    )

    per, enc, reached = long["per_step"], long["encoding"], long["reached"]
    late = min(STEP_CPU_LATE, reached)
    print(f"\nlong run (local kit, HTTP model, 1 delta per step): reached step {reached} in {long['wall']:.0f} s "
          f"(bound {args.long_seconds:g} s)")  # fmt: skip
    rows = []
    for step in sorted({10, STEP_CPU_EARLY, 250, 500, late} & set(range(1, reached + 1))):
        cpu, e = window(per, step) * 1000, window(enc, step) * 1000
        rows.append([step, cpu, e, cpu - e])
    print(table(["step", "kit CPU ms/step", "of it: encoding the model request", "without the encoding"], rows))

    local, local_in = http["local"], inproc["local"]
    why = (f"{local['storage_ms']:.2f} ms/step in storage calls, {local['added_ms'] - local['storage_ms']:.2f} ms "
           f"elsewhere (the step boundary's wait for the group commit's pacing, the kit's CPU: "
           f"+{local['cpu_added_ms']:.2f} ms CPU/step)")  # fmt: skip
    report("step.overhead.local", f"+{local['added_ms']:.2f} ms/step; {why}",
           local["added_ms"] <= STEP_OVERHEAD_LOCAL_MS)  # fmt: skip
    report("step.overhead.local_inprocess", f"+{local_in['added_ms']:.2f} ms/step",
           local_in["added_ms"] <= STEP_OVERHEAD_LOCAL_MS)  # fmt: skip
    report("step.overhead.dynamodb",
           f"+{d['added_ms']:.1f} ms/step, {d['round_trips']:.2f} round trips/step "
           f"({', '.join(f'{op} {n:.2f}' for op, n in d['ops'].items())}); {d['aws_ms']:.1f} ms in requests, "
           f"the rest waits for the {DEPLOYED_FLUSH * 1000:.0f} ms pacing; in-process model "
           f"+{inproc['dynamodb']['added_ms']:.1f} ms/step", d["round_trips"] <= STEP_ROUND_TRIPS)  # fmt: skip
    wru = ", ".join(f"{op} {n:.2f}" for op, n in d["wru_by_op"].items() if n)
    report("step.wru", f"{d['wru']:.2f} WRU/step ({wru})", d["wru"] <= STEP_WRU)  # fmt: skip
    early = window(per, STEP_CPU_EARLY) - window(enc, STEP_CPU_EARLY)
    later = window(per, late) - window(enc, late)
    ratio = later / early if early > 0 else float("inf")
    done = reached >= STEP_CPU_LATE
    report("step.cpu_flat",
           f"x{ratio:.2f} at step {late} ({later * 1000:.2f} vs {early * 1000:.2f} ms CPU/step at {STEP_CPU_EARLY}, "
           f"encoding apart: {window(enc, late) * 1000:.2f} vs {window(enc, STEP_CPU_EARLY) * 1000:.2f} ms)"
           + ("" if done else f"; step {STEP_CPU_LATE} not reached within {args.long_seconds:g} s"),
           done and ratio <= STEP_CPU_RATIO)  # fmt: skip


if __name__ == "__main__":
    main()
