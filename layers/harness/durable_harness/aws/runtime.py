"""Wiring for Lambda: the AWS adapters built from the settings (:mod:`durable_harness.settings`),
clients made once, and :func:`function_parts`, the part of each function's composition root that
all four share (the adapters, the agent, its runner).

The settings this module reads (``docs/operating.md``, "Settings"): ``RUNS_TABLE``, ``CHUNK_BUCKET``
and ``STATE_MACHINE_ARN`` (required), ``EVENT_BUS_NAME`` (no events without it), ``RUN_TTL_DAYS``,
``CHUNK_RETENTION_DAYS`` (a run record never lives longer than this after its creation, so it
expires before any of its segments, see :mod:`.dynamodb`; chunk-log items live this long after
they were written), ``INLINE_HEARTBEAT_SECONDS`` and ``INLINE_HEARTBEAT_INTERVAL`` (the first
slice the chat function runs itself, :mod:`.handover`), ``INLINE_FIRST_SLICE`` (for when the Step
Functions client is made, below), and ``SESSION_RUNTIME`` / ``AGENTCORE_RUNTIME_ARN`` (persistent
harness sessions in the AgentCore runtime: its session transport, ``aws/agentcore.py``,
is installed here).

Clients are expensive to create (tens of milliseconds, plus memory) and thread-safe, so they are
created once per process and reused across invocations of a warm Lambda. They are botocore
clients from one shared session (:mod:`.clients`: boto3 is not imported), or in Lambda lite ones
(``AWS_LITE_CLIENTS=0``: botocore's there too); a test may pass a ``boto3.Session`` of its own.
The DynamoDB client is made at once (every request and slice starts with a read or write of the
runs table); the others on first use (``LazyClient``): the S3 client at a slice's first seal (or
a resume's first read of a sealed segment), the Step Functions client when the chat function
starts a run's execution (after the first chunk of a slice it runs itself) or a slice hands over,
the EventBridge client at the first event (the chat function publishes only when a run is
cancelled). Each is a cost of the chat function's cold start its first chunk does not wait for
(``bench/cold_start.py``). With ``INLINE_FIRST_SLICE=0`` the chat function starts each run's
execution before its first chunk, so the Step Functions client is made at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import FatalError, SettingsError
from ..settings import Settings
from .checkpoints import DynamoCheckpointStore
from .chunklog import DynamoChunkLog
from .clients import LazyClient, bedrock_model_client, make_client
from .events import EventPublisher
from .handover import StepFunctionsHandover
from .stepfunctions import StepFunctionsOrchestrator
from .waits import StepFunctionsWaker

if TYPE_CHECKING:
    import boto3
    from botocore.config import Config

    from ..runner.runner import Runner

__all__ = [
    "CLIENT_CONFIG",
    "SAFETY_MARGIN_SECONDS",
    "AwsConfigError",
    "AwsRuntime",
    "FunctionParts",
    "build_runtime",
    "client_config",
    "client_for",
    "function_parts",
]  # fmt: skip

_config: Config | None = None


def client_config() -> Config:
    """:data:`CLIENT_CONFIG`, made on first use: ``botocore.config`` is imported only where a botocore
    client is made (in Lambda the harness's clients are lite ones where they can be, :mod:`.clients`)."""
    global _config
    if _config is None:
        from botocore.config import Config
        from lambda_fastpath.aws import _client as lite  # the settings, kept once for both kinds of client

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
a lite client has the same retries and timeouts, :mod:`lambda_fastpath.aws`)."""

SAFETY_MARGIN_SECONDS = 60.0
"""Time a slice run in Lambda keeps back from the time it has left (the invocation's, or the chat
response's window): a slice stops only at a step boundary, and a step may overrun its budget."""

_clients: dict[tuple[int, str, str | None], tuple[Any, Any]] = {}
_clients_lock = threading.Lock()


AwsConfigError = SettingsError
"""The deployment's environment is missing or has an invalid setting (the settings' own error, by
the name this package's callers know)."""


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


def build_runtime(
    settings: Settings | Mapping[str, str] | None = None, *, session: boto3.Session | None = None
) -> AwsRuntime:
    """The AWS adapters configured from ``settings`` (or an environment mapping; default this
    process's); raises ``AwsConfigError`` naming a bad variable."""
    if not isinstance(settings, Settings):
        settings = Settings.from_env(settings)
    table = settings.required("RUNS_TABLE", "the DynamoDB table of run records")
    bucket = settings.required("CHUNK_BUCKET", "the S3 bucket of chunk logs")
    state_machine = settings.required("STATE_MACHINE_ARN", "the ARN of the run state machine")
    ttl_seconds, retention = settings.run_ttl_seconds, settings.chunk_retention_seconds
    _install_session_transport(settings)

    def client(service: str) -> Any:
        return client_for(service, session=session, region=settings.region)

    dynamodb = client("dynamodb")
    s3 = LazyClient(lambda: client("s3"))
    sfn = LazyClient(lambda: client("stepfunctions")) if settings.inline_first_slice else client("stepfunctions")
    # Chunk items live as long as the run's S3 objects: written after the record's creation, they
    # outlive the record, whose TTL is capped at creation + retention.
    log_ttl = retention if retention is not None else ttl_seconds
    log = DynamoChunkLog(table, dynamodb_client=dynamodb, s3_client=s3, bucket=bucket, ttl_seconds=log_ttl)
    store = DynamoCheckpointStore(
        table, client=dynamodb, s3_client=s3, bucket=bucket, ttl_seconds=ttl_seconds, max_age_seconds=retention,
        on_created=log.note_fresh,  # a run created here opens its log without a look at its top
    )  # fmt: skip
    try:
        orchestrator = StepFunctionsOrchestrator(state_machine, client=sfn, incarnation=store.incarnation)
    except ValueError as exc:
        raise AwsConfigError(f"STATE_MACHINE_ARN: {exc}") from None
    heartbeat, interval = settings.inline_heartbeat_seconds, settings.inline_heartbeat_interval
    try:  # the handover holds the rule (an interval of at most a third of the timeout)
        handover = StepFunctionsHandover(
            orchestrator, client=sfn, dynamodb_client=dynamodb, table_name=table, heartbeat_seconds=heartbeat,
            heartbeat_interval=interval,
        )  # fmt: skip
    except ValueError as exc:
        raise AwsConfigError(
            f"INLINE_HEARTBEAT_INTERVAL ({interval}) and INLINE_HEARTBEAT_SECONDS ({heartbeat}): {exc}:"
            " set ChatSliceHeartbeatTimeout to at least 3 times ChatSliceHeartbeatInterval"
        ) from None
    bus = settings.event_bus_name
    return AwsRuntime(
        store=store,
        log=log,
        orchestrator=orchestrator,
        events=EventPublisher(bus, client=LazyClient(lambda: client("events"))) if bus else None,
        handover=handover,
        waker=StepFunctionsWaker(client=sfn, dynamodb_client=dynamodb, table_name=table),
    )


@dataclass
class FunctionParts:
    """What every Lambda function is built from, once per container: its settings, the AWS
    adapters, and the runner of its agent (the rest of each function's root is its own,
    :mod:`.functions`)."""

    settings: Settings
    runtime: AwsRuntime
    runner: Runner


def function_parts(
    settings: Settings,
    *,
    flush_interval: float | None = None,
    on_commit: Callable[[str, int], None] | None = None,
    check_secret: bool = True,
    session: boto3.Session | None = None,
) -> FunctionParts:
    """The adapters of ``settings``, its ``AGENT`` loaded, and a runner whose runs record that
    agent's identity. ``flush_interval`` None: ``STREAM_FLUSH_SECONDS``. ``check_secret`` reads
    the approval secret now (a function that signs approvals): a secret under 32 bytes, or one
    that may not be read, fails the function's start, with its own message; that read is the
    one the first approval uses (:class:`~durable_harness.approvals.ApprovalSecret`)."""
    from ..chunks.writer import SERVING_BURST
    from ..loader import load_agent  # the runner and the agent: imported by the functions, not by the adapters' users
    from ..runner.runner import Runner

    runtime = build_runtime(settings, session=session)
    _install_core_clients()
    flush = settings.stream_flush_seconds if flush_interval is None else flush_interval
    runner = Runner(
        load_agent(settings.agent), runtime.store, runtime.log, flush_interval=flush, flush_burst=SERVING_BURST,
        on_commit=on_commit, agent_id=settings.agent, public_url=settings.public_url,
    )  # fmt: skip
    runner.approval_secret.pin(settings.environ)  # its secret's ARN: from the settings, as everything else
    if check_secret:
        runner.approval_secret.check()
    return FunctionParts(settings, runtime, runner)


def _install_core_clients() -> None:
    """The AWS clients the core asks its root for: the Bedrock model's (a lite one in Lambda,
    :func:`.clients.bedrock_model_client`) and the approval secret's start-up read (the shared
    ``secretsmanager`` client of :func:`client_for`, lite in Lambda: no boto3 at a cold start)."""
    from .. import secretsmanager
    from ..models import bedrock

    bedrock.set_client_factory(bedrock_model_client)
    secretsmanager.set_client_factory(lambda: client_for("secretsmanager"))


def _install_session_transport(settings: Settings) -> None:
    """With ``SESSION_RUNTIME=agentcore``, persistent sessions get the AgentCore transport (imported
    only then: a stack without sessions does not pay for it at its cold start)."""
    env = settings.environ
    if env.get("SESSION_RUNTIME", "").strip() in ("", "none"):
        return
    from ..harness.bridge import transport

    try:
        transport.session_runtime(env)
    except FatalError as exc:
        raise AwsConfigError(str(exc)) from None
    from .agentcore import RUNTIME_ARN_ENV, agentcore_factory

    settings.required(RUNTIME_ARN_ENV, "the ARN of the AgentCore runtime of harness sessions")
    transport.set_transport_factory(agentcore_factory(env))
