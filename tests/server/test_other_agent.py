"""A run belongs to the agent that created it (its ``AGENT`` spec): a server of another agent on the
same data reads it (status, result, stream) but never drives it: its recovery and watchdog leave it
alone, and a continuation or an approval answer is a 409 ``other_agent``.

Real parts: ``durable-harness serve`` processes killed with SIGKILL mid-run and started again on
the same data folder with another ``AGENT`` (the restart suite's agent, whose tool holds while a
file exists, and the Pydantic AI example), then with the run's own; and two local kits of two
agents over one data folder, over HTTP on loopback, for the approval paths.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from durable_harness.demo import SAVED_NOTES, build_demo_agent
from durable_harness.errors import OtherAgentError
from durable_harness.messages import TextPart, UserMessage
from durable_harness.runner import LocalOrchestrator, Runner
from durable_harness.server.local import build_local_kit
from durable_harness.storage.files import FileChunkLog
from durable_harness.storage.sqlite import SqliteCheckpointStore

from tests.harness.serving import free_port, wait_until
from tests.harness.support import answered
from tests.support import parse_sse_body, serve, user_message

REPO = Path(__file__).resolve().parents[2]
RESTART_AGENT = "tests.reliability.restart_agent:build_agent"
PYDANTIC_AGENT = "examples.pydantic_ai.agent:agent"
WAIT = 60.0  # generous bound of every wait on an observed condition (a loaded 2-core machine)


class Server:
    """``durable-harness serve`` in a process of its own, its log lines collected as they come."""

    def __init__(self, agent: str, data: Path, env: dict[str, str]) -> None:
        port = free_port()  # the CLI needs one it can print
        self.url = f"http://127.0.0.1:{port}"
        command = [sys.executable, "-m", "durable_harness", "serve", "--agent", agent, "--data-dir", str(data),
                   "--port", str(port), "--log-level", "info"]  # fmt: skip
        self.process = subprocess.Popen(
            command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.lines: list[str] = []
        threading.Thread(target=self._collect, daemon=True).start()
        wait_until(self._healthy, f"the server of {agent} to answer /health", WAIT)

    def _collect(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    def _healthy(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"the server exited: {''.join(self.lines)}")
        try:
            return httpx.get(f"{self.url}/health", timeout=5).status_code == 200
        except httpx.TransportError:
            return False

    def logged(self, text: str) -> bool:
        return any(text in line for line in self.lines)

    def status(self, run_id: str) -> dict[str, Any]:
        response = httpx.get(f"{self.url}/api/runs/{run_id}", timeout=10)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(WAIT)


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    started: list[Server] = []
    yield started
    for server in started:
        if server.process.poll() is None:
            server.kill()


def read_chunks(url: str, run_id: str, count: int) -> list[dict[str, Any]]:
    """The first ``count`` chunks of the run's stream, read over HTTP (the stream may go on)."""
    chunks: list[dict[str, Any]] = []
    with httpx.stream("GET", f"{url}/api/chat/{run_id}/stream", timeout=WAIT) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: {"):
                chunks.append(json.loads(line[6:]))
                if len(chunks) == count:
                    break
    return chunks


def test_a_server_of_another_agent_leaves_a_killed_servers_run_to_that_agent(
    tmp_path: Path, servers: list[Server]
) -> None:
    gates, data = tmp_path / "gates", tmp_path / "data"
    gates.mkdir()
    (gates / "hold-tool-2").touch()  # the run's second tool call holds there, mid-run
    env = {**os.environ, "RESTART_GATES": str(gates)}
    env.pop("AGENT", None)

    first = Server(RESTART_AGENT, data, env)
    servers.append(first)
    with httpx.stream("POST", f"{first.url}/api/chat", timeout=WAIT,
                      content=json.dumps({"messages": [user_message("Do the three-part task.")]})) as post:  # fmt: skip
        run_id = post.headers["x-workflow-run-id"]
        wait_until((gates / "at-tool-2").exists, "the run to reach its second tool call", WAIT)
        first.kill()

    other = Server(PYDANTIC_AGENT, data, env)
    servers.append(other)
    # Its start-up recovery looked at the run (and, were it to drive it, the run would end at once:
    # another harness cannot open this turn's state).
    wait_until(lambda: other.logged(f"run {run_id} is the agent") or other.status(run_id)["status"] == "failed",
               "the other agent's server to look at the run", WAIT)  # fmt: skip
    status = other.status(run_id)
    assert status["status"] == "ready_for_next_step" and "error" not in status, status
    assert status["agent"] == RESTART_AGENT
    assert (gates / "executions.log").read_text().split() == ["1", "2"]  # nothing ran again
    # Reading works: the status, the result (409: still running), the stream so far.
    result = httpx.get(f"{other.url}/api/runs/{run_id}/result", timeout=10)
    assert result.status_code == 409 and result.json()["error"]["code"] == "run_in_progress"
    chunks = read_chunks(other.url, run_id, status["chunkCount"])
    assert chunks[0]["type"] == "start" and "finish" not in [c["type"] for c in chunks]
    other.kill()

    (gates / "hold-tool-2").unlink()
    again = Server(RESTART_AGENT, data, env)  # the run's own agent: it drives the run to its end
    servers.append(again)
    chunks = parse_sse_body(httpx.get(f"{again.url}/api/chat/{run_id}/stream", timeout=WAIT).content)
    assert [c["type"] for c in chunks].count("finish") == 1 and chunks[-1]["type"] == "finish"
    assert again.status(run_id)["status"] == "finished"
    assert "All three parts are done" in "".join(c.get("delta", "") for c in chunks)
    again.kill()

    reader = Server(PYDANTIC_AGENT, data, env)  # the ended run's result, read by the other agent's server
    servers.append(reader)
    result = httpx.get(f"{reader.url}/api/runs/{run_id}/result", timeout=10)
    assert result.status_code == 200 and result.json()["status"] == "finished", result.text


def test_another_agents_paused_run_is_read_but_its_approvals_are_answered_by_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOL_APPROVAL_SECRET", "s" * 43)
    SAVED_NOTES.clear()
    data = tmp_path / "data"
    mine = build_local_kit(build_demo_agent(delay=0), data, agent_id="tests.agents:notes")
    theirs = build_local_kit(build_demo_agent(delay=0), data, agent_id="tests.agents:other")
    with serve(mine.app) as own, serve(theirs.app) as foreign:
        ask = {"id": "chat-1", "messages": [user_message("Please save a note: call the plumber")]}
        post = httpx.post(f"{own}/api/chat", content=json.dumps(ask), timeout=WAIT)
        paused, chunks = post.headers["x-workflow-run-id"], parse_sse_body(post.content)

        status = httpx.get(f"{foreign}/api/runs/{paused}", timeout=10).json()
        assert status["status"] == "awaiting_tool_approval" and status["agent"] == "tests.agents:notes"
        result = httpx.get(f"{foreign}/api/runs/{paused}/result", timeout=10)
        assert result.status_code == 200 and result.json()["pendingApprovals"] == status["pendingApprovals"]
        assert parse_sse_body(httpx.get(f"{foreign}/api/chat/{paused}/stream", timeout=10).content) == chunks

        (pending,) = status["pendingApprovals"]
        answer = {"approvals": [{"approvalId": pending["approvalId"], "approved": True}]}
        refused = httpx.post(f"{foreign}/api/runs/{paused}/approvals", json=answer, timeout=10)
        assert refused.status_code == 409 and refused.json()["error"]["code"] == "other_agent"
        assert "AGENT=tests.agents:notes" in refused.json()["error"]["message"]
        history = answered("Please save a note: call the plumber", chunks, pending["toolCallId"], True)
        continuation = {"id": "chat-1", "messages": history}
        refused = httpx.post(f"{foreign}/api/chat", content=json.dumps(continuation), timeout=10)
        assert refused.status_code == 409 and refused.json()["error"]["code"] == "other_agent"
        assert SAVED_NOTES == {}

        # Nothing was marked answered: the run's own agent takes the same answer.
        done = parse_sse_body(httpx.post(f"{own}/api/chat", content=json.dumps(continuation), timeout=WAIT).content)
        assert done[-1] == {"type": "finish", "finishReason": "stop"}
        assert SAVED_NOTES and httpx.get(f"{own}/api/runs/{paused}", timeout=10).json()["continuedBy"]


async def test_recovery_drives_its_own_agents_runs_and_those_of_no_agent(tmp_path: Path) -> None:
    """The rule at the runner, as the watchdog and a slice function meet it: another agent's run
    is left alone by recovery and refused by a slice (nothing claimed); a run recorded without an
    agent (a runner without an identity made it) is any agent's."""
    store, log = SqliteCheckpointStore(tmp_path / "runs.sqlite3"), FileChunkLog(tmp_path / "chunks")
    hello = [UserMessage(content=[TextPart(text="hello")])]
    theirs = Runner(build_demo_agent(delay=0), store, log, agent_id="tests.agents:other").create_run(hello)
    nobodys = Runner(build_demo_agent(delay=0), store, log).create_run(hello)
    mine = Runner(build_demo_agent(delay=0), store, log, agent_id="tests.agents:notes")
    orchestrator = LocalOrchestrator(mine, leases=store)
    assert await orchestrator.recover() == [nobodys.run_id]
    assert (await orchestrator.wait(nobodys.run_id)) is not None
    assert mine.load(nobodys.run_id).status == "finished"
    version = store.version(theirs.run_id)
    with pytest.raises(OtherAgentError, match=r"AGENT=tests\.agents:other"):
        await mine.run_slice(theirs.run_id)
    assert store.version(theirs.run_id) == version and mine.load(theirs.run_id).status == "not_started"
    assert await orchestrator.recover() == []
    # Any server may stop a run, but the harness told of it is the run's own: not this one.
    told: list[str] = []

    async def on_cancel(notice: Any) -> None:
        told.append(notice.run_id)

    mine.agent.on_cancel = on_cancel  # type: ignore[method-assign]
    assert (await mine.finalize(theirs.run_id, status="cancelled")).status == "cancelled"
    assert told == []
