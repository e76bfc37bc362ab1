"""The session bridge in this process: real HTTP on loopback, a real program subprocess."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import httpx
import pytest
from durable_harness.harness.bridge import SessionLostError
from durable_harness.harness.bridge import log as log_module
from durable_harness.harness.bridge import program as program_module
from durable_harness.harness.bridge.app import SECRET_HEADER, SESSION_HEADER
from durable_harness.harness.bridge.client import ProgramNotRunningError
from durable_harness.harness.bridge.registry import read_record, session_dir

from tests.harness.bridge_support import FINISH, SECRET, SESSION, collect, delta, running_bridge, wait_until


async def test_lines_are_numbered_and_a_reattach_from_the_cursor_loses_and_repeats_nothing(tmp_path: Path) -> None:
    async with running_bridge(tmp_path) as (served, bridge):
        boot = await bridge.start()
        await bridge.send({"type": "start", "lines": [delta(0), delta(1), delta(2)]}, boot)
        first = bridge.attach(boot, 0, deadline_seconds=30)
        seen = await collect(first, limit=2)  # then the client drops the stream: a slice that ends
        assert [line.seq for line in seen] == [0, 1]
        await wait_until(lambda: served.attached == 0)  # the bridge saw the client go
        await bridge.send({"type": "say", "lines": [delta(3), "not json", FINISH]}, boot)
        second = bridge.attach(boot, first.cursor, deadline_seconds=30)
        seen += await collect(second)
        assert [line.seq for line in seen] == [0, 1, 2, 3, 4, 5]
        assert [line.line for line in seen[:4]] == [delta(0), delta(1), delta(2), delta(3)]
        assert seen[4].line is None and seen[4].invalid is not None and "not JSON" in seen[4].invalid
        assert seen[5].line == FINISH
        assert (second.reason, second.cursor) == ("turn-end", 6)
        # The log on the bridge's disk holds the same numbered lines, in order.
        log = session_dir(tmp_path, SESSION) / f"{boot}.log"
        records = [json.loads(raw) for raw in log.read_text().splitlines()]
        assert [r["seq"] for r in records] == list(range(6))
        assert [r.get("line") for r in records] == [line.line for line in seen]
        # A reattach from any cursor reads the same lines again.
        again = await collect(bridge.attach(boot, 2, deadline_seconds=30))
        assert again == seen[2:]


async def test_an_attach_ends_at_its_deadline_with_the_cursor_reached(tmp_path: Path) -> None:
    async with running_bridge(tmp_path, keepalive_seconds=0.05) as (_, bridge):
        boot = await bridge.start()
        await bridge.send({"type": "start", "lines": [delta(0), delta(1)]}, boot)  # a turn that goes on
        attachment = bridge.attach(boot, 0, deadline_seconds=0.5)
        lines = await asyncio.wait_for(collect(attachment), 30)
        assert [line.seq for line in lines] == [0, 1]
        assert (attachment.reason, attachment.cursor) == ("deadline", 2)
        # Silence on the stream is broken by keep-alive frames carrying the cursor.
        command = {"action": "attach", "bootId": boot, "cursor": 2, "deadlineSeconds": 0.3}
        response = await bridge.http.post(bridge.url + "/invocations", json=command, headers=bridge.headers)
        assert response.headers["content-type"] == "text/event-stream"
        frames = [json.loads(line[6:]) for line in response.text.split("\n\n") if line.startswith("data: ")]
        assert frames[0] == {"frame": "attached", "bootId": boot, "cursor": 2, "running": True, "busy": True}
        assert {"frame": "keepalive", "cursor": 2} in frames
        assert frames[-1] == {"frame": "end", "reason": "deadline", "cursor": 2}


async def test_a_killed_program_restarts_with_a_new_boot_and_the_old_boot_is_lost(tmp_path: Path) -> None:
    async with running_bridge(tmp_path) as (_, bridge):
        boot = await bridge.start()
        await bridge.send({"type": "start", "lines": [delta(0)]}, boot)
        assert [line.seq for line in await collect(bridge.attach(boot, 0, 30), limit=1)] == [0]
        os.killpg((await bridge.status())["pid"], signal.SIGKILL)
        ended = bridge.attach(boot, 1, deadline_seconds=30)
        assert await collect(ended) == []
        assert (ended.reason, ended.exit_code, ended.cursor) == ("exit", -signal.SIGKILL, 1)
        with pytest.raises(ProgramNotRunningError):
            await bridge.send({"type": "say"}, boot)
        restarted = await bridge.start()
        assert restarted != boot
        assert read_record(tmp_path, SESSION).boot_id == restarted  # type: ignore[union-attr]
        with pytest.raises(SessionLostError) as lost:
            await collect(bridge.attach(boot, 1, deadline_seconds=30))
        assert (lost.value.boot_id, lost.value.expected) == (restarted, boot)
        assert "session lost" in str(lost.value)
        with pytest.raises(SessionLostError):
            await bridge.send({"type": "continue", "lines": [delta(9)]}, boot)  # never reaches the new boot
        assert not (session_dir(tmp_path, SESSION) / f"{boot}.log").exists()
        await bridge.send({"type": "continue", "lines": [delta(7)]}, restarted)
        assert [(line.seq, line.line) for line in await collect(bridge.attach(restarted, 0, 30), limit=1)] == [
            (0, delta(7))
        ]


async def test_ping_is_busy_while_a_turn_runs_and_its_time_moves_only_when_the_status_does(tmp_path: Path) -> None:
    ticks = iter(range(1000, 2000))
    async with running_bridge(tmp_path, clock=lambda: float(next(ticks))) as (_, bridge):
        assert await bridge.ping() == {"status": "Healthy", "time_of_last_update": 1000}
        boot = await bridge.start()
        assert await bridge.ping() == {"status": "Healthy", "time_of_last_update": 1000}
        await bridge.send({"type": "start", "lines": [delta(0)]}, boot)
        busy = await bridge.ping()
        assert busy == {"status": "HealthyBusy", "time_of_last_update": 1001}
        assert await bridge.ping() == busy  # a ping that finds the same status changes nothing
        await bridge.send({"type": "say", "lines": [delta(1)]}, boot)
        await collect(bridge.attach(boot, 0, 30), limit=2)
        assert await bridge.ping() == busy  # output inside the turn: still the same status
        await bridge.send({"type": "say", "lines": [FINISH]}, boot)
        ended = bridge.attach(boot, 2, 30)
        await collect(ended)
        assert ended.reason == "turn-end"
        assert await bridge.ping() == {"status": "Healthy", "time_of_last_update": 1002}


async def test_every_request_needs_the_session_secret(tmp_path: Path) -> None:
    async with running_bridge(tmp_path) as (_, bridge):
        url = bridge.url
        async with httpx.AsyncClient() as http:
            for headers in ({}, {SECRET_HEADER: "wrong"}, {SECRET_HEADER: SECRET[:-1]}):
                ping = await http.get(url + "/ping", headers=headers)
                invoke = await http.post(url + "/invocations", json={"action": "start"}, headers=headers)
                assert (ping.status_code, invoke.status_code) == (401, 401)
                assert SECRET_HEADER in invoke.json()["message"]
            assert (await bridge.status())["bootId"] is None  # the refused start did nothing
            ok = await http.get(url + "/ping", headers={SECRET_HEADER: SECRET})
            assert ok.json()["status"] == "Healthy"
            other = await http.get(url + "/ping", headers={SECRET_HEADER: SECRET, SESSION_HEADER: "sess_other" * 4})
            assert other.status_code == 400 and "another session" in other.json()["message"]


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        (b"not json", 400, "JSON object"),
        (b"[1]", 400, "JSON object"),
        (b'{"action": "fly"}', 400, '"action" must be one of'),
        (b'{"action": "send"}', 400, '"line"'),
        (b'{"action": "send", "line": {"type": 3}}', 400, '"line"'),
        (b'{"action": "attach", "cursor": 0, "deadlineSeconds": 5}', 400, '"bootId"'),
        (b'{"action": "attach", "bootId": "b", "cursor": -1, "deadlineSeconds": 5}', 400, '"cursor"'),
        (b'{"action": "attach", "bootId": "b", "cursor": 0}', 400, '"deadlineSeconds"'),
        (b'{"action": "attach", "bootId": "b", "cursor": 0, "deadlineSeconds": 7200}', 400, '"deadlineSeconds"'),
    ],
)
async def test_a_bad_command_is_a_400_that_says_what_to_fix(
    tmp_path: Path, body: bytes, status: int, says: str
) -> None:
    async with running_bridge(tmp_path) as (_, bridge):
        response = await bridge.http.post(bridge.url + "/invocations", content=body, headers=bridge.headers)
        assert response.status_code == status
        assert says in response.json()["message"]
        wrong_path = await bridge.http.get(bridge.url + "/", headers=bridge.headers)
        assert wrong_path.status_code == 404


async def test_an_attach_past_the_end_of_the_boot_is_a_400(tmp_path: Path) -> None:
    async with running_bridge(tmp_path) as (_, bridge):
        boot = await bridge.start()
        command = {"action": "attach", "bootId": boot, "cursor": 5, "deadlineSeconds": 1}
        response = await bridge.http.post(bridge.url + "/invocations", json=command, headers=bridge.headers)
        assert response.status_code == 400 and "past the end" in response.json()["message"]


async def test_the_program_gets_a_minimal_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TOOL_APPROVAL_SECRET", "AUTH_TOKEN_HASHES", "AWS_SECRET_ACCESS_KEY", "SOME_SETTING"):
        monkeypatch.setenv(name, "must-not-leak")
    monkeypatch.setenv("LANG", "C.UTF-8")
    env = {"GIVEN": "1"}
    async with running_bridge(tmp_path, env=env, pass_env=("SOME_SETTING",)) as (_, bridge):
        boot = await bridge.start()
        await bridge.send({"type": "start", "env": True}, boot)
        [line] = await collect(bridge.attach(boot, 0, 30), limit=1)
        seen = line.line["rawValue"]
        assert set(seen) - {"PATH", "HOME", "LANG", "TZ"} <= {"GIVEN", "SOME_SETTING", "LC_CTYPE"}
        assert (seen["GIVEN"], seen["SOME_SETTING"], seen["LANG"]) == ("1", "must-not-leak", "C.UTF-8")
        assert "TOOL_APPROVAL_SECRET" not in seen and "AWS_SECRET_ACCESS_KEY" not in seen


async def test_destroy_tells_the_program_then_ends_the_bridge_and_its_record(tmp_path: Path) -> None:
    mark = tmp_path / "mark"
    async with running_bridge(tmp_path, "--mark", str(mark)) as (served, bridge):
        boot = await bridge.start()
        pid = (await bridge.status())["pid"]
        assert read_record(tmp_path, SESSION) is not None
        await bridge.destroy()
        await asyncio.wait_for(served.stopped.wait(), 30)
        assert mark.read_text() == "destroyed"
        assert served.boot is not None and served.boot.exit_code == 0 and served.boot.pid == pid
        assert read_record(tmp_path, SESSION) is None
        assert not (session_dir(tmp_path, SESSION) / f"{boot}.log").exists()


async def test_a_program_that_ignores_destroy_is_killed_after_the_grace(tmp_path: Path) -> None:
    async with running_bridge(tmp_path, "--ignore-destroy", "--ignore-eof", grace_seconds=0.2) as (served, bridge):
        await bridge.start()
        await bridge.destroy()
        await asyncio.wait_for(served.stopped.wait(), 30)
        assert served.boot is not None and served.boot.exit_code == -signal.SIGKILL


async def test_the_idle_timeout_ends_the_bridge_but_not_while_a_turn_runs(tmp_path: Path) -> None:
    async with running_bridge(tmp_path, idle_seconds=0.3) as (served, bridge):
        boot = await bridge.start()
        # A step longer than the idle timeout, with no client attached: the turn keeps the bridge.
        await bridge.send({"type": "start", "after": 1.0, "lines": [delta(0)]}, boot)
        await wait_until(lambda: served.boot is not None and served.boot.log.count == 1)
        assert not served.stopping
        await bridge.send({"type": "say", "lines": [FINISH]}, boot)
        lines = await collect(bridge.attach(boot, 0, 30))
        assert [line.line for line in lines] == [delta(0), FINISH]
        # Then no turn and no client: it ends, with its program.
        await asyncio.wait_for(served.stopped.wait(), 30)
        assert served.boot is not None and served.boot.exited.is_set()
        assert read_record(tmp_path, SESSION) is None


async def test_lines_that_are_not_json_or_too_long_are_numbered_as_invalid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(log_module, "MAX_LINE_BYTES", 1000)
    monkeypatch.setattr(program_module, "MAX_LINE_BYTES", 1000)
    with_cr = '{"type":"text-delta",\r"id":"t","delta":"cr"}'
    lines = ["x" * 200_000, {"rawHex": "ff7b7d"}, with_cr, "NaN", "[1, 2]", FINISH]
    async with running_bridge(tmp_path) as (_, bridge):
        boot = await bridge.start()
        await bridge.send({"type": "start", "lines": lines}, boot)
        seen = await collect(bridge.attach(boot, 0, 30))
        assert [line.seq for line in seen] == list(range(6))
        assert seen[0].invalid == "the line is longer than 1000 bytes"
        assert seen[1].invalid == "it is not UTF-8"
        assert seen[2].line == {"type": "text-delta", "id": "t", "delta": "cr"}  # (a CR would break SSE framing)
        assert seen[3].invalid is not None and "not JSON" in seen[3].invalid
        assert (seen[4].line, seen[5].line) == ([1, 2], FINISH)


async def test_kill_ends_the_program_but_not_the_bridge(tmp_path: Path) -> None:
    async with running_bridge(tmp_path, "--ignore-eof") as (served, bridge):
        boot = await bridge.start()
        await bridge.send({"type": "start", "lines": [delta(0)]}, boot)  # a turn that never ends by itself
        assert [line.line for line in await collect(bridge.attach(boot, 0, 30), limit=1)] == [delta(0)]
        await bridge.send({"type": "cancel"}, boot)  # (which this program ignores)
        assert (await bridge.ping())["status"] == "HealthyBusy"
        assert await bridge.kill(boot) == -signal.SIGKILL
        assert (await bridge.ping())["status"] == "Healthy"
        ended = bridge.attach(boot, 1, deadline_seconds=30)
        assert await collect(ended) == []
        assert (ended.reason, ended.exit_code, ended.cursor) == ("exit", -signal.SIGKILL, 1)
        assert not served.stopping
        again = await bridge.start()
        assert again != boot
        with pytest.raises(SessionLostError):
            await bridge.kill(boot)
