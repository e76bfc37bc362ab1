"""Checkpoint growth: bytes and writes per checkpoint over a 50-step run.

A scripted model runs a 50-step turn in which every step streams a short text and calls a tool
(``lookup``, whose result is about ``--result-bytes`` of JSON); the turn ends at the step limit.
Checkpoints go to ``DynamoCheckpointStore`` under moto (the deployed store, real boto3 client), so
the DynamoDB write units are what DynamoDB would bill (``ceil(item size / 1 KB)`` per write);
the chunk log is an in-memory one (not measured here).

Printed: per step, the checkpoint writes, the bytes written (state JSON), the item size at the end
of the step, its WRU, and the new conversation content of that step; the growth slope (bytes of
checkpoint per step, least squares) against the new content per step; the cumulative totals; and
what the last checkpoint is made of. Then the issue's checkpoint targets (bench/_targets.py), the
bytes one from a second, ``--target-steps``-step run.

    .venv/bin/python bench/checkpoint_growth.py [--steps 50] [--deltas 20] [--result-bytes 400] [--target-steps 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import dataclass
from typing import Any

from _common import PRICES, MotoAws, RequestMeter, machine, scripted_tool_agent, table, user_turn, verdict
from _targets import CHECKPOINT_BYTES_RATIO, report
from durable_harness.errors import HarnessError
from durable_harness.ports import Checkpoint, CheckpointStore
from durable_harness.runner.runner import Runner
from durable_harness.runner.state import RunState
from durable_harness.storage.memory import MemoryChunkLog


@dataclass
class Save:
    """One checkpoint write as the runner made it."""

    step: int  # the step this write belongs to (0-based)
    kind: str  # model / tool-result / step / end
    size: int  # bytes of state JSON
    messages: int  # bytes of turn.messages JSON
    wru: float = 0.0


class RecordingStore:
    """Records each save (and which step and boundary it belongs to) on the way to the real store."""

    def __init__(self, inner: CheckpointStore, meter: RequestMeter) -> None:
        self.inner, self.meter = inner, meter
        self.saves: list[Save] = []
        self.last: dict[str, Any] = {}

    def create(self, checkpoint: Checkpoint) -> Checkpoint:
        return self.inner.create(checkpoint)

    def load(self, run_id: str) -> Checkpoint:
        return self.inner.load(run_id)

    def claim(self, run_id: str, expected_version: int) -> Checkpoint:
        return self.inner.claim(run_id, expected_version)

    def save(self, checkpoint: Checkpoint, expected_version: int) -> Checkpoint:
        state = json.loads(checkpoint.state)
        turn = state.get("turn") or {}
        if checkpoint.status != "ready_for_next_step":
            kind, step = "end", turn.get("step", 1) - 1
        elif turn.get("phase") == "tools":
            kind = "tool-result" if turn.get("step_outcomes") else "model"
            step = turn["step"]
        else:
            kind, step = "step", turn["step"] - 1
        before = len(self.meter.requests)
        saved = self.inner.save(checkpoint, expected_version)
        wru = sum(r.wru for r in self.meter.requests[before:])
        messages = len(json.dumps(turn.get("messages", []), separators=(",", ":")))
        self.saves.append(Save(step, kind, len(checkpoint.state.encode()), messages, wru))
        self.last = state
        return saved


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys over xs."""
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


def size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":")))


def run_turn(steps: int, deltas: int, result_bytes: int) -> tuple[RecordingStore, RunState, Any]:
    """One ``steps``-step tool-calling turn on the DynamoDB store under moto: its saves, end state, requests."""
    with MotoAws() as aws:
        meter = RequestMeter()
        ddb, s3 = aws.clients(meter=meter)
        store = RecordingStore(aws.store(ddb, s3), meter)
        agent = scripted_tool_agent(steps=steps, deltas=deltas, result_bytes=result_bytes, final_text=False)
        runner = Runner(agent, store, MemoryChunkLog(), flush_interval=0)
        state = runner.create_run(user_turn())
        final = asyncio.run(runner.run(state.run_id))
        return store, final, meter.counts()


def report_targets(store: RecordingStore, final: RunState, steps: int, written: list[int], args: Any) -> None:
    """The issue's checkpoint targets (bench/_targets.py): writes per step, growth, a long run's bytes."""
    writes = len(store.saves)
    slices = max(final.slices, 1)
    report("checkpoint.writes_per_step", f"{writes} writes in {steps} steps and {slices} slice(s): "
           f"{writes / steps:.2f} per step", writes <= steps + slices)  # fmt: skip
    k = max(1, min(10, steps // 4))
    first, last = sum(written[:k]) / k, sum(written[-k:]) / k
    report("checkpoint.no_growth", f"bytes written per step: {first:,.0f} in the first {k} steps, {last:,.0f} in the "
           f"last {k} (x{last / first:.2f})", last <= 1.1 * first)  # fmt: skip
    try:
        long_store, _, _ = run_turn(args.target_steps, args.deltas, args.result_bytes)
    except HarnessError as exc:
        report("checkpoint.bytes_200_steps", f"the {args.target_steps}-step run failed: {exc}", False)
        return
    total, end = sum(s.size for s in long_store.saves), long_store.saves[-1].size
    report("checkpoint.bytes_200_steps", f"{args.target_steps} steps: {total:,} bytes written for a final state of "
           f"{end:,} (x{total / end:.1f})", total <= CHECKPOINT_BYTES_RATIO * end)  # fmt: skip


def main() -> None:
    """Run the 50-step turn and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--deltas", type=int, default=20, help="text deltas per step (~5 bytes each)")
    parser.add_argument("--result-bytes", type=int, default=400, help="approximate JSON size of each tool result")
    parser.add_argument("--every", type=int, default=5, help="print every n-th step (and the first and last)")
    parser.add_argument("--target-steps", type=int, default=200, help="steps of the run the bytes target names")
    args = parser.parse_args()

    store, final, counts = run_turn(args.steps, args.deltas, args.result_bytes)

    steps = args.steps
    per_step: list[list[Save]] = [[] for _ in range(steps)]
    for s in store.saves:
        per_step[min(s.step, steps - 1)].append(s)
    rows, end_sizes, new_content, written = [], [], [], []
    previous_messages = size(store.last["turn"]["messages"][:1])  # the user message
    for i, saves in enumerate(per_step):
        end = saves[-1]
        new = end.messages - previous_messages
        previous_messages = end.messages
        end_sizes.append(end.size)
        new_content.append(new)
        written.append(sum(s.size for s in saves))
        if i in (0, steps - 1) or (i + 1) % args.every == 0:
            rows.append([i + 1, len(saves), "+".join(s.kind for s in saves), new, end.size,
                         sum(s.size for s in saves), sum(s.wru for s in saves)])  # fmt: skip

    xs = [float(i + 1) for i in range(steps)]
    growth = slope(xs, [float(v) for v in end_sizes])
    written_growth = slope(xs, [float(v) for v in written])
    mean_new = sum(new_content) / steps
    total_written = sum(s.size for s in store.saves)
    total_wru = sum(s.wru for s in store.saves)
    writes = len(store.saves)

    print(f"checkpoint_growth: {machine()}; DynamoCheckpointStore under moto")
    print(
        f"{steps} steps, each {args.deltas} text deltas + one tool call with a ~{args.result_bytes}-byte result; "
        f"final status {final.status}; DynamoDB requests {dict(counts)}\n"
    )
    print(table(["step", "writes", "boundaries", "new content B", "checkpoint B (end)", "bytes written", "WRU"], rows))
    print(
        f"\ngrowth slope: {growth:,.0f} bytes of checkpoint per step for {mean_new:,.0f} bytes of new conversation "
        f"per step (x{growth / mean_new:.2f}); bytes written per step grow by {written_growth:,.0f} per step"
    )
    print(
        f"totals: {writes} checkpoint writes ({writes / steps:.2f} per step), {total_written:,} bytes written "
        f"(x{total_written / end_sizes[-1]:.1f} the final checkpoint of {end_sizes[-1]:,} bytes), {total_wru:,.0f} WRU "
        f"= ${total_wru * PRICES['ddb_wru_per_m'] / 1e6:.5f}; a log of the new content alone would write "
        f"~{sum(new_content):,} bytes"
    )

    last = store.last
    parts = {f"turn.{k}": size(v) for k, v in (last.get("turn") or {}).items()}
    parts |= {f"stream.{k}": size(v) for k, v in last.get("stream", {}).items()}
    parts |= {k: size(v) for k, v in last.items() if k not in ("turn", "stream")}
    top = sorted(parts.items(), key=lambda kv: -kv[1])[:6]
    total = size(last)
    print("\nwhat the last checkpoint is made of:")
    print(table(["field", "bytes", "share"], [[k, v, f"{v / total:.0%}"] for k, v in top]))
    text_dup = sum(len(s.get("text", "")) for s in last["turn"].get("steps", []))
    calls = last.get("stream", {}).get("translator", {}).get("tool_calls", {})
    print(
        f"duplicated content: turn.steps[].text repeats each step's text ({text_dup:,} bytes, also in "
        f"turn.messages); stream.translator.tool_calls keeps all {len(calls)} tool calls of the run with "
        f"their inputs ({size(calls):,} bytes, also in turn.messages)"
    )

    print("\ntargets:")
    print(f"  one checkpoint write per step: {verdict(writes <= steps + 1, f'{writes / steps:.2f} per step')}")
    linear = written_growth < 0.2 * mean_new
    why = (
        f"each write rewrites the whole history: bytes per write grow by {growth:,.0f} per step, "
        f"bytes per step by {written_growth:,.0f} per step (quadratic in total)"
    )
    print(f"  bytes written per step linear in new content: {verdict(linear, why)}")
    report_targets(store, final, steps, written, args)


if __name__ == "__main__":
    main()
