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
   goes (``_step_probes.py``): the time in each store/log method per step; the wait in the step
   boundaries (``SliceProgress.defer``/``save``/``commit``) and what it is made of (the
   checkpoint's encoding, the storage calls, the thread hops); the event loop's and the worker
   threads' added CPU; against the floor, one SQLite commit and one file append made raw. Storage
   requests per step by operation and by the storage call that sent them; DynamoDB write units per
   step computed from the item sizes as DynamoDB bills them (``RequestMeter``: 1 KB units,
   transactions twice).
2. **CPU per step as history grows**: one long durable turn on the local kit (one delta per step,
   as fast as the model answers) with the process's CPU time taken at each model call; step
   1,000 against step 100 (means of the 10 steps around each), apart from encoding the model
   request (``request_content``: the body and its JSON, timed separately), stage by stage: each
   stage's own thread CPU per step (``StageClock``: the agent's state dump, the checkpoint's
   encoding, the store's delta and transaction, the log append, the translation to UI chunks and
   their JSON, the model client, garbage collection; the rest by difference), timed in the run
   itself. The run is bounded by ``--long-seconds``: short of step 1,000 it gives the last step's ratio, MISSED.

Every MISSED report says why: the figures of this run, stage by stage, and the structural cause
in the library's code.

    .venv/bin/python bench/step_cost.py [--steps 20] [--deltas 20] [--rounds 3] [--long-steps 1000]
                                        [--long-seconds 75]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import durable_harness.agent.loop as agent_loop
import durable_harness.checkpoints.base as checkpoints_base
import durable_harness.runner.tail as runner_tail
from _common import MotoAws, RequestMeter, busy_ms, lookup_tool, machine, median, scripted_tool_agent, table, user_turn
from _paced_model import model_name, paced_server
from _step_probes import Boundaries, HopMeter, Patches, StageClock, StorageTimer, floor_ms, tag_boundary_appends
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
from durable_harness.chunks.writer import SERVING_BURST
from durable_harness.models.openai import OpenAIChatModel
from durable_harness.protocol.translate import StreamTranslator
from durable_harness.runner.encoding import StateEncoder
from durable_harness.runner.runner import Runner
from durable_harness.storage.files import FileChunkLog
from durable_harness.storage.sqlite import SqliteCheckpointStore

DEPLOYED_FLUSH = 0.07  # functions/chat/app.py's STREAM_FLUSH_SECONDS default


MODEL_CLIENT = "model client: HTTP request, SSE parsing (encoding apart)"
ENCODING = "encoding the model request"
REST = "the rest: agent loop, runner, event loop (not timed apart)"


class TimedModel(OpenAIChatModel):
    """The kit's OpenAI client, noting the process CPU time at each call and the encoding's CPU;
    with a :class:`StageClock` (:attr:`clock`), its encoding and the rest of its work are stages."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[float] = []  # process_time() as each model call starts
        self.encoding: list[float] = []  # CPU seconds (this thread's) to encode each request (body + JSON)
        self.clock: StageClock | None = None

    def request_content(self, request: Any) -> bytes:
        """Encode as the client does (the body and its JSON, sent as it is), timing it."""
        began = time.thread_time()
        with self.clock.stage(ENCODING) if self.clock else contextlib.nullcontext():
            content = super().request_content(request)
        self.encoding.append(time.thread_time() - began)
        return content

    async def stream(self, request: Any) -> Any:
        """Note the CPU clock, then stream as the client does (its work timed as a stage)."""
        self.calls.append(time.process_time())
        parts = super().stream(request)
        try:
            while True:
                step = parts.__anext__()
                try:
                    part = await (self.clock.timed_await(step, MODEL_CLIENT) if self.clock else step)
                except StopAsyncIteration:
                    return
                yield part
        finally:
            await parts.aclose()


def http_agent(url: str, steps: int, deltas: int, rate: float) -> ToolLoopAgent:
    """The tool-loop agent on the paced HTTP model: ``steps`` model calls, all but the last calling ``lookup``."""
    model = TimedModel(model_name(deltas=deltas, rate=rate, tools=steps - 1), base_url=url, api_key="bench")
    return ToolLoopAgent(model=model, tools=[lookup_tool(200)], stop_when=[step_count_is(steps)])


async def drive(runner: Runner, messages: list[Any]) -> Any:
    """Create a run and drive it to its end in one slice."""
    run_id = runner.create_run(messages).run_id
    while True:
        state = await runner.run_slice(run_id, budget_seconds=None)
        if state.terminal:
            return state


class Arms:
    """The arms of the overhead comparison, each measured turn's figures appended to :attr:`turns`."""

    def __init__(self, make_agent: Callable[[], Any], aws: MotoAws, root: Path) -> None:
        self.make_agent, self.aws, self.root = make_agent, aws, root
        self.turns: dict[str, list[dict[str, Any]]] = {"memory": [], "local": [], "dynamodb": []}
        self.calls: dict[str, Counter[str]] = {"local": Counter(), "dynamodb": Counter()}
        self.meter = RequestMeter(label=StorageTimer.current)  # each request labelled by its storage call
        self.patches = Patches()
        tag_boundary_appends(self.patches)
        self.boundaries = Boundaries(self.patches)
        self.hops = HopMeter(self.patches, lambda: self.boundaries.active > 0)
        # As a server runs: one event loop (and its worker threads) and one local store and log for
        # every turn, so a turn's figures hold no database creation, connection or thread start.
        self.loop = asyncio.Runner()
        self.local_timer = StorageTimer()
        self.local_store = self.local_timer.attach(SqliteCheckpointStore(root / "runs.sqlite3"), "store")
        self.local_log = self.local_timer.attach(FileChunkLog(root / "chunks"), "log")

    def close(self) -> None:
        """Close the loop and put the probes' patches back."""
        self.loop.close()
        self.patches.restore()

    def run(self, arm: str, counted: bool) -> None:
        """One turn of ``arm``."""
        agent = self.make_agent()
        timer = StorageTimer()
        if arm == "memory":
            coro: Any = agent.generate(messages=user_turn())
        elif arm == "local":
            timer = self.local_timer
            runner = Runner(agent, self.local_store, self.local_log, flush_interval=0.01, flush_burst=SERVING_BURST)
            coro = drive(runner, user_turn())
        else:
            ddb, s3 = self.aws.clients(meter=self.meter if counted else None)
            store = timer.attach(self.aws.store(ddb, s3), "store")
            log = timer.attach(self.aws.log(ddb, s3), "log")
            coro = drive(Runner(agent, store, log, flush_interval=DEPLOYED_FLUSH, flush_burst=SERVING_BURST),
                         user_turn())  # fmt: skip
        timer.reset()
        self.hops.reset()
        self.boundaries.reset()
        loop_cpu = [0.0]

        async def on_loop() -> None:  # the event loop thread's CPU for the turn (the rest is worker threads')
            began = time.thread_time()
            try:
                await coro
            finally:
                loop_cpu[0] = time.thread_time() - began

        began, cpu = time.perf_counter(), time.process_time()
        self.loop.run(on_loop())
        if counted:
            turn = {"seconds": time.perf_counter() - began, "cpu": time.process_time() - cpu, "loop_cpu": loop_cpu[0],
                    "hops": self.hops.hops, "hop_s": self.hops.seconds, "hops_at": self.hops.hops_at,
                    "hop_at_s": self.hops.seconds_at, "storage": timer.total,
                    "by_call": dict(timer.seconds), "boundary": sum(self.boundaries.seconds.values()),
                    "boundaries": dict(self.boundaries.calls), "encoding": self.boundaries.encoding}  # fmt: skip
            self.turns[arm].append(turn)
            if arm != "memory":
                self.calls[arm].update(timer.calls)


def overhead(name: str, make_agent: Callable[[], Any], steps: int, rounds: int) -> dict[str, Any]:
    """ABBA rounds of memory / local / DynamoDB turns; the per-step figures."""
    order = ["memory", "local", "dynamodb"]
    with MotoAws() as aws, tempfile.TemporaryDirectory() as tmp:
        arms = Arms(make_agent, aws, Path(tmp))
        try:
            for arm in order:  # warm-up: imports, connections, moto's first requests
                arms.run(arm, counted=False)
            for r in range(rounds):
                for arm in order if r % 2 == 0 else order[::-1]:
                    arms.run(arm, counted=True)
        finally:
            arms.close()
        requests = list(arms.meter.requests)

    def med(arm: str, key: str) -> float:  # the median turn's figure, per step (ms for seconds)
        return median([t[key] for t in arms.turns[arm]]) / steps

    memory = {k: med("memory", k) * 1000 for k in ("seconds", "cpu", "loop_cpu")}
    out: dict[str, Any] = {"name": name, "memory_ms": memory["seconds"]}
    for arm in ("local", "dynamodb"):
        turns, n = arms.turns[arm], rounds * steps
        labels = sorted({k for t in turns for k in t["by_call"]})
        out[arm] = {
            "per_step_ms": med(arm, "seconds") * 1000,
            "added_ms": med(arm, "seconds") * 1000 - memory["seconds"],
            "cpu_added_ms": med(arm, "cpu") * 1000 - memory["cpu"],
            "loop_cpu_added_ms": med(arm, "loop_cpu") * 1000 - memory["loop_cpu"],
            "storage_ms": med(arm, "storage") * 1000,
            "by_call_ms": {k: median([t["by_call"].get(k, 0.0) for t in turns]) * 1000 / steps for k in labels},
            "calls": {k: v / n for k, v in arms.calls[arm].most_common()},
            "hops": (sum(t["hops"] for t in turns) - sum(t["hops"] for t in arms.turns["memory"])) / n,
            "hop_ms": med(arm, "hop_s") * 1000,
            "hops_at": sum(t["hops_at"] for t in turns) / n,
            "hop_at_ms": med(arm, "hop_at_s") * 1000,
            "boundary_ms": med(arm, "boundary") * 1000,
            "encoding_ms": med(arm, "encoding") * 1000,
            "boundaries": sum(sum(t["boundaries"].values()) for t in turns) / n,
        }
    turns = max(1, len(arms.turns["dynamodb"]))
    d = out["dynamodb"]
    ops = Counter(r.op for r in requests)
    d["round_trips"] = len(requests) / turns / steps
    d["ops"] = {op: n / turns / steps for op, n in ops.most_common()}
    d["wru"] = sum(r.wru for r in requests) / turns / steps
    d["wru_by_op"] = {op: sum(r.wru for r in requests if r.op == op) / turns / steps for op in ops}
    d["bytes"] = sum(r.written for r in requests) / turns / steps
    d["aws_ms"] = busy_ms(requests, set(ops)) / turns / steps
    # What each request was sent for: the storage call it was made in, and its operation.
    purpose = Counter((r.label or "(outside a storage call)", r.op) for r in requests)
    d["by_purpose"] = [
        {"call": call, "op": op, "n": k / turns / steps,
         "wru": sum(r.wru for r in requests if (r.label or "(outside a storage call)", r.op) == (call, op))
         / turns / steps}
        for (call, op), k in purpose.most_common()
    ]  # fmt: skip
    return out


# The stages of a step whose CPU the long run times (StageClock), besides the model client's.
STAGES: tuple[tuple[Any, str, str], ...] = (
    (agent_loop, "dump_state", "the loop's state dump (agent.calls.dump_state)"),
    (StateEncoder, "encode", "the checkpoint's text and value (runner.encoding.StateEncoder)"),
    (checkpoints_base, "plan_save", "store.save: the delta (checkpoints.records.plan_save)"),
    (SqliteCheckpointStore, "save", "store.save: the rest (SQLite transaction)"),
    (SqliteCheckpointStore, "version", "store.version (the fence read)"),
    (FileChunkLog, "append", "log.append (segment files)"),
    (StreamTranslator, "translate", "parts to UI chunks (protocol.translate)"),
    (runner_tail, "encode_ui_chunk", "UI chunks' JSON (encode_ui_chunk)"),
)


def long_run(url: str, steps: int, seconds: float) -> dict[str, Any]:
    """One long durable turn on the local kit, stopped after ``seconds``; CPU per step by step, by stage."""
    agent = http_agent(url, steps, 1, 0)
    model: TimedModel = agent.model  # type: ignore[assignment]
    patches = Patches()
    clock = model.clock = StageClock(patches, lambda: len(model.calls))
    for owner, attr, label in STAGES:
        clock.wrap(owner, attr, label)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            runner = Runner(agent, SqliteCheckpointStore(Path(tmp) / "runs.sqlite3"),
                            FileChunkLog(Path(tmp) / "chunks"), flush_interval=0.01, flush_burst=2)  # fmt: skip

            async def bounded() -> None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(drive(runner, user_turn()), seconds)

            began = time.perf_counter()
            asyncio.run(bounded())
            wall = time.perf_counter() - began
    finally:
        clock.close()
        patches.restore()
    calls, enc = model.calls, model.encoding
    per_step = [b - a for a, b in itertools.pairwise(calls)]  # step k: call k to call k+1
    reached = len(per_step)
    stages = {label: clock.per_step(label, reached) for label in clock.cpu}
    timed = [sum(values) for values in zip(*stages.values(), strict=True)] if stages else [0.0] * reached
    stages[REST] = [total - part for total, part in zip(per_step, timed, strict=True)]
    counts = {label: [float(clock.calls[label].get(k, 0)) for k in range(1, reached + 1)] for label in clock.calls}
    return {"reached": reached, "wall": wall, "per_step": per_step, "encoding": enc[:reached], "stages": stages,
            "stage_calls": counts}  # fmt: skip


def window(values: list[float], step: int, half: int = 5) -> float:
    """The mean of ``values`` around 1-based ``step`` (``half`` on each side, within range)."""
    lo, hi = max(0, step - 1 - half), min(len(values), step - 1 + half)
    part = values[lo:hi]
    return sum(part) / len(part) if part else float("nan")


# The structural causes, verified in the library's code (the figures are the run's own).
LOCAL_CAUSE = (
    "Cause: a tool step crosses two boundaries, each one worker-thread trip with a chunk-log append and then a "
    "store call (ChunkWriter.flush_then, which urges the flush: no boundary waits for the group commit's pacing): "
    "SliceProgress.defer's fence read (store.version) after the model call, in place of its held checkpoint, and "
    "SliceProgress.save's checkpoint (store.save: one SQLite transaction, record and head) after the tool; the "
    "floor is one such trip, so 2 ms needs one boundary per step and less durable CPU per step."
)
DDB_CAUSE = (
    "Cause: a tool step's two boundaries are each a flush PutItem and a store call (ChunkWriter.flush_then): "
    "SliceProgress.defer's GetItem fence read (DynamoCheckpointStore.version) before the tool runs and "
    "SliceProgress.save's TransactWriteItems (record Put + the head's conditional Update, HeadTable.write) after "
    "it; a save redesign (one conditional PutItem of a record keyed by version as the fence, the step's last "
    "flush folded in) makes a tool step 2 requests, and <= 1 also needs the pre-tool fence check (D5: a claim "
    "alone stops the slice before its next tool) made without a request of its own."
)
WRU_CAUSE = (
    "Cause: DynamoCheckpointStore._write saves through HeadTable.write as a transaction (record Put + head "
    "Update: 2 WRU per KB of each item) and the step's chunks are PutItems of their own (two flushes per tool "
    "step, >= 1 WRU each); <= 2 needs the save redesign: one non-transactional conditional PutItem per step, the "
    "record keyed by version as the fence, with the step's last flush folded in."
)
CPU_CAUSE = (
    "Cause (a windowed cProfile of the long run, run apart, agrees: str.join, socket send, leading, gc grow): each "
    "checkpoint still makes O(history) passes, C-speed but over the whole run: StateEncoder.encode joins the whole "
    "state's JSON text though the store writes only a delta, twice per tool step (SliceProgress.defer's held "
    "snapshot and save), dump_state's _reuse copies and identity-scans the message list, plan_save's diff scans "
    "every history list, and the model client sends the whole body; flat needs checkpoints built from what the "
    "step appended only (the text assembled lazily, history lists extended in place)."
)


AT_BOUNDARY = ("log.append (at a boundary)", "store.version", "store.save")  # the storage calls a boundary waits for


def by_call(a: dict[str, Any], only: Any = None) -> str:
    """An arm's time in each storage call per step (those in ``only``, if given), the slowest first."""
    rows = sorted(a["by_call_ms"].items(), key=lambda kv: -kv[1])
    return ", ".join(f"{k} {v:.2f} ms ({a['calls'].get(k, 0):.2f}/step)" for k, v in rows
                     if v >= 0.005 and (only is None or k in only))  # fmt: skip


def boundary_split(a: dict[str, Any]) -> str:
    """What an arm's wait in its step boundaries is made of, per step, from the run's figures."""
    inside = sum(v for k, v in a["by_call_ms"].items() if k in AT_BOUNDARY)
    rest = a["boundary_ms"] - a["encoding_ms"] - inside - a["hop_at_ms"]
    return (f"{a['boundary_ms']:.2f} ms waiting in {a['boundaries']:.2f} step boundaries/step "
            f"(SliceProgress.defer/save/commit): the checkpoint's encoding {a['encoding_ms']:.2f}, storage calls "
            f"{inside:.2f} ({by_call(a, AT_BOUNDARY)}), {a['hops_at']:.2f} thread hops {a['hop_at_ms']:.2f} beyond "
            f"their calls, {rest:.2f} else (an append in flight, the GIL, the loop)")  # fmt: skip


def local_why(a: dict[str, Any], floor: float) -> str:
    """Where a local arm's added time goes, from the run's figures, and why."""
    limit = STEP_OVERHEAD_LOCAL_MS
    paced = sum(v for k, v in a["by_call_ms"].items() if k not in AT_BOUNDARY)
    return (f"{a['added_ms']:+.2f} ms/step = {boundary_split(a)} [{a['boundary_ms'] / limit:.0%} of the {limit:g} ms "
            f"by themselves], and {a['added_ms'] - a['boundary_ms']:.2f} ms outside them, the event loop's work for "
            f"the stream (its added CPU, boundaries included: +{a['loop_cpu_added_ms']:.2f} ms/step; the worker "
            f"threads' +{a['cpu_added_ms'] - a['loop_cpu_added_ms']:.2f}, with {paced:.2f} ms/step in the other "
            f"storage calls: {by_call(a, set(a['by_call_ms']) - set(AT_BOUNDARY)) or 'none'}). Floor (one SQLite "
            f"commit + one file append, raw): {floor:.3f} ms. {LOCAL_CAUSE}")  # fmt: skip


def purposes(d: dict[str, Any], key: str) -> str:
    """The DynamoDB arm's requests (``n``) or WRU (``wru``) per step, by storage call and operation."""
    return ", ".join(f"{p['call']} {p['op']} {p[key]:.2f}" for p in d["by_purpose"] if p[key] >= 0.005)


def per_request(d: dict[str, Any], call: str) -> float:
    """WRU per request of the storage call ``call`` (its main operation)."""
    rows = [p for p in d["by_purpose"] if p["call"] == call]
    return max((p["wru"] / p["n"] for p in rows if p["n"]), default=0.0)


def stage_growth(long: dict[str, Any], early: int, late: int) -> list[tuple[str, float, float, float]]:
    """``(stage, ms at early, ms at late, calls per step at late)`` per stage, the most grown first."""
    calls = long["stage_calls"]
    rows = [
        (label, window(v, early) * 1000, window(v, late) * 1000, window(calls.get(label, []), late))
        for label, v in long["stages"].items()
    ]
    return sorted(rows, key=lambda r: r[1] - r[2])


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
    with tempfile.TemporaryDirectory() as tmp:
        floor = floor_ms(Path(tmp))
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
    rows, waits = [], []
    for r in results:
        rows.append([r["name"], "in memory (generate)", r["memory_ms"], "", "", "", ""])
        for arm, label in (("local", "local kit (SQLite + files)"), ("dynamodb", "DynamoDB adapters (moto)")):
            a = r[arm]
            rows.append([r["name"], label, a["per_step_ms"], a["added_ms"], a["storage_ms"],
                         a["added_ms"] - a["storage_ms"], a["cpu_added_ms"]])  # fmt: skip
            waits.append([r["name"], label, a["boundaries"], a["boundary_ms"], a["hops"], a["hop_ms"],
                          a["loop_cpu_added_ms"], a["cpu_added_ms"] - a["loop_cpu_added_ms"]])  # fmt: skip
    print(table(["model", "arm", "ms/step", "added ms/step", "in storage calls (some overlap the stream)",
                 "elsewhere (waits, CPU)", "added CPU ms/step"], rows))  # fmt: skip
    print("\nthe step boundaries (SliceProgress.defer/save/commit, awaited by the turn) and thread hops, per step:\n")
    print(table(["model", "arm", "boundaries", "waited in them ms", "added thread hops", "their cost ms (beyond the "
                 "call)", "event-loop CPU added ms", "worker-thread CPU added ms"], waits))  # fmt: skip
    print(f"floor of a step, raw: one SQLite commit (WAL, synchronous=NORMAL) + one file append: {floor:.3f} ms")
    http, inproc = results
    d = http["dynamodb"]
    print("\nstorage calls per step (HTTP model), and their time:")
    for arm in ("local", "dynamodb"):
        print(f"  {arm}: {by_call(http[arm])}")
    print("(the DynamoDB arm's CPU includes moto's, which answers in this process)")
    print(
        f"DynamoDB requests per step: {d['round_trips']:.2f} ("
        + ", ".join(f"{op} {n:.2f}" for op, n in d["ops"].items())
        + f"); {d['aws_ms']:.1f} ms/step with a request in flight; WRU/step {d['wru']:.2f} ("
        + ", ".join(f"{op} {n:.2f}" for op, n in d["wru_by_op"].items() if n)
        + f"); {d['bytes']:,.0f} item bytes written per step"
    )
    print(f"  by the storage call that sent them: {purposes(d, 'n')}")
    print(f"  their WRU: {purposes(d, 'wru')}")

    per, enc, reached = long["per_step"], long["encoding"], long["reached"]
    late = min(STEP_CPU_LATE, reached)
    print(f"\nlong run (local kit, HTTP model, 1 delta per step): reached step {reached} in {long['wall']:.0f} s "
          f"(bound {args.long_seconds:g} s)")  # fmt: skip
    rows = []
    for step in sorted({10, STEP_CPU_EARLY, 250, 500, late} & set(range(1, reached + 1))):
        cpu, e = window(per, step) * 1000, window(enc, step) * 1000
        rows.append([step, cpu, e, cpu - e])
    print(table(["step", "kit CPU ms/step", "of it: encoding the model request", "without the encoding"], rows))
    growth = stage_growth(long, STEP_CPU_EARLY, late)
    print("\nits CPU per step by stage (each stage's own thread CPU, timed in the run; the rest by difference):\n")
    total = [window(per, STEP_CPU_EARLY) * 1000, window(per, late) * 1000]
    print(table(["stage", f"ms/step at {STEP_CPU_EARLY}", f"at {late}", "growth ms", f"calls/step at {late}"],
                [*([label, a, b, b - a, "" if n != n else n] for label, a, b, n in growth),
                 ["total (the process's CPU)", *total, total[1] - total[0], ""]]))  # fmt: skip

    local, local_in = http["local"], inproc["local"]
    report("step.overhead.local", f"{local['added_ms']:+.2f} ms/step; {local['storage_ms']:.2f} ms/step in storage "
           f"calls, {local['added_ms'] - local['storage_ms']:.2f} ms elsewhere (+{local['cpu_added_ms']:.2f} ms "
           "CPU/step)", local["added_ms"] <= STEP_OVERHEAD_LOCAL_MS, why=local_why(local, floor))  # fmt: skip
    report("step.overhead.local_inprocess", f"{local_in['added_ms']:+.2f} ms/step",
           local_in["added_ms"] <= STEP_OVERHEAD_LOCAL_MS, why=local_why(local_in, floor))  # fmt: skip
    report("step.overhead.dynamodb",
           f"+{d['added_ms']:.1f} ms/step, {d['round_trips']:.2f} round trips/step "
           f"({', '.join(f'{op} {n:.2f}' for op, n in d['ops'].items())}); {d['aws_ms']:.1f} ms in requests; "
           f"in-process model +{inproc['dynamodb']['added_ms']:.1f} ms/step", d["round_trips"] <= STEP_ROUND_TRIPS,
           why=f"{d['round_trips']:.2f} requests/step by the storage call that sent them: {purposes(d, 'n')}; "
           f"{d['aws_ms']:.1f} of the +{d['added_ms']:.1f} ms/step with a request in flight; "
           f"{boundary_split(d)}. {DDB_CAUSE}")  # fmt: skip
    wru = ", ".join(f"{op} {n:.2f}" for op, n in d["wru_by_op"].items() if n)
    report("step.wru", f"{d['wru']:.2f} WRU/step ({wru})", d["wru"] <= STEP_WRU,
           why=f"WRU/step by the storage call: {purposes(d, 'wru')}; a checkpoint save bills "
           f"{per_request(d, 'store.save'):.1f} WRU, a flush at a boundary "
           f"{per_request(d, 'log.append (at a boundary)'):.1f}; "
           f"{d['bytes']:,.0f} item bytes written per step. {WRU_CAUSE}")  # fmt: skip
    early = window(per, STEP_CPU_EARLY) - window(enc, STEP_CPU_EARLY)
    later = window(per, late) - window(enc, late)
    ratio = later / early if early > 0 else float("inf")
    done = reached >= STEP_CPU_LATE
    grown = ", ".join(f"{label} {b - a:+.2f} ({a:.2f} -> {b:.2f} ms)" for label, a, b, _ in growth
                      if label != ENCODING and abs(b - a) >= 0.05)  # fmt: skip
    report("step.cpu_flat",
           f"x{ratio:.2f} at step {late} ({later * 1000:.2f} vs {early * 1000:.2f} ms CPU/step at {STEP_CPU_EARLY}, "
           f"encoding apart: {window(enc, late) * 1000:.2f} vs {window(enc, STEP_CPU_EARLY) * 1000:.2f} ms)"
           + ("" if done else f"; step {STEP_CPU_LATE} not reached within {args.long_seconds:g} s"),
           done and ratio <= STEP_CPU_RATIO,
           why=f"{(later - early) * 1000:+.2f} ms CPU/step from step {STEP_CPU_EARLY} to {late}, encoding apart; by "
           f"stage (StageClock: each stage's own thread CPU, timed in this run): {grown}. {CPU_CAUSE}"
           + ("" if done else f" Step {STEP_CPU_LATE} was not reached within {args.long_seconds:g} s."))  # fmt: skip


if __name__ == "__main__":
    main()
