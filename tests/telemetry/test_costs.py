"""The per-run cost arithmetic (``durable_harness.telemetry.costs``) against figures worked out by hand
from the price table: a one-slice run the chat function ran itself, and a two-slice one."""

from __future__ import annotations

import pytest
from durable_harness.telemetry.costs import (
    PRICE_DATE,
    DeployedFunctions,
    RunRecord,
    estimate_run_cost,
    overhead_rows,
    slice_seconds,
)

ONE_SLICE = RunRecord(
    slices=1,
    slice_times=[(0, 1000.0)],
    chunk_times=[(1, 1000.5), (5, 1002.0)],
    chunk_count=10,
    steps=1,
    record_writes=4,
    state_bytes=3000,
)


def test_a_one_slice_run_costs_what_the_price_table_says() -> None:
    cost = estimate_run_cost(ONE_SLICE)
    parts = cost["parts"]
    # Lambda: the chat function, 1 GB x 2.0 s (slice start to its last timed chunk) at $0.0000133334/GB-s
    # = 26.6668e-6; one request at $0.20/million = 0.2e-6; INIT of 5% of one invocation x 0.6 s x 1 GB
    # = 0.03 GB-s = 0.400002e-6.
    assert parts["lambda"] == pytest.approx(27.266802e-6, rel=1e-9)
    # Step Functions: 3 + 2 x 1 transitions at $0.025/1k.
    assert parts["stepFunctions"] == pytest.approx(125e-6, rel=1e-9)
    # DynamoDB: 10 flushes (at most one per chunk) at 1 WRU, 4 record writes x 2 WRU + 3 KB of state
    # = 21 WRU at $0.625/million; one strongly consistent load of the 3 KB record = 1 RRU at $0.125/million.
    assert parts["dynamodb"] == pytest.approx(13.25e-6, rel=1e-9)
    # S3: the sealed segment, one PUT at $0.005/1k.
    assert parts["s3"] == pytest.approx(5e-6, rel=1e-9)
    # Logs 2,000 B at $0.50/GB = 0.931322574615e-6; X-Ray 2 traces at $5/million = 10e-6; secrets
    # 0.05 x 2 reads at $0.05/10k = 0.5e-6.
    assert parts["logsAndTracing"] == pytest.approx(11.431322574615e-6, rel=1e-9)
    assert cost["usd"] == pytest.approx(181.948124574615e-6, rel=1e-9)
    assert cost["usd"] == pytest.approx(sum(parts.values()), rel=1e-12)
    assert cost["priceDate"] == PRICE_DATE
    assert cost["basis"]["recorded"] == {"slices": 1, "chunks": 10, "steps": 1, "recordWrites": 4, "stateBytes": 3000}
    estimated = cost["basis"]["estimated"]
    assert (estimated["flushes"], estimated["stateTransitions"]) == (10, 5)
    assert estimated["invocations"] == {"ChatFunction": 1, "SliceFunction": 0}
    assert any("not priced" in note for note in cost["basis"]["notes"])


def test_later_slices_are_billed_to_the_slice_function_and_followed_by_the_chat_function() -> None:
    record = RunRecord(
        slices=2,
        slice_times=[(0, 100.0), (8, 110.0)],
        chunk_times=[(3, 104.0), (12, 113.0)],
        chunk_count=20,
        steps=2,
        record_writes=6,
        state_bytes=1000,
    )
    assert slice_seconds(record) == [10.0, 3.0]  # until the next slice; the last until its last timed chunk
    cost = estimate_run_cost(record, DeployedFunctions(chat_mb=1024, slice_mb=512))
    # 1 GB x 10 s + 0.5 GB x 3 s = 11.5 GB-s; 2 requests; INIT 0.05 x (0.6 x 1 + 0.5 x 0.5) = 0.0425 GB-s.
    assert cost["parts"]["lambda"] == pytest.approx((11.5 + 0.0425) * 0.0000133334 + 0.4e-6, rel=1e-9)
    # 20 flushes, of which round(20 x 3 / 13) = 5 in the slice function's slice, each a Query of
    # 0.5 RRU by the chat function; 2 loads of 1 RRU; 20 + 2 x 6 + 1 = 33 WRU.
    assert cost["parts"]["dynamodb"] == pytest.approx((33 * 0.625 + 4.5 * 0.125) / 1e6, rel=1e-9)
    assert cost["parts"]["stepFunctions"] == pytest.approx(7 * 0.025 / 1000, rel=1e-9)
    assert cost["basis"]["estimated"]["invocations"] == {"ChatFunction": 1, "SliceFunction": 1}
    # Without the chat function's first slice, both slices are the slice function's.
    alone = estimate_run_cost(record, DeployedFunctions(inline_first_slice=False))
    assert alone["basis"]["estimated"]["invocations"] == {"ChatFunction": 1, "SliceFunction": 2}
    assert alone["parts"]["lambda"] == pytest.approx((6.5 + 0.05 * (0.6 + 2 * 0.25)) * 0.0000133334 + 0.6e-6, rel=1e-9)


def test_the_bench_rows_and_the_estimate_share_one_overhead() -> None:
    # bench/storage_cost.py and deployed_wiring.py print these rows; the estimate adds the same dollars.
    rows = dict(overhead_rows({"ChatFunction": 1, "SliceFunction": 0}, {"ChatFunction": 1024, "SliceFunction": 512}))
    logs_and_tracing = sum(v for k, v in rows.items() if not k.startswith("Lambda INIT"))
    assert estimate_run_cost(ONE_SLICE)["parts"]["logsAndTracing"] == pytest.approx(logs_and_tracing, rel=1e-12)
