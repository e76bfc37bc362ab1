"""Checkpoint growth: writes, bytes and write units per step as a tool-calling run gets long.

A scripted model runs an N-step turn in which every step streams a short text and calls a tool
(``lookup``, whose result is about ``--result-bytes`` of JSON); the turn ends at the step limit.
Checkpoints go to ``DynamoCheckpointStore`` under moto (the deployed store, real boto3 client) and
every DynamoDB request it makes is metered: the bytes of the items it writes (DynamoDB's item
sizes, after the write), the write units DynamoDB bills (two per KB of each item in a transaction),
and the reads (the per-step fence check, the slice's load). The chunk log is an in-memory one (not
measured here).

Three runs, side by side: ``--steps`` steps in one slice, the same sliced at every step (each slice
claims the run: the "one more write per slice boundary"), and ``--target-steps`` steps in one
slice. Printed: per step (every ``--every``-th), the checkpoint requests and bytes; the totals; what
the final state is made of; then the issue's checkpoint targets (bench/_targets.py).

    .venv/bin/python bench/checkpoint_growth.py [--steps 30] [--target-steps 200] [--deltas 20] [--result-bytes 400]
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from _common import PRICES, MotoAws, Request, RequestMeter, machine, scripted_tool_agent, table, user_turn
from _targets import CHECKPOINT_BYTES_RATIO, report
from durable_harness.errors import HarnessError
from durable_harness.ports import CheckpointStore, StoredRun
from durable_harness.runner.runner import Runner
from durable_harness.storage.memory import MemoryChunkLog

WRITES = {"PutItem", "UpdateItem", "TransactWriteItems", "DeleteItem"}
READS = {"GetItem", "Query"}


@dataclass
class Step:
    """What the store did for one step of the turn."""

    saves: list[str] = field(default_factory=list)  # kind of each save: model / tool-result / step / end
    requests: list[Request] = field(default_factory=list)

    @property
    def writes(self) -> int:
        return sum(r.op in WRITES for r in self.requests)

    @property
    def reads(self) -> int:
        return sum(r.op in READS for r in self.requests)

    @property
    def written(self) -> int:
        return sum(r.written for r in self.requests)

    @property
    def wru(self) -> float:
        return sum(r.wru for r in self.requests)


class RecordingStore:
    """Attributes every request of the real store to the step in progress (steps end at a save
    whose state ended the step); the create belongs to step 1."""

    def __init__(self, inner: CheckpointStore, meter: RequestMeter) -> None:
        self.inner, self.meter = inner, meter
        self.steps: list[Step] = [Step()]

    def _call(self, fn: Any, *args: Any) -> Any:
        before = len(self.meter.requests)
        try:
            return fn(*args)
        finally:
            self.steps[-1].requests += self.meter.requests[before:]

    def create(self, checkpoint: StoredRun) -> StoredRun:
        return self._call(self.inner.create, checkpoint)

    def load(self, run_id: str) -> StoredRun:
        return self._call(self.inner.load, run_id)

    def claim(self, run_id: str, expected_version: int) -> StoredRun:
        return self._call(self.inner.claim, run_id, expected_version)

    def version(self, run_id: str) -> int:
        return self._call(self.inner.version, run_id)

    def save(self, checkpoint: StoredRun, expected_version: int) -> StoredRun:
        state = json.loads(checkpoint.state)
        turn = state.get("turn") or {}
        if checkpoint.status != "ready_for_next_step":
            kind = "end"
        elif turn.get("phase") == "tools":
            kind = "tool-result" if turn.get("step_outcomes") else "model"
        else:
            kind = "step"
        saved = self._call(self.inner.save, checkpoint, expected_version)
        self.steps[-1].saves.append(kind)
        if kind == "step":
            self.steps.append(Step())
        return saved


@dataclass
class Run:
    """One measured turn."""

    steps: list[Step]
    slices: int
    final_state: str
    status: str


def run_turn(steps: int, deltas: int, result_bytes: int, *, sliced: bool = False) -> Run:
    """One ``steps``-step tool-calling turn on the DynamoDB store under moto."""
    with MotoAws() as aws:
        meter = RequestMeter()
        ddb, s3 = aws.clients(meter=meter)
        store = RecordingStore(aws.store(ddb, s3), meter)
        agent = scripted_tool_agent(steps=steps, deltas=deltas, result_bytes=result_bytes, final_text=False)
        runner = Runner(agent, store, MemoryChunkLog(), flush_interval=0)
        run_id = runner.create_run(user_turn()).run_id
        state = asyncio.run(_drive(runner, run_id, sliced))
        if not store.steps[-1].requests:
            store.steps.pop()
        if len(store.steps) > steps:  # the terminal save (after the last step's end) joins the last step
            extra = store.steps.pop()
            store.steps[-1].saves += extra.saves
            store.steps[-1].requests += extra.requests
        final = aws.store(ddb, s3).load(run_id).state  # a cold store: the state as loading puts it together
        return Run(store.steps, state.slices, final, state.status)


async def _drive(runner: Runner, run_id: str, sliced: bool) -> Any:
    while True:
        state = await runner.run_slice(run_id, budget_seconds=0 if sliced else None)
        if state.terminal:
            return state


def size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":")).encode())


def totals(run: Run) -> tuple[int, int, int, float]:
    """Writes, reads, item bytes written, WRU of the whole run."""
    return (sum(s.writes for s in run.steps), sum(s.reads for s in run.steps),
            sum(s.written for s in run.steps), sum(s.wru for s in run.steps))  # fmt: skip


def print_run(name: str, run: Run, every: int) -> None:
    """The per-step table and the totals of one run."""
    n = len(run.steps)
    rows = []
    for i, s in enumerate(run.steps):
        if i in (0, n - 1) or (i + 1) % every == 0:
            ops = "+".join(r.op.replace("TransactWriteItems", "Transact").replace("Item", "") for r in s.requests)
            rows.append([i + 1, "+".join(s.saves), s.writes, s.reads, ops, s.written, s.wru])
    writes, reads, written, wru = totals(run)
    final = len(run.final_state.encode())
    print(f"\n{name}: {n} steps, {run.slices} slice(s), final status {run.status}")
    print(table(["step", "saves", "writes", "reads", "requests", "bytes written", "WRU"], rows))
    print(
        f"totals: {writes} write requests ({writes / n:.2f} per step), {reads} reads; {written:,} bytes written "
        f"for a final state of {final:,} bytes (x{written / final:.2f}); {wru:,.0f} WRU "
        f"= ${wru * PRICES['ddb_wru_per_m'] / 1e6:.5f}"
    )


def report_targets(short: Run, sliced: Run, long: Run | None, long_error: str | None, steps: int, args: Any) -> None:
    """The issue's checkpoint targets (bench/_targets.py)."""
    for run, how in ((short, "one slice"), (sliced, "a slice per step")):
        writes = totals(run)[0]
        allowed = steps + run.slices + 1  # one per step, one per slice boundary (the claim), the create
        measured = (f"{how}: {writes} writes (create, claims, saves) in {steps} steps, {run.slices} slice(s): "
                    f"{writes / steps:.2f} per step; allowed {allowed}")  # fmt: skip
        by_step = Counter(s.writes for s in run.steps)
        report("checkpoint.writes_per_step", measured, writes <= allowed,
               f"steps by their write requests (requests: steps): {dict(sorted(by_step.items()))}")  # fmt: skip
    k = max(1, min(10, steps // 4))
    written = [s.written for s in short.steps]
    first, last = sum(written[1 : k + 1]) / k, sum(written[-k - 1 : -1]) / k  # the create and the end aside
    report("checkpoint.no_growth", f"bytes written per step: {first:,.0f} in steps 2-{k + 1}, {last:,.0f} in the "
           f"last {k} before the end (x{last / first:.2f})", last <= 1.1 * first,
           f"bytes written by step: {', '.join(f'{b:,}' for b in written)}")  # fmt: skip
    for run, n in ((short, steps), (long, args.target_steps)):
        if run is None:
            report("checkpoint.bytes_200_steps", f"the {n}-step run failed: {long_error}", False,
                   f"not measured: the run failed ({long_error})")  # fmt: skip
            continue
        total, final = totals(run)[2], len(run.final_state.encode())
        report("checkpoint.bytes_200_steps", f"{n} steps: {total:,} bytes written for a final state of {final:,} "
               f"(x{total / final:.2f})", total <= CHECKPOINT_BYTES_RATIO * final,
               f"{run.slices} slice(s); the largest step wrote {max(s.written for s in run.steps):,} bytes, the "
               f"median one {sorted(s.written for s in run.steps)[len(run.steps) // 2]:,}")  # fmt: skip


def main() -> None:
    """Run the turns and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--deltas", type=int, default=20, help="text deltas per step (~5 bytes each)")
    parser.add_argument("--result-bytes", type=int, default=400, help="approximate JSON size of each tool result")
    parser.add_argument("--every", type=int, default=5, help="print every n-th step (and the first and last)")
    parser.add_argument("--target-steps", type=int, default=200, help="steps of the run the bytes target names")
    args = parser.parse_args()

    print(f"checkpoint_growth: {machine()}; DynamoCheckpointStore under moto")
    print(f"each step: {args.deltas} text deltas + one tool call with a ~{args.result_bytes}-byte result")
    short = run_turn(args.steps, args.deltas, args.result_bytes)
    print_run(f"{args.steps}-step run", short, args.every)
    sliced = run_turn(args.steps, args.deltas, args.result_bytes, sliced=True)
    print_run(f"{args.steps}-step run, sliced at every step", sliced, args.every)
    long: Run | None = None
    error = None
    try:
        long = run_turn(args.target_steps, args.deltas, args.result_bytes)
        print_run(f"{args.target_steps}-step run", long, args.every * 5)
    except HarnessError as exc:
        error = str(exc)

    state = json.loads(short.final_state)
    parts = {f"turn.{k}": size(v) for k, v in (state.get("turn") or {}).items()}
    parts |= {f"stream.{k}": size(v) for k, v in state.get("stream", {}).items()}
    parts |= {k: size(v) for k, v in state.items() if k not in ("turn", "stream")}
    whole = size(state)
    top = sorted(parts.items(), key=lambda kv: -kv[1])[:6]
    print(f"\nwhat the {args.steps}-step run's final state is made of:")
    print(table(["field", "bytes", "share"], [[k, v, f"{v / whole:.0%}"] for k, v in top]))

    print("\ntargets:")
    report_targets(short, sliced, long, error, args.steps, args)


if __name__ == "__main__":
    main()
