"""Client drops: a Python client that loses its connection again and again still gets every chunk once.

The real local server (on loopback: uvicorn, and the deployed chat function's server, httpd; SQLite
and files, the in-process orchestrator slicing at every step) serves a model that streams ~200
chunks over two steps. The client reads the SSE stream of the POST (or of a GET), drops the
connection after ``k`` chunks (``k`` seeded-random), and resumes with ``GET ?startIndex=<chunks
received so far>``, as ``WorkflowChatTransport`` does (reference/ui-message-stream.md §9.3, §9.7),
maybe dropping again several times. Drops happen on live runs (the POST itself, and GET followers
that join while the run streams) and on finished runs (their replay). Every session must end with
exactly the run's log, so the same message as a client that never dropped. (The real AI SDK client
has its own smaller drop set in tests/node/test/compat.test.js.)
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from durable_harness import Agent, tool
from durable_harness.models.base import ModelRequest, ModelStreamPart, finish
from durable_harness.models.scripted import FunctionModel
from durable_harness.protocol import harness_parts as hp
from durable_harness.protocol.sse import SSEParser
from durable_harness.server.local import build_local_kit
from pydantic import BaseModel

from tests.reliability.conftest import Report
from tests.support import message_of, serve, user_message

SEED = 20240611
LIVE_RUNS = 6
FOLLOWERS = 2  # GET sessions that join each live run while it streams
REPLAYS = 90  # sessions on finished runs
MIN_DROPS = 200


class City(BaseModel):
    city: str


@tool
def forecast(input: City) -> dict[str, Any]:
    """The forecast for a city."""
    return {"city": input.city, "days": ["sun", "rain", "sun"]}


def long_steps(request: ModelRequest, step: int) -> list[ModelStreamPart]:
    """Step 0: reasoning, ~90 text deltas and a tool call; step 1: ~90 more text deltas."""
    parts: list[ModelStreamPart] = []
    if step == 0:
        parts += [hp.ReasoningStartPart(id="r0")]
        parts += [hp.ReasoningDeltaPart(id="r0", delta=f"thought {i}. ") for i in range(20)]
        parts += [hp.ReasoningEndPart(id="r0"), hp.TextStartPart(id="t0")]
        parts += [hp.TextDeltaPart(id="t0", delta=f"word{i} ") for i in range(90)]
        parts += [hp.TextEndPart(id="t0")]
        raw = json.dumps({"city": "Oslo"})
        parts += [
            hp.ToolInputStartPart(id="call_1", tool_name="forecast"),
            hp.ToolInputDeltaPart(id="call_1", delta=raw),
            hp.ToolInputEndPart(id="call_1"),
            hp.ToolCallPart(tool_call_id="call_1", tool_name="forecast", input=raw),
            finish("tool-calls", input_tokens=10, output_tokens=120),
        ]
    else:
        parts += [hp.TextStartPart(id="t1")]
        parts += [hp.TextDeltaPart(id="t1", delta=f"then{i} ") for i in range(90)]
        parts += [hp.TextEndPart(id="t1"), finish("stop", input_tokens=20, output_tokens=90)]
    return parts


@dataclass
class Session:
    """What one client session got."""

    run_id: str
    chunks: list[dict[str, Any]]
    drops: int
    connections: int
    live_drops: int
    """Drops on a connection that began while the run was still streaming (its log had no finish)."""


async def read_until(response: httpx.Response, limit: int | None, received: list[dict[str, Any]]) -> bool:
    """Read SSE chunks into ``received``; False (the connection is dropped) after ``limit`` of them
    unless ``finish`` came. Like the transport, only complete, parsed chunks count."""
    if limit == 0:
        return False
    parser, got = SSEParser(), 0
    async for raw in response.aiter_raw():
        for data in parser.feed(raw):
            if data == "[DONE]":
                continue
            chunk = json.loads(data)
            received.append(chunk)
            got += 1
            if chunk["type"] == "finish":
                return True
            if limit is not None and got >= limit:
                return False  # leaving the `async with` closes the socket mid-stream
    return False  # the body ended without finish: reconnect


async def session(
    client: httpx.AsyncClient,
    base: str,
    drops: list[int],
    *,
    post: dict[str, Any] | None = None,
    run_id: str | None = None,
    total: int | None = None,
) -> Session:
    """Read one run's stream from the start, dropping after ``drops[i]`` chunks on connection ``i``."""
    received: list[dict[str, Any]] = []
    live = 0
    for attempt in range(len(drops) + 3):  # bounded: after the planned drops, reading goes to the end
        limit = drops[attempt] if attempt < len(drops) else None
        if attempt == 0 and post is not None:
            request = client.stream("POST", f"{base}/api/chat", content=json.dumps(post))
        else:
            assert run_id is not None
            url = f"{base}/api/chat/{run_id}/stream"
            request = client.stream("GET", url, params={"startIndex": len(received)})
        async with request as response:
            assert response.status_code == 200, (response.status_code, await response.aread())
            run_id = run_id or response.headers["x-workflow-run-id"]
            tail = int(response.headers["x-workflow-stream-tail-index"])
            finished = await read_until(response, limit, received)
        if finished:
            assert run_id is not None
            return Session(run_id, received, drops=attempt, connections=attempt + 1, live_drops=live)
        live += total is not None and tail < total - 1  # this connection was dropped while the run was live
    raise AssertionError(f"no finish after {len(drops) + 3} connections ({len(received)} chunks)")


def plan(rng: random.Random, total: int) -> list[int]:
    """1-4 drops at random positions (0 included: dropped before the first chunk), all before the end."""
    positions, left = [], total - 1
    for _ in range(rng.randint(1, 4)):
        if left <= 0:
            break
        k = rng.randint(0, min(left - 1, rng.choice([5, 40, left - 1])))
        positions.append(k)
        left -= k
    return positions


@pytest.fixture(params=["uvicorn", "httpd"])
def base_url(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    agent = Agent(model=FunctionModel(long_steps, delay=0.001), tools=[forecast])
    kit = build_local_kit(agent, tmp_path / "data", slice_seconds=0)
    with serve(kit.app, server=request.param) as url:
        yield url


async def test_clients_that_drop_and_resume_anywhere_get_the_undropped_message(
    base_url: str, reliability_report: Report
) -> None:
    rng = random.Random(SEED)
    began = time.monotonic()
    limits = httpx.Limits(max_connections=50, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=30, limits=limits) as client:
        # The undropped reference, and the total a run has (every run of this model is alike).
        whole = await session(client, base_url, [], post={"id": "chat-ref", "messages": [user_message("go")]})
        total = len(whole.chunks)
        reference = message_of(whole.chunks)
        assert total >= 200 and whole.chunks[-1]["type"] == "finish"
        assert [p["type"] for p in reference["parts"]].count("step-start") == 2

        runs: dict[str, dict[str, Any]] = {whole.run_id: {"id": "chat-ref", "messages": [user_message("go")]}}
        sessions: list[Session] = []
        live = 0
        for i in range(LIVE_RUNS):
            body = {"id": f"chat-{i}", "messages": [user_message("go")]}
            # The POST streams the new run live; followers join while it runs.
            first = asyncio.create_task(session(client, base_url, plan(rng, total), post=body, total=total))
            run_id = await _run_id_of(client, base_url, body)
            followers = [
                session(client, base_url, plan(rng, total), run_id=run_id, total=total) for _ in range(FOLLOWERS)
            ]
            done = await asyncio.gather(first, *followers)
            live += sum(s.live_drops for s in done)
            sessions += done
            runs[run_id] = body
        # Finished runs: their replay, from a GET or from the retried POST (which gets the same run).
        for _ in range(REPLAYS):
            run_id = rng.choice(sorted(runs))
            if rng.random() < 0.3:
                s = await session(client, base_url, plan(rng, total), post=runs[run_id])
                assert s.run_id == run_id
            else:
                s = await session(client, base_url, plan(rng, total), run_id=run_id)
            sessions.append(s)

        logs: dict[str, list[dict[str, Any]]] = {}
        for run_id in runs:  # each run's log, read once without drops
            logs[run_id] = (await session(client, base_url, [], run_id=run_id)).chunks
    for s in sessions:
        assert s.chunks == logs[s.run_id]  # every chunk exactly once, in order
        message = message_of(s.chunks)
        assert message == message_of(logs[s.run_id])
        assert {k: v for k, v in message.items() if k != "id"} == {k: v for k, v in reference.items() if k != "id"}
    drops = sum(s.drops for s in sessions)
    print(f"client drops: {drops} ({live} on live runs) in {len(sessions)} sessions")
    reliability_report(
        "client_drops", f"{drops} ({live} live) in {len(sessions)} sessions ({time.monotonic() - began:.1f} s)"
    )
    assert drops >= MIN_DROPS and live >= 2 * LIVE_RUNS  # both kinds, live ones on every run on average


async def _run_id_of(client: httpx.AsyncClient, base: str, body: dict[str, Any]) -> str:
    """The run a chat turn has (a retried POST names the run the first one started, or starts it)."""
    async with client.stream("POST", f"{base}/api/chat", content=json.dumps(body)) as response:
        assert response.status_code == 200
        return response.headers["x-workflow-run-id"]
