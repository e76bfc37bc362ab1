"""Storage faults under DynamoDB + S3 (moto): throttling and transient errors never lose a chunk.

Faults are injected at the boto3 clients (:mod:`tests.reliability.faults`): DynamoDB's
``ProvisionedThroughputExceededException``, ``ThrottlingException`` and ``InternalServerError``,
S3's ``SlowDown`` (503), ``InternalError`` (500) and ``RequestTimeout``. A sparse rate is absorbed
by botocore's standard retries (5 attempts); bursts that exhaust them surface as
``StorageError``, and the local orchestrator (``retry_delay=0``) runs the slice again from its
checkpoint. The scenario of :mod:`tests.reliability.scenario` must still finish with the
fault-free message, and no tool may run again once its result was checkpointed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from durable_harness.errors import StorageError
from durable_harness.runner import LocalOrchestrator, Runner
from durable_harness.runner.state import RunState
from moto import mock_aws

from tests.reliability.backends import aws_adapters, aws_clients
from tests.reliability.conftest import Report
from tests.reliability.faults import DYNAMODB_FAULTS, S3_FAULTS, FaultInjector, fast_client_backoff
from tests.reliability.scenario import (
    PROMPT,
    CrashPlan,
    PlannedLog,
    PlannedStore,
    Timeline,
    check_log,
    check_reference,
    make_agent,
)
from tests.support import message_of

MAX_ATTEMPTS = 5  # the clients' total_max_attempts


class CountingRunner(Runner):
    """A runner that remembers the slices that failed (what the orchestrator retried)."""

    failures: list[BaseException]

    async def run_slice(self, run_id: str, *, budget_seconds: float | None = None) -> RunState:
        try:
            return await super().run_slice(run_id, budget_seconds=budget_seconds)
        except BaseException as exc:
            self.failures = [*getattr(self, "failures", []), exc]
            raise


@pytest.fixture(scope="module")
def moto_account() -> Iterator[None]:
    """One moto account for the module (the table and bucket are made once; runs have their own ids)."""
    with mock_aws():
        yield


@pytest.fixture
def clients(moto_account: None, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """New clients per test (faults attach to them), with botocore's backoff in milliseconds."""
    fast_client_backoff(monkeypatch)
    return aws_clients(max_attempts=MAX_ATTEMPTS)


async def run_scenario(
    ddb: Any, s3: Any, concurrency: int | None, faults: FaultInjector | None, *, max_attempts: int = 3
) -> tuple[RunState | None, CountingRunner, Timeline, list[dict[str, Any]]]:
    """The scenario through the local orchestrator, one step per slice, with ``faults`` on the clients."""
    timeline = Timeline()
    store, log = aws_adapters(ddb, s3)
    plan = CrashPlan()  # no crashes: it only feeds committed checkpoints to the timeline
    runner = CountingRunner(
        make_agent(timeline, concurrency), PlannedStore(store, plan, timeline), PlannedLog(log, plan), flush_interval=0
    )
    run_id = runner.create_run(PROMPT, message_id="msg_1").run_id
    if faults is not None:
        faults.attach(ddb, s3)
    orchestrator = LocalOrchestrator(runner, slice_seconds=0, retry_delay=0, max_attempts=max_attempts)
    state = await orchestrator.drive(run_id)
    if faults is not None:
        faults.armed = False  # check the outcome without faults
    chunks = check_log(log, store, run_id, every_index=False)
    return state, runner, timeline, chunks


_REFERENCE: list[dict[str, Any]] = []


@pytest.fixture
async def reference(clients: tuple[Any, Any]) -> dict[str, Any]:
    """The fault-free message (computed once per module)."""
    if not _REFERENCE:
        state, runner, _, chunks = await run_scenario(*clients, 1, None)
        assert state is not None and state.status == "finished"
        assert getattr(runner, "failures", []) == []
        _REFERENCE.append(check_reference(chunks))
    return _REFERENCE[0]


@pytest.mark.parametrize(
    ("concurrency", "every"),
    [pytest.param(1, 3, id="one-at-a-time-every-3rd"), pytest.param(None, 3, id="unlimited-every-3rd"),
     pytest.param(1, 2, id="one-at-a-time-every-2nd")],
)  # fmt: skip
async def test_transient_faults_are_retried_by_the_client_and_the_run_loses_nothing(
    clients: tuple[Any, Any], reference: dict[str, Any], concurrency: int | None, every: int, reliability_report: Report
) -> None:
    began = time.monotonic()
    faults = FaultInjector(every=every, per_service=True)
    state, runner, timeline, chunks = await run_scenario(*clients, concurrency, faults)
    assert state is not None and state.status == "finished"
    assert getattr(runner, "failures", []) == []  # botocore absorbed every fault: no slice failed
    # Both services failed requests (S3 holds the larger appends here, see backends.SPILL_BYTES).
    assert faults.total >= 10 and {code for code, _ in DYNAMODB_FAULTS} <= set(faults.injected)
    assert set(faults.injected) & {code for code, _ in S3_FAULTS}, faults.injected
    assert faults.retried_attempts >= faults.total  # each fault was followed by the client's retry
    assert message_of(chunks) == reference
    assert timeline.executions == {"c1": 1, "c2": 1, "c3": 1, "c4": 1}
    reliability_report(
        "transient_faults", f"{faults.total} injected in {faults.requests} requests ({time.monotonic() - began:.1f} s)"
    )


@pytest.mark.parametrize("concurrency", [pytest.param(1, id="one-at-a-time"), pytest.param(None, id="unlimited")])
@pytest.mark.parametrize("every", [17, 23, 31])  # more requests apart than a slice makes
async def test_faults_that_exhaust_the_clients_retries_are_retried_by_the_orchestrator(
    clients: tuple[Any, Any], reference: dict[str, Any], concurrency: int | None, every: int, reliability_report: Report
) -> None:
    began = time.monotonic()
    faults = FaultInjector(every=every, burst=MAX_ATTEMPTS)
    state, runner, timeline, chunks = await run_scenario(*clients, concurrency, faults)
    failures = getattr(runner, "failures", [])
    assert state is not None and state.status == "finished", (state, failures)
    assert failures and all(isinstance(f, StorageError) for f in failures), failures
    assert faults.total >= MAX_ATTEMPTS * len(failures)
    assert message_of(chunks) == reference
    assert timeline.reexecuted_after_checkpoint() == [], timeline.events
    executions = timeline.executions
    assert set(executions) == {"c1", "c2", "c3", "c4"}
    assert all(n <= 1 + len(failures) for n in executions.values()), (executions, failures)
    reliability_report(
        "slices_retried_after_storage_errors",
        f"{len(failures)} ({faults.total} faults in {faults.requests} requests, {time.monotonic() - began:.1f} s)",
    )


@pytest.mark.parametrize("operation", ["PutItem", "PutObject"])
async def test_chunk_writes_whose_replies_were_lost_are_recognized_and_the_run_loses_nothing(
    clients: tuple[Any, Any], reference: dict[str, Any], reliability_report: Report, operation: str
) -> None:
    """DynamoDB stored the append (or S3 its spilled chunks) but the answer was lost (500):
    botocore's retry finds the append's own write id (or rewrites the same object); nothing is
    written twice."""
    faults = FaultInjector(every=2, lost_reply=True, operations=frozenset({operation}))
    state, runner, timeline, chunks = await run_scenario(*clients, 1, faults)
    assert state is not None and state.status == "finished"
    assert faults.total >= 2 and getattr(runner, "failures", []) == []
    assert message_of(chunks) == reference
    assert timeline.executions == {"c1": 1, "c2": 1, "c3": 1, "c4": 1}
    reliability_report(f"lost_{operation}_replies", faults.total)
