"""Helpers of the bridge tests: an in-process bridge on loopback over the test program."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from durable_harness.harness.bridge.app import Bridge, BridgeConfig
from durable_harness.harness.bridge.client import Attachment, BridgeConnection, NumberedLine
from durable_harness.server.bridge import serve_bridge

PROGRAM = [sys.executable, str(Path(__file__).with_name("bridge_program.py"))]
SECRET = "s3cr3t-of-the-session"
SESSION = "sess_bridge_test_0123456789abcdefghij"
FINISH = {"type": "finish", "finishReason": {"unified": "stop"}, "totalUsage": {"inputTokens": {}, "outputTokens": {}}}


def delta(i: int) -> dict[str, Any]:
    """A text-delta line numbered ``i``."""
    return {"type": "text-delta", "id": "t", "delta": str(i)}


@contextlib.asynccontextmanager
async def running_bridge(data_dir: Path, *args: str, **config: Any) -> AsyncIterator[tuple[Bridge, BridgeConnection]]:
    """A bridge served in this event loop (over a real program subprocess), and a connection to it."""
    settings: dict[str, Any] = {"session_id": SESSION, "data_dir": data_dir, "secret": SECRET, **config}
    ready: asyncio.Future[Bridge] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(
        serve_bridge(BridgeConfig(command=[*PROGRAM, *args], **settings), ready=ready.set_result)
    )
    bridge = await asyncio.wait_for(ready, 30)
    assert bridge.address is not None
    connection = BridgeConnection(f"http://127.0.0.1:{bridge.address[1]}", SECRET, SESSION)
    try:
        yield bridge, connection
    finally:
        await connection.aclose()
        if not bridge.stopping:
            await bridge.shutdown("test over")
        await asyncio.wait_for(task, 30)


async def collect(attachment: Attachment, limit: int | None = None) -> list[NumberedLine]:
    """The lines of an attach (the first ``limit`` of them, then the stream is dropped)."""
    lines: list[NumberedLine] = []
    async with contextlib.aclosing(attachment.__aiter__()) as stream:
        async for line in stream:
            lines.append(line)
            if limit is not None and len(lines) == limit:
                break  # (the stream is closed here: the client detaches)
    return lines


async def wait_until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    """Wait until ``condition()`` holds (checked every few ms), at most ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise AssertionError("the condition did not hold in time")
        await asyncio.sleep(0.01)
