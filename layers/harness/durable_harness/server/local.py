"""The local kit: the chat app with embedded storage (SQLite + files) and an in-process orchestrator.

:func:`local_kit` is the local mode's composition root (``durable-harness serve``, and the chat
function's app run without ``RUNS_TABLE``): the kit built from the settings
(:mod:`durable_harness.settings`). :func:`build_local_kit` assembles one from its parts (tests).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..chunks.writer import SERVING_BURST
from ..errors import SettingsError
from ..harness.interface import Harness
from ..loader import load_agent
from ..models import bedrock
from ..runner.local import LocalOrchestrator
from ..runner.runner import Runner
from ..settings import Settings
from ..storage._private import make_private_dirs
from ..storage.files import FileChunkLog
from ..storage.health import StorageHealth
from ..storage.sqlite import SqliteCheckpointStore
from .app import ChatApp
from .auth import Authenticator, authenticator_from_env
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


DEFAULT_DATA_DIR = "/tmp/durable-harness"
"""Where the chat function's app keeps its data without ``DATA_DIR`` (``durable-harness serve``: ``.data``)."""


def local_kit(settings: Settings, *, data_dir: str | None = None, **agent_kwargs: Any) -> LocalKit:
    """The local kit of ``settings``: its ``AGENT`` (built with ``agent_kwargs``) over embedded
    storage in ``data_dir`` (default ``DATA_DIR``, else :data:`DEFAULT_DATA_DIR`), slices of
    ``SLICE_SECONDS``, the ``AUTH_MODE`` authentication (default none), the chat page unless
    ``SERVE_WEB_PAGE=0``, event URLs under ``PUBLIC_URL``. The approval secret is read now: one
    under 32 bytes stops the start, not an approval."""

    bedrock.set_client_factory(bedrock.botocore_client)  # the model's client, made on first use: botocore's here
    agent = load_agent(settings.agent, **agent_kwargs)
    try:
        authenticator = authenticator_from_env(settings.environ, default_mode="none", local=True)
    except ValueError as exc:  # an AUTH_* setting: named in the message
        raise SettingsError(f"authentication: {exc}") from None
    kit = build_local_kit(
        agent,
        data_dir or settings.data_dir or DEFAULT_DATA_DIR,
        slice_seconds=settings.slice_seconds,
        authenticator=authenticator,
        static_dir=web_page_dir(settings.environ),
        agent_id=settings.agent,
    )
    kit.runner.public_url = kit.runner.public_url or settings.public_url
    kit.runner.approval_secret.pin(settings.environ)
    kit.runner.approval_secret.check()
    return kit


def build_local_kit(
    agent: Harness,
    data_dir: str | Path,
    *,
    slice_seconds: float | None = 600.0,
    flush_interval: float = 0.01,
    flush_burst: int = SERVING_BURST,
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
    the slice's opening ``start`` (see :mod:`durable_harness.chunks.writer`).
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
    if (bind := getattr(agent, "bind_data_dir", None)) is not None:
        bind(root)  # a persistent ProcessHarness registers its sessions' bridges here
    store = SqliteCheckpointStore(root / "runs.sqlite3")
    log = FileChunkLog(root / "chunks")
    signal = CommitSignal()
    health = StorageHealth()

    def committed(run_id: str, count: int) -> None:
        signal.notify(run_id, count)
        health.succeeded()

    runner = Runner(
        agent, store, log, flush_interval=flush_interval, flush_burst=flush_burst, on_commit=committed,
        agent_id=agent_id, open_with_start=True,
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
