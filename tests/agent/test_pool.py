"""Sync tools run on a pool of their own (``TOOL_THREADS``): slow tools cannot hold up storage,
streams or other runs. Over real HTTP with the local kit; the timing figures are in
``bench/tool_isolation.py``, this checks causality only."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from durable_harness import Agent, tool
from durable_harness.errors import AgentConfigError
from durable_harness.messages import TextPart, UserMessage
from durable_harness.models.base import ModelRequest, ModelStreamPart
from durable_harness.models.scripted import FunctionModel, text_step, tool_calls_step
from durable_harness.server.local import build_local_kit
from durable_harness.tools.pool import DEFAULT_TOOL_THREADS, set_tool_threads, tool_threads
from pydantic import BaseModel

from tests.support import parse_sse_body, serve, user_message

DEFAULT_EXECUTOR_THREADS = min(32, (os.cpu_count() or 1) + 4)
"""What ``asyncio.to_thread`` (storage, model SDKs) gets: asyncio's default executor size."""
SLOW = DEFAULT_EXECUTOR_THREADS + 2
"""More slow tools at once than the default executor has threads."""


class SlowTools:
    """A sync tool that blocks until released, counting the calls that started and ended."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.lock = threading.Condition()
        self.started = self.ended = 0

    def run(self) -> str:
        with self.lock:
            self.started += 1
            self.lock.notify_all()
        self.release.wait(60)  # bounded: a broken test must not hang the suite
        with self.lock:
            self.ended += 1
        return "done"

    def wait_started(self, count: int, timeout: float = 20) -> None:
        with self.lock:
            assert self.lock.wait_for(lambda: self.started >= count, timeout), (self.started, count)


class Empty(BaseModel):
    pass


def make_agent(slow: SlowTools) -> Agent:
    @tool
    def crunch(input: Empty) -> str:
        """Work for a long time."""
        return slow.run()

    def script(request: ModelRequest, step: int) -> list[ModelStreamPart]:
        last = next(m for m in reversed(request.messages) if isinstance(m, UserMessage))
        prompt = " ".join(p.text for p in last.content if isinstance(p, TextPart))
        if prompt.startswith("slow") and step == 0:
            return tool_calls_step(("c1", "crunch", {}))
        return text_step(f"Reply to {prompt}.")

    return Agent(model=FunctionModel(script), tools=[crunch])


@pytest.fixture
def tool_pool() -> Iterator[None]:
    set_tool_threads(SLOW)  # room for every slow tool at once
    yield
    set_tool_threads(tool_threads())


def post(base_url: str, text: str, timeout: float = 60) -> list[dict[str, Any]]:
    body = json.dumps({"messages": [user_message(text)]})
    return parse_sse_body(httpx.post(f"{base_url}/api/chat", content=body, timeout=timeout).content)


def test_slow_tools_do_not_hold_up_an_unrelated_turn(tmp_path: Path, tool_pool: None) -> None:
    slow = SlowTools()
    kit = build_local_kit(make_agent(slow), tmp_path / "data", static_dir=None)
    results: dict[int, list[dict[str, Any]]] = {}
    with serve(kit.app) as url:
        threads = [
            threading.Thread(target=lambda i=i: results.__setitem__(i, post(url, f"slow {i}"))) for i in range(SLOW)
        ]
        try:
            for thread in threads:
                thread.start()
            slow.wait_started(SLOW)  # every slow tool is running (and blocked)
            hello = post(url, "hello", timeout=20)
            # The whole turn, `finish` included, was stored and streamed while every slow tool
            # still held its thread: it waited for none of them.
            assert slow.ended == 0
            assert hello[-1] == {"type": "finish", "finishReason": "stop"}
            assert "Reply to hello." in "".join(c.get("delta", "") for c in hello)
        finally:
            slow.release.set()
            for thread in threads:
                thread.join(30)
    assert slow.ended == SLOW
    assert all(results[i][-1]["type"] == "finish" for i in range(SLOW)), results


def test_tool_threads_is_read_from_the_environment_and_checked() -> None:
    assert tool_threads({}) == DEFAULT_TOOL_THREADS
    assert tool_threads({"TOOL_THREADS": "4"}) == 4
    for bad in ("0", "-1", "two", "1.5", "٤", "100000"):
        with pytest.raises(AgentConfigError, match="TOOL_THREADS must be a whole number"):
            tool_threads({"TOOL_THREADS": bad})
