"""Wiring for Lambda: the AWS adapters built from environment variables, clients made once.

Environment (set by the SAM template):

=====================  ===========================================================
``RUNS_TABLE``         DynamoDB table of run records and chunk logs (required)
``CHUNK_BUCKET``       S3 bucket of sealed chunk-log segments, large appends and offloaded
                       states (required)
``STATE_MACHINE_ARN``  the run state machine (required)
``EVENT_BUS_NAME``     bus for run lifecycle events (optional: no events without it)
``RUN_TTL_DAYS``       days a run's records live after their last write (default 30)
``CHUNK_RETENTION_DAYS``  days the chunk bucket keeps an object (its lifecycle rule; optional):
                       a run record never lives longer than this after its creation, so it
                       expires before any of its segments (see :mod:`.dynamodb`); chunk-log
                       items live this long after they were written
``INLINE_HEARTBEAT_SECONDS``  how long the state machine waits for a heartbeat of a first slice
                       the chat function runs itself (:mod:`.handover`; default 30)
``INLINE_HEARTBEAT_INTERVAL``  seconds between those heartbeats, at most a third of the above
                       (default: a third of it); each run's is jittered down by up to a fifth
``INLINE_FIRST_SLICE``  ``0`` when the chat function leaves every slice to the slice function
                       (read here only for when the Step Functions client is made; see below)
``SESSION_RUNTIME``    ``none`` (default) or ``agentcore``: persistent harness sessions run in
                       the AgentCore runtime ``AGENTCORE_RUNTIME_ARN`` (its session transport,
                       ``harness/bridge/agentcore.py``, is installed here)
=====================  ===========================================================

Clients are expensive to create (tens of milliseconds, plus memory) and thread-safe, so they are
created once per process and reused across invocations of a warm Lambda. They are botocore
clients from one shared session (:mod:`.clients`: boto3 is not imported); a test may pass a
``boto3.Session`` of its own. The DynamoDB client is made at once (every request and slice
starts with a read or write of the runs table); the others on first use (``LazyClient``): the S3
client at a slice's first seal (or a resume's first read of a sealed segment), the Step Functions
client when the chat function starts a run's execution (after the first chunk of a slice it runs
itself) or a slice hands over, the EventBridge client at the first event (the chat function
publishes only when a run is cancelled). Each is a cost of the chat function's cold start its first
chunk does not wait for (``bench/cold_start.py``). With ``INLINE_FIRST_SLICE=0`` the chat function
starts each run's execution before its first chunk, so the Step Functions client is made at once.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import FatalError
from .checkpoints import DynamoCheckpointStore
from .chunklog import DynamoChunkLog
from .clients import LazyClient, make_client
from .events import EventPublisher
from .handover import StepFunctionsHandover
from .stepfunctions import StepFunctionsOrchestrator
from .waits import StepFunctionsWaker

if TYPE_CHECKING:
    import boto3
    from botocore.config import Config

__all__ = ["CLIENT_CONFIG", "AwsConfigError", "AwsRuntime", "build_runtime", "client_config", "client_for"]

_config: Config | None = None


def client_config() -> Config:
    """:data:`CLIENT_CONFIG`, made on first use: ``botocore.config`` is imported only where a botocore
    client is made (in Lambda the harness's clients are lite ones where they can be, :mod:`.clients`)."""
    global _config
    if _config is None:
        from botocore.config import Config

        from .lite import _client as lite  # the settings, kept once for both kinds of client

        _config = Config(
            # Standard mode retries throttling, 5xx and connection errors with capped exponential
            # backoff and a retry quota. Adaptive mode would add client-side rate limiting that blocks
            # the calling thread, which a time-sliced Lambda would rather spend on a retry of the slice.
            # total_max_attempts counts the first attempt too (the dict's max_attempts counts retries).
            retries={"mode": "standard", "total_max_attempts": lite.MAX_ATTEMPTS},
            connect_timeout=lite.CONNECT_TIMEOUT,
            read_timeout=lite.READ_TIMEOUT,
            tcp_keepalive=True,
            max_pool_connections=32,  # the chunk log reads segments in parallel
        )
    return _config


def __getattr__(name: str) -> Any:
    """``CLIENT_CONFIG``, built when first read (PEP 562)."""
    if name == "CLIENT_CONFIG":
        return client_config()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


CLIENT_CONFIG: Config
"""The botocore configuration of every botocore client this module creates (made on first read;
a lite client has the same retries and timeouts, :mod:`.lite`)."""

_DAY = 86400
_clients: dict[tuple[int, str, str | None], tuple[Any, Any]] = {}
_clients_lock = threading.Lock()


class AwsConfigError(FatalError):
    """The deployment's environment is missing or has an invalid setting."""


@dataclass
class AwsRuntime:
    """The ports (and the event publisher) of a deployed harness."""

    store: DynamoCheckpointStore
    log: DynamoChunkLog
    orchestrator: StepFunctionsOrchestrator
    events: EventPublisher | None = None
    handover: StepFunctionsHandover | None = None
    """How the chat function hands the first slice it ran itself over to the state machine."""
    waker: StepFunctionsWaker | None = None
    """Wakes a parked run's execution when an event for it is delivered (:mod:`.waits`)."""


def client_for(service: str, *, session: boto3.Session | None = None, region: str | None = None) -> Any:
    """A client for ``service`` with :data:`CLIENT_CONFIG`, created once per session and region
    (without ``session``: from the shared botocore session of :mod:`.clients`)."""
    key = (id(session) if session is not None else 0, service, region)
    with _clients_lock:
        cached = _clients.get(key)
        # The session is kept with its client so that its id cannot be reused by another session.
        if cached is not None and cached[1] is session:
            return cached[0]
        client = make_client(service, client_config, region=region, session=session)
        _clients[key] = (client, session)
        return client


def build_runtime(env: Mapping[str, str] = os.environ, *, session: boto3.Session | None = None) -> AwsRuntime:
    """The AWS adapters configured from ``env``; raises ``AwsConfigError`` naming a bad variable."""
    table = _required(env, "RUNS_TABLE", "the DynamoDB table of run records")
    bucket = _required(env, "CHUNK_BUCKET", "the S3 bucket of chunk logs")
    state_machine = _required(env, "STATE_MACHINE_ARN", "the ARN of the run state machine")
    bus = env.get("EVENT_BUS_NAME", "").strip() or None
    ttl_seconds = _days(env, "RUN_TTL_DAYS", "30")
    retention = _days(env, "CHUNK_RETENTION_DAYS", "") if env.get("CHUNK_RETENTION_DAYS", "").strip() else None
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None
    _install_session_transport(env)

    def client(service: str) -> Any:
        return client_for(service, session=session, region=region)

    dynamodb = client("dynamodb")
    s3 = LazyClient(lambda: client("s3"))
    inline = env.get("INLINE_FIRST_SLICE", "1") != "0"  # as the chat app reads it
    sfn = LazyClient(lambda: client("stepfunctions")) if inline else client("stepfunctions")
    # Chunk items live as long as the run's S3 objects: written after the record's creation, they
    # outlive the record, whose TTL is capped at creation + retention.
    log_ttl = retention if retention is not None else ttl_seconds
    log = DynamoChunkLog(table, dynamodb_client=dynamodb, s3_client=s3, bucket=bucket, ttl_seconds=log_ttl)
    store = DynamoCheckpointStore(
        table, client=dynamodb, s3_client=s3, bucket=bucket, ttl_seconds=ttl_seconds, max_age_seconds=retention,
        on_created=log.note_fresh,  # a run created here opens its log without a look at its top
    )  # fmt: skip
    try:
        orchestrator = StepFunctionsOrchestrator(
            state_machine, client=sfn, incarnation=store.incarnation
        )
    except ValueError as exc:
        raise AwsConfigError(f"STATE_MACHINE_ARN: {exc}") from None
    heartbeat = _whole(env, "INLINE_HEARTBEAT_SECONDS", "30")
    interval = _whole(env, "INLINE_HEARTBEAT_INTERVAL", "0") if env.get("INLINE_HEARTBEAT_INTERVAL") else None
    if interval is not None and interval * 3 > heartbeat:
        raise AwsConfigError(
            f"INLINE_HEARTBEAT_INTERVAL ({interval}) must be at most a third of INLINE_HEARTBEAT_SECONDS ({heartbeat}):"
            " set ChatSliceHeartbeatTimeout to at least 3 times ChatSliceHeartbeatInterval"
        )
    return AwsRuntime(
        store=store,
        log=log,
        orchestrator=orchestrator,
        events=EventPublisher(bus, client=LazyClient(lambda: client("events"))) if bus else None,
        handover=StepFunctionsHandover(
            orchestrator,
            client=sfn,
            dynamodb_client=dynamodb,
            table_name=table,
            heartbeat_seconds=heartbeat,
            heartbeat_interval=interval,
        ),
        waker=StepFunctionsWaker(client=sfn, dynamodb_client=dynamodb, table_name=table),
    )


def _install_session_transport(env: Mapping[str, str]) -> None:
    """With ``SESSION_RUNTIME=agentcore``, persistent sessions get the AgentCore transport (imported
    only then: a stack without sessions does not pay for it at its cold start)."""
    if env.get("SESSION_RUNTIME", "").strip() in ("", "none"):
        return
    from ..harness.bridge import transport

    try:
        transport.session_runtime(env)
    except FatalError as exc:
        raise AwsConfigError(str(exc)) from None
    from ..harness.bridge.agentcore import RUNTIME_ARN_ENV, agentcore_factory

    _required(env, RUNTIME_ARN_ENV, "the ARN of the AgentCore runtime of harness sessions")
    transport.set_transport_factory(agentcore_factory(env))


def _whole(env: Mapping[str, str], name: str, default: str) -> int:
    """A positive whole number from ``env``; ``AwsConfigError`` naming the variable."""
    text = env.get(name, default).strip() or default
    if not text.isdigit() or int(text) < 1:
        raise AwsConfigError(f"{name} must be a whole number of seconds, at least 1, got {text!r}")
    return int(text)


def _days(env: Mapping[str, str], name: str, default: str) -> int:
    """A positive number of days from ``env``, in seconds; ``AwsConfigError`` naming the variable."""
    text = env.get(name, default).strip() or default
    try:
        seconds = int(float(text) * _DAY)
    except ValueError:
        raise AwsConfigError(f"{name} must be a number of days, got {text!r}") from None
    if seconds <= 0:
        raise AwsConfigError(f"{name} must be positive, got {text!r}")
    return seconds


def _required(env: Mapping[str, str], name: str, meaning: str) -> str:
    value = env.get(name, "").strip()
    if not value:
        raise AwsConfigError(f"environment variable {name} is not set: it must name {meaning}")
    return value
