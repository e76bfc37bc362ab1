"""The local kit's way from a chat POST to the model request (issue 20): what it reads and takes
on the way, over its real storage (SQLite and files in a temporary folder) and real HTTP."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import httpx
from durable_harness.demo import build_demo_agent
from durable_harness.ports import StoredRun
from durable_harness.server.local import build_local_kit
from durable_harness.server.service import ServiceConfig

from tests.support import parse_sse_body, serve, user_message


async def test_a_new_run_is_leased_by_the_time_start_turn_returns(tmp_path: Path) -> None:
    kit = build_local_kit(build_demo_agent(delay=0), tmp_path, static_dir=None)
    state = await kit.service.start_turn({"messages": [user_message("hi")]})
    # Taken in the worker trip that created the run, not by the driver task afterwards.
    leases = {lease.run_id: lease for lease in kit.store.lease_candidates()}
    assert kit.orchestrator.keeper is not None
    assert leases[state.run_id].owner == kit.orchestrator.keeper.owner
    final = await kit.orchestrator.wait(state.run_id)
    assert final is not None and final.status == "finished"
    assert kit.store.lease_candidates() == []  # released once the run needs no driver


def test_a_new_runs_stream_reads_its_log_only_once_chunks_were_committed(tmp_path: Path) -> None:
    # A long poll: the follower would look at the log on its own only after 15 s (keep-alive).
    config = ServiceConfig(poll_seconds=30, idle_poll_seconds=30)
    kit = build_local_kit(build_demo_agent(delay=0), tmp_path, static_dir=None, config=config)
    reads: list[tuple[int, int]] = []
    read, claim, looked = kit.log.read, kit.store.claim, threading.Event()

    def counted(run_id: str, start: int, limit: int | None = None) -> list[str]:
        chunks = read(run_id, start, limit)
        reads.append((start, len(chunks)))
        looked.set()
        return chunks

    def late_claim(run_id: str, version: int) -> StoredRun:
        # The slice waits (a bounded 2 s) for a read of the log: one made now would find it empty.
        looked.wait(timeout=2)
        return claim(run_id, version)

    kit.log.read = counted  # type: ignore[method-assign]
    kit.store.claim = late_claim  # type: ignore[method-assign]
    with serve(kit.app) as url:
        response = httpx.post(f"{url}/api/chat", content=json.dumps({"messages": [user_message("hi")]}), timeout=60)
    chunks = parse_sse_body(response.content)
    assert chunks[0]["type"] == "start" and chunks[-1]["type"] == "finish"
    assert reads and all(n > 0 for _, n in reads), reads  # no read of the empty log before `start`
