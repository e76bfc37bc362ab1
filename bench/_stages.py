"""Where a turn's first chunk spends its time (not a benchmark itself; ``relay_latency.py`` prints it).

:class:`StageProbe` wraps methods of one local kit's parts (the store, the log, the commit signal,
the ASGI ``send``) and notes, per turn, the first time each stage is reached, on the one
``time.perf_counter`` clock the client and the servers share (they run in one process). Nothing in
the library changes: the probe only replaces attributes of these objects, and the wrappers cost a
few microseconds each.

The stages of a durable turn, in order (``mark`` names them):

* ``received``: the app is called with the POST;
* ``created``: the run is in the store (``store.create`` returned);
* ``leased``: the orchestrator holds the run's lease (its driver task runs);
* ``claimed``: the slice claimed the run and opened the log (``log.open`` returned);
* ``delta``: the model emitted its first text delta;
* ``durable``: the append holding that delta returned (the chunk is in the log);
* ``signalled``: the commit signal heard of it (back on the event loop);
* ``read``: the follower's read returned it;
* ``sent``: the ASGI ``send`` carrying it was called (uvicorn writes it to the socket);
* ``received_by_client``: the client saw it (the measured time to first chunk).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

DELTA = b'"type":"text-delta"'
STAGES = ("received", "created", "leased", "claimed", "delta", "durable", "signalled", "read", "sent", "client")
LABELS = {
    "received": "POST received by the app",
    "created": "run created (SQLite insert)",
    "leased": "driver started, lease taken",
    "claimed": "slice: run loaded, claimed, log opened",
    "delta": "model emits its first text delta",
    "durable": "that delta's append returned (in the log)",
    "signalled": "commit signal, back on the event loop",
    "read": "follower's read returned it",
    "sent": "handed to the server (ASGI send)",
    "client": "client received it (TTFC)",
}


class StageProbe:
    """First-time stamps of each stage of the current turn (one turn at a time)."""

    def __init__(self) -> None:
        self.current: dict[str, float] = {}
        self.turns: list[dict[str, float]] = []

    def begin(self, sent: float) -> None:
        """A turn is sent at ``sent`` (perf_counter seconds)."""
        self.current = {"start": sent}

    def end(self, client: float, delta: float | None) -> None:
        """The turn's first text-delta reached the client at ``client``; the model emitted it at ``delta``."""
        if delta is not None:
            self.current.setdefault("delta", delta)
        self.current.setdefault("client", client)
        self.turns.append(self.current)
        self.current = {}

    def mark(self, stage: str) -> None:
        """Note ``stage`` now, unless this turn reached it already."""
        self.current.setdefault(stage, time.perf_counter())

    def after(self, obj: Any, name: str, stage: str, when: Callable[..., bool] | None = None) -> None:
        """Mark ``stage`` when ``obj.name(...)`` returns (and ``when(result, *args)`` holds)."""
        method = getattr(obj, name)

        @functools.wraps(method)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            result = method(*args, **kwargs)
            if when is None or when(result, *args):
                self.mark(stage)
            return result

        setattr(obj, name, wrapper)

    def attach(self, kit: Any) -> Any:
        """Probe a :class:`~durable_harness.server.local.LocalKit`; returns the ASGI app to serve."""
        self.after(kit.store, "create", "created")
        self.after(kit.store, "acquire_lease", "leased")
        self.after(kit.log, "open", "claimed")
        self.after(kit.log, "append", "durable", lambda _r, _id, _s, chunks, _e: _has_delta(chunks))
        self.after(kit.log, "read", "read", lambda chunks, *_: _has_delta(chunks))
        self.after(kit.service.signal, "notify", "signalled", lambda _r, *_: "durable" in self.current)
        return self.wrap(kit.app)

    def wrap(self, app: Any) -> Any:
        """An ASGI app around ``app`` that marks ``received`` and ``sent`` (the direct path has only these)."""

        async def probed(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            self.mark("received")

            async def probed_send(message: dict[str, Any]) -> None:
                if DELTA in message.get("body", b""):
                    self.mark("sent")
                await send(message)

            await app(scope, receive, probed_send)

        return probed

    def table_rows(
        self,
        median: Callable[[Sequence[float]], float],
        stages: Sequence[str] = STAGES,
        labels: dict[str, str] = LABELS,
    ) -> list[list[Any]]:
        """One row per stage of ``stages`` (named by ``labels``) that a turn reached: its median time
        since the request was sent, and since the stage before."""
        rows, previous = [], 0.0
        for stage in stages:
            times = [(t[stage] - t["start"]) * 1000 for t in self.turns if stage in t]
            if not times:
                continue
            at = median(times)
            steps = [(t[stage] - t[p]) * 1000 for t in self.turns for p in [_before(t, stage, stages)] if p is not None]
            rows.append([labels[stage], at, median(steps) if steps else at - previous])
            previous = at
        return rows


def _before(turn: dict[str, float], stage: str, stages: Sequence[str] = STAGES) -> str | None:
    """The latest stage before ``stage`` that this turn reached (``start`` for the first)."""
    index = stages.index(stage)
    for earlier in reversed(stages[:index]):
        if earlier in turn:
            return earlier
    return "start" if stage in turn else None


def _has_delta(chunks: Sequence[str]) -> bool:
    return any('"type":"text-delta"' in c for c in chunks)
