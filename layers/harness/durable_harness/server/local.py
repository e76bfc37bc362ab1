"""The local kit: the chat app with embedded storage (SQLite + files) and an in-process orchestrator."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..harness.interface import Harness
from ..runner.local import LocalOrchestrator
from ..runner.runner import Runner
from ..storage._private import make_private_dirs
from ..storage.files import FileChunkLog
from ..storage.health import StorageHealth
from ..storage.sqlite import SqliteCheckpointStore
from .app import ChatApp
from .auth import Authenticator
from .notifier import CommitSignal
from .service import ChatService, ServiceConfig
from .static import web_page_dir


@dataclass
class LocalKit:
    """Everything the local server is made of, for tests that want to reach inside."""

    app: ChatApp
    service: ChatService
    runner: Runner
    orchestrator: LocalOrchestrator
    store: SqliteCheckpointStore
    log: FileChunkLog
    health: StorageHealth


def build_local_kit(
    agent: Harness,
    data_dir: str | Path,
    *,
    slice_seconds: float | None = 600.0,
    flush_interval: float = 0.01,
    flush_burst: int = 2,
    config: ServiceConfig | None = None,
    cors_origins: tuple[str, ...] = ("*",),
    authenticator: Authenticator | None = None,
    static_dir: str | Path | Literal["auto"] | None = "auto",
    lease_seconds: float = 15.0,
    max_retry_delay: float = 5.0,
    agent_id: str | None = None,
) -> LocalKit:
    """Assemble the local chat app over ``data_dir`` (created 0700 if missing).

    Local writes are cheap, so the group-commit interval is short (10 ms) to keep latency low, and
    its burst is 2: the first chunk of the model's output goes out at once, not an interval after
    the slice's opening ``start`` (see :mod:`durable_harness.storage.writer`).
    Without an ``authenticator`` every caller is ``anonymous`` (local development).
    ``static_dir="auto"`` serves the built chat page (``make web``) unless ``SERVE_WEB_PAGE=0``;
    None serves no page.

    At start-up (the ASGI lifespan) the orchestrator drives every run of the data folder that is
    neither terminal nor paused, and then watches leases of ``lease_seconds`` (see
    :mod:`durable_harness.runner.lease`). Slices that fail on storage are retried with backoff
    up to ``max_retry_delay`` seconds apart.

    ``agent_id`` is the agent's identity (``durable-harness serve`` gives its ``AGENT`` spec): runs
    record it, and this server drives, continues and answers approvals of its own agent's runs only
    (another agent's run is a 409 to drive, and readable); see :class:`~durable_harness.runner.runner.Runner`.
    """
    root = make_private_dirs(data_dir)
    store = SqliteCheckpointStore(root / "runs.sqlite3")
    log = FileChunkLog(root / "chunks")
    signal = CommitSignal()
    health = StorageHealth()

    def committed(run_id: str, count: int) -> None:
        signal.notify(run_id, count)
        health.succeeded()

    runner = Runner(
        agent, store, log, flush_interval=flush_interval, flush_burst=flush_burst, on_commit=committed,
        agent_id=agent_id,
    )  # fmt: skip
    orchestrator = LocalOrchestrator(
        runner,
        slice_seconds=slice_seconds,
        leases=store,
        lease_seconds=lease_seconds,
        max_retry_delay=max_retry_delay,
        health=health,
        timers=store,
    )
    service = ChatService(runner, orchestrator, signal=signal, config=config, health=health)
    page = web_page_dir() if static_dir == "auto" else static_dir
    app = ChatApp(
        service,
        cors_origins=cors_origins,
        authenticator=authenticator,
        on_startup=orchestrator.open,
        on_shutdown=orchestrator.aclose,
        static_dir=page,
    )
    return LocalKit(
        app=app, service=service, runner=runner, orchestrator=orchestrator, store=store, log=log, health=health
    )
