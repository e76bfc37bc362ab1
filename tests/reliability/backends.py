"""The storage adapters the reliability suites run against: memory, SQLite + files, DynamoDB + S3 (moto).

A :class:`Backend` hands out adapter objects over one storage: ``adapters()`` again gives *new*
objects over the same data, as a fresh process (a new Lambda container, cold caches) would.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config
from durable_harness.aws import DynamoCheckpointStore, DynamoChunkLog
from durable_harness.ports import CheckpointStore, ChunkLog
from durable_harness.storage.files import FileChunkLog
from durable_harness.storage.memory import MemoryCheckpointStore, MemoryChunkLog
from durable_harness.storage.sqlite import SqliteCheckpointStore
from moto import mock_aws

from tests.aws.conftest import BUCKET, REGION, TABLE
from tests.motoserver import create_runs_table

BACKENDS = ("memory", "sqlite+files", "dynamodb+s3")


class Backend:
    """Adapter objects over one storage; :meth:`close` releases every object handed out so far."""

    def __init__(
        self,
        name: str,
        make: Callable[[], tuple[CheckpointStore, ChunkLog]],
        *,
        cold_restart: bool,
        cheap_reads: bool,
        clients: tuple[Any, Any] | None = None,
    ) -> None:
        self.name = name
        self._make = make
        self.cold_restart = cold_restart
        """Whether a crashed slice is resumed with new adapter objects (a new process)."""
        self.cheap_reads = cheap_reads
        """Whether checking the log from every index is cheap (not a remote call per read)."""
        self.clients = clients
        """The moto-backed DynamoDB and S3 clients (``dynamodb+s3`` only)."""
        self._opened: list[Any] = []

    def adapters(self) -> tuple[CheckpointStore, ChunkLog]:
        store, log = self._make()
        self._opened += [store, log]
        return store, log

    def close(self) -> None:
        """Close the SQLite connections and the chunk log's reader threads handed out so far."""
        opened, self._opened = self._opened, []
        for adapter in opened:
            close = getattr(adapter, "close", None)
            if close is not None:
                close()


def memory_backend() -> Backend:
    store, log = MemoryCheckpointStore(), MemoryChunkLog()
    return Backend("memory", lambda: (store, log), cold_restart=False, cheap_reads=True)


def local_backend(root: Path) -> Backend:
    def make() -> tuple[CheckpointStore, ChunkLog]:
        return SqliteCheckpointStore(root / "runs.sqlite3"), FileChunkLog(root / "chunks")

    return Backend("sqlite+files", make, cold_restart=True, cheap_reads=True)


def aws_clients(max_attempts: int = 3) -> tuple[Any, Any]:
    """DynamoDB and S3 clients (standard retries) with the runs table and chunk bucket created.

    Call inside ``mock_aws()``; creating them again is harmless (the table and bucket are reused).
    """
    config = Config(retries={"mode": "standard", "total_max_attempts": max_attempts})
    ddb = boto3.client("dynamodb", region_name=REGION, config=config)
    s3 = boto3.client("s3", region_name=REGION, config=config)
    if TABLE not in ddb.list_tables()["TableNames"]:
        create_runs_table(ddb, TABLE)
        s3.create_bucket(Bucket=BUCKET)
    return ddb, s3


SPILL_BYTES = 48
"""The chunk log's spill threshold in these suites: low, so that the larger appends (tool inputs and
outputs) go through S3 and its faults, as a long tool output would when deployed."""


def aws_adapters(ddb: Any, s3: Any) -> tuple[DynamoCheckpointStore, DynamoChunkLog]:
    store = DynamoCheckpointStore(TABLE, client=ddb, s3_client=s3, bucket=BUCKET)
    return store, DynamoChunkLog(TABLE, dynamodb_client=ddb, s3_client=s3, bucket=BUCKET, spill_bytes=SPILL_BYTES)


@contextmanager
def moto_env() -> Iterator[tuple[Any, Any]]:
    """A private moto account: nothing here ever reaches AWS."""
    with mock_aws():
        yield aws_clients()


def aws_backend(ddb: Any, s3: Any) -> Backend:
    return Backend(
        "dynamodb+s3", lambda: aws_adapters(ddb, s3), cold_restart=True, cheap_reads=False, clients=(ddb, s3)
    )


@contextmanager
def backend_named(name: str, tmp_path: Path) -> Iterator[Backend]:
    """The backend called ``name`` (one of :data:`BACKENDS`), closed afterwards."""
    if name == "memory":
        yield memory_backend()
        return
    if name == "sqlite+files":
        backend = local_backend(tmp_path)
        try:
            yield backend
        finally:
            backend.close()
        return
    with moto_env() as (ddb, s3):
        backend = aws_backend(ddb, s3)
        try:
            yield backend
        finally:
            backend.close()
