"""Storage faults under the local kit, over real HTTP: a full disk and a read-only chunk folder.

Two runs are at their tools when the fault starts, and a third one ended before it. While storage
takes no writes the API answers ``503 storage_unavailable`` with ``Retry-After`` (a new POST, a GET
of an unfinished run, a cancel), and serves what was committed (a finished run, a run's status).
Once storage is back every run ends with exactly one ``finish`` by itself: the open POST stream of
a stalled run delivers the rest of the reply, the run whose cancel got a 503 goes on to its end, and
the 503'd POST, sent again, streams its run. Nothing committed before the fault changes.

The faults are real (a 4 MiB tmpfs filled to the last page, a read-only bind mount) where the test
may mount, else injected into the chunk log's writes: :mod:`tests.reliability.disks`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from durable_harness import Agent, tool
from durable_harness.messages import TextPart, UserMessage
from durable_harness.models.base import ModelRequest, ModelStreamPart
from durable_harness.models.scripted import FunctionModel, text_step, tool_calls_step
from durable_harness.protocol.sse import SSEParser
from durable_harness.server.local import LocalKit, build_local_kit
from durable_harness.tools import ToolContext
from pydantic import BaseModel

from tests.reliability.conftest import Report
from tests.reliability.disks import Disk, disk
from tests.support import message_of, parse_sse_body, serve, user_message


class Empty(BaseModel):
    pass


class Work:
    """The agent's tool: blocks until released, counts its executions per task."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.lock = threading.Condition()
        self.executions: dict[str, int] = {}

    def run(self, task: str) -> str:
        with self.lock:
            self.executions[task] = self.executions.get(task, 0) + 1
            self.lock.notify_all()
        self.release.wait(60)
        return f"{task} worked"

    def wait_started(self, *tasks: str) -> None:
        with self.lock:
            assert self.lock.wait_for(lambda: all(t in self.executions for t in tasks), 20), self.executions


def make_agent(worker: Work) -> Agent:
    def script(request: ModelRequest, step: int) -> list[ModelStreamPart]:
        last = next(m for m in reversed(request.messages) if isinstance(m, UserMessage))
        prompt = " ".join(p.text for p in last.content if isinstance(p, TextPart))
        if prompt.startswith("task") and step == 0:
            return tool_calls_step(("c1", "work", {}), text="Working on it.")
        return text_step(f"{prompt.capitalize()} is done.")

    @tool
    def work(input: Empty, context: ToolContext) -> str:
        """Do the task's work."""
        first = context.messages[0]
        assert isinstance(first, UserMessage)
        return worker.run(" ".join(p.text for p in first.content if isinstance(p, TextPart)))

    return Agent(model=FunctionModel(script), tools=[work])


def until(condition: Callable[[], bool], what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


class OpenPost:
    """A POST whose stream is read in a thread, chunk by chunk, as a client would."""

    def __init__(self, url: str, text: str) -> None:
        self.chunks: list[dict[str, Any]] = []
        self.run_id = ""
        self.headers_in = threading.Event()
        self.thread = threading.Thread(target=self._read, args=(url, text), daemon=True)
        self.thread.start()

    def _read(self, url: str, text: str) -> None:
        body = json.dumps({"messages": [user_message(text)]})
        parser = SSEParser()
        with httpx.stream("POST", f"{url}/api/chat", content=body, timeout=60) as response:
            self.run_id = response.headers["x-workflow-run-id"]
            self.headers_in.set()
            for raw in response.iter_raw():
                self.chunks += [json.loads(d) for d in parser.feed(raw) if d != "[DONE]"]


def post(url: str, text: str) -> httpx.Response:
    return httpx.post(f"{url}/api/chat", content=json.dumps({"messages": [user_message(text)]}), timeout=30)


def replay(url: str, run_id: str) -> httpx.Response:
    return httpx.get(f"{url}/api/chat/{run_id}/stream?startIndex=0", timeout=30)


def assert_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, (response.status_code, response.text)
    assert response.json()["error"]["code"] == "storage_unavailable"
    assert int(response.headers["retry-after"]) >= 1


def assert_one_finish_last(chunks: list[dict[str, Any]]) -> None:
    types = [c["type"] for c in chunks]
    assert types.count("finish") == 1 and types[-1] == "finish", types


def break_storage(target: Disk, kind: str, kit: LocalKit) -> None:
    if kind == "full disk":
        target.fill()
    else:
        target.read_only(kit.log.root)


@pytest.mark.parametrize("kind", ["full disk", "read-only chunk folder"])
def test_runs_end_cleanly_after_a_storage_fault_and_nothing_committed_is_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, reliability_report: Report
) -> None:
    work = Work()
    with disk(tmp_path / "disk", monkeypatch) as target:
        kit = build_local_kit(
            make_agent(work), target.root / "data", static_dir=None, lease_seconds=1.0, max_retry_delay=0.2
        )
        with serve(kit.app) as url:
            ended = post(url, "hello")
            ended_id, ended_chunks = ended.headers["x-workflow-run-id"], parse_sse_body(ended.content)
            followed, cancelled = OpenPost(url, "task alpha"), OpenPost(url, "task beta")
            work.wait_started("task alpha", "task beta")
            assert followed.headers_in.wait(20) and cancelled.headers_in.wait(20)
            committed = list(followed.chunks)

            break_storage(target, kind, kit)
            work.release.set()  # the tools end; their results cannot be stored
            until(lambda: kit.health.unavailable, "the runs to hit the fault")

            assert_unavailable(post(url, "hello again"))
            assert_unavailable(replay(url, followed.run_id))
            assert_unavailable(httpx.post(f"{url}/api/runs/{cancelled.run_id}/cancel", timeout=30))
            assert parse_sse_body(replay(url, ended_id).content) == ended_chunks  # served unchanged
            assert httpx.get(f"{url}/api/runs/{ended_id}", timeout=30).json()["status"] == "finished"
            # Stalled, not failed (its model call's checkpoint may or may not have been written).
            assert kit.runner.load(followed.run_id).status in ("not_started", "ready_for_next_step")

            target.repair()
            followed.thread.join(30)
            cancelled.thread.join(30)
            assert not followed.thread.is_alive() and not cancelled.thread.is_alive()
            again = post(url, "hello again")
            assert again.status_code == 200
            assert_one_finish_last(parse_sse_body(again.content))

            # The open stream of the stalled run got the rest of its reply by itself.
            assert_one_finish_last(followed.chunks)
            assert followed.chunks[: len(committed)] == committed
            assert parse_sse_body(replay(url, followed.run_id).content) == followed.chunks
            message = message_of(followed.chunks)
            assert message["parts"][-1] == {"type": "text", "text": "Task alpha is done.", "state": "done"}
            tools = [p for p in message["parts"] if p["type"] == "tool-work"]
            assert [(t["state"], t["output"]) for t in tools] == [("output-available", "task alpha worked")]
            # The run whose cancel got a 503 was not cancelled: it went on to its end.
            assert_one_finish_last(cancelled.chunks)
            assert parse_sse_body(replay(url, cancelled.run_id).content) == cancelled.chunks
            assert parse_sse_body(replay(url, ended_id).content) == ended_chunks
    reliability_report(
        f"storage_fault[{kind}]",
        f"{target.mode}; tool executions {dict(sorted(work.executions.items()))}",
    )
