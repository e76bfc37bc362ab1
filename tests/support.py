"""Shared test helpers: a real server on loopback (uvicorn, or the chat function's httpd), crash injection,
SSE reading."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import uvicorn
from durable_harness.ports import CheckpointStore, ChunkLog, StoredRun
from durable_harness.protocol.assemble import assemble_ui_message
from durable_harness.protocol.sse import SSEParser
from durable_harness.server.app import ChatApp


class SimulatedCrash(BaseException):
    """A slice dying abruptly (like a Lambda timeout): not an error any code path handles."""


class CrashingLog:
    """A chunk log that crashes on the ``crash_on``-th append (1-based), or on the first append that
    holds chunk index ``crash_at_chunk``, before or after writing it.

    Which chunks one append holds depends on timing (group commit); chunk indexes do not.
    """

    def __init__(
        self, inner: ChunkLog, crash_on: int = 0, *, after_write: bool = False, crash_at_chunk: int | None = None
    ) -> None:
        self.inner = inner
        self.crash_on = crash_on
        self.crash_at_chunk = crash_at_chunk
        self.after_write = after_write
        self.appends = 0

    def open(self, run_id: str, epoch: int) -> int:
        return self.inner.open(run_id, epoch)

    def append(self, run_id: str, start: int, chunks: Sequence[str], epoch: int) -> int:
        self.appends += 1
        at = self.crash_at_chunk
        crash = self.appends == self.crash_on or (at is not None and start <= at < start + len(chunks))
        if crash:
            self.crash_on, self.crash_at_chunk = 0, None  # once
        if crash and not self.after_write:
            raise SimulatedCrash(f"crash before append {self.appends}")
        count = self.inner.append(run_id, start, chunks, epoch)
        if crash:
            raise SimulatedCrash(f"crash after append {self.appends}")
        return count

    def read(self, run_id: str, start: int, limit: int | None = None) -> list[str]:
        return self.inner.read(run_id, start, limit)

    def count(self, run_id: str) -> int:
        return self.inner.count(run_id)


class CrashingStore:
    """A checkpoint store that crashes, before writing it, on the ``crash_on``-th ``save`` (1-based),
    or on the first save of a record for which ``crash_when`` is true."""

    def __init__(
        self, inner: CheckpointStore, crash_on: int = 0, crash_when: Callable[[StoredRun], bool] | None = None
    ) -> None:
        self.inner = inner
        self.crash_on = crash_on
        self.crash_when = crash_when
        self.saves = 0

    def create(self, checkpoint: StoredRun) -> StoredRun:
        return self.inner.create(checkpoint)

    def load(self, run_id: str) -> StoredRun:
        return self.inner.load(run_id)

    def claim(self, run_id: str, expected_version: int) -> StoredRun:
        return self.inner.claim(run_id, expected_version)

    def version(self, run_id: str) -> int:
        return self.inner.version(run_id)

    def save(self, checkpoint: StoredRun, expected_version: int) -> StoredRun:
        self.saves += 1
        if self.saves == self.crash_on or (self.crash_when is not None and self.crash_when(checkpoint)):
            self.crash_when = None
            raise SimulatedCrash(f"crash before save {self.saves}")
        return self.inner.save(checkpoint, expected_version)


def log_chunks(log: ChunkLog, run_id: str) -> list[dict[str, Any]]:
    """Every chunk of a run's log, parsed."""
    return [json.loads(c) for c in log.read(run_id, 0)]


def message_of(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """The assistant message the AI SDK client assembles from these chunks."""
    return assemble_ui_message(chunks)


def parse_sse_body(body: bytes) -> list[dict[str, Any]]:
    """The JSON chunks of an SSE body ([DONE] and comments skipped)."""
    parser = SSEParser()
    return [json.loads(data) for data in parser.feed(body) if data != "[DONE]"]


@contextmanager
def serve(app: ChatApp | Any, *, server: str = "uvicorn", **config: Any) -> Iterator[str]:
    """Serve an ASGI ``app`` on a loopback port in a background thread; yields the base URL.

    ``server``: ``"uvicorn"`` (the local server, ``make dev``; ``config`` goes to ``uvicorn.Config``,
    e.g. ``log_level``, ``access_log``) or ``"httpd"`` (the deployed chat function's server,
    :mod:`lambda_fastpath.httpd`; ``config`` goes to its ``serve``)."""
    if server == "httpd":
        with _serve_httpd(app, **config) as url:
            yield url
        return
    # IPPROTO_TCP explicitly: asyncio then turns Nagle off on accepted connections (~40 ms per response otherwise)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # connections queue from now on, so no waiting for the server thread is needed
    port = sock.getsockname()[1]
    uvicorn_server = uvicorn.Server(uvicorn.Config(app, lifespan="on", **{"log_level": "warning", **config}))
    loop_ready = threading.Event()

    def run() -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        loop_ready.set()
        loop.run_until_complete(uvicorn_server.serve(sockets=[sock]))
        loop.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    loop_ready.wait(10)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        uvicorn_server.should_exit = True
        thread.join(15)
        sock.close()


@contextmanager
def _serve_httpd(app: Any, **options: Any) -> Iterator[str]:
    from lambda_fastpath import httpd

    started: list[tuple[str, int]] = []
    failed: list[BaseException] = []
    ready = threading.Event()
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()

    def listening(address: tuple[str, int]) -> None:
        started.append(address)
        ready.set()

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(httpd.serve(app, "127.0.0.1", 0, stop=stop, ready=listening, **options))
        except BaseException as exc:  # reported by the main thread
            failed.append(exc)
            ready.set()
        finally:
            loop.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    if not ready.wait(10) or failed:
        raise RuntimeError("httpd did not start") from (failed[0] if failed else None)
    try:
        yield f"http://127.0.0.1:{started[0][1]}"
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(15)


async def until_due(runner: Any, run_id: str) -> None:
    """Until the parked run is due on the runner's clock (its deadline passed); bounded: 30 s."""
    for _ in range(600):
        if runner.due(runner.load(run_id)):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} never came due")


def user_message(text: str, message_id: str = "u1") -> dict[str, Any]:
    """A UI user message as the client sends it."""
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]}


def gated_agent(gate: threading.Event, text: str = "done") -> Any:
    """An agent whose turn streams ``text-start``, then waits for ``gate`` before it answers ``text``:
    a run that is in progress for as long as a test needs."""
    from durable_harness import Agent
    from durable_harness.models.base import ModelRequest
    from durable_harness.models.scripted import FunctionModel, text_step
    from durable_harness.protocol import harness_parts as hp

    async def waits(request: ModelRequest, step: int) -> Any:
        yield hp.TextStartPart(id="t0")
        while not gate.is_set():
            await asyncio.sleep(0.01)
        for part in text_step(text)[1:]:
            yield part

    return Agent(model=FunctionModel(waits))
