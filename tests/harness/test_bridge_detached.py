"""Detached local bridges (``python -m durable_harness.server.bridge``): the registry, a parent's
death, stale records, the idle timeout. Real processes, real HTTP on loopback."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from durable_harness.harness.bridge import SessionLostError, find, find_or_start
from durable_harness.harness.bridge.app import SECRET_HEADER, SESSION_HEADER
from durable_harness.harness.bridge.registry import (
    BridgeRecord,
    clean_stale,
    is_alive,
    read_record,
    record_path,
    write_record,
)
from durable_harness.harness.programs import process_start_time

from tests.harness.bridge_support import FINISH, PROGRAM, SESSION, collect, delta, wait_until

PARENT = """
import asyncio, json, sys
from durable_harness.harness.bridge import find_or_start

async def main():
    data, session, *command = sys.argv[1:]
    bridge = await find_or_start(data, session, command, idle_seconds=120)
    boot = await bridge.start()
    await bridge.send({"type": "start", "lines": [{"type": "text-delta", "id": "t", "delta": "0"}]}, boot)
    print(json.dumps({"boot": boot, "pid": bridge.pid}), flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


def dead(pid: int) -> bool:
    """Whether ``pid`` has ended (a zombie counts as ended)."""
    return process_start_time(pid) is None


async def test_the_bridge_survives_the_death_of_the_process_that_started_it(tmp_path: Path) -> None:
    # The parent leads a process group of its own, and the whole group is killed (as a supervisor or
    # a Ctrl-C in a terminal does): the bridge, in a session of its own, is not in it.
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path), SESSION, *PROGRAM], stdout=subprocess.PIPE,
                              start_new_session=True)  # fmt: skip
    assert parent.stdout is not None
    started = json.loads(await asyncio.wait_for(asyncio.to_thread(parent.stdout.readline), 60))
    os.killpg(parent.pid, signal.SIGKILL)
    parent.wait(30)
    parent.stdout.close()
    bridge = find(tmp_path, SESSION)  # a new client (a restarted server) finds it through the registry
    assert bridge is not None and bridge.pid == started["pid"]
    try:
        assert (await bridge.status())["bootId"] == started["boot"]
        first = bridge.attach(started["boot"], 0, deadline_seconds=30)
        assert [line.line for line in await collect(first, limit=1)] == [delta(0)]
        await bridge.send({"type": "say", "lines": [delta(1), FINISH]}, started["boot"])
        rest = bridge.attach(started["boot"], first.cursor, deadline_seconds=30)
        assert [(line.seq, line.line) for line in await collect(rest)] == [(1, delta(1)), (2, FINISH)]
        assert rest.reason == "turn-end"
    finally:
        await bridge.destroy()
        await bridge.aclose()
    await wait_until(lambda: dead(started["pid"]) and read_record(tmp_path, SESSION) is None)


async def test_clients_of_one_session_share_one_bridge(tmp_path: Path) -> None:
    bridges = await asyncio.gather(*(find_or_start(tmp_path, SESSION, PROGRAM, idle_seconds=120) for _ in range(3)))
    try:
        assert len({bridge.pid for bridge in bridges}) == 1
        again = await find_or_start(tmp_path, SESSION, PROGRAM)
        assert again.pid == bridges[0].pid
        await again.aclose()
    finally:
        await bridges[0].destroy()
        for bridge in bridges:
            await bridge.aclose()
    await wait_until(lambda: bridges[0].pid is not None and dead(bridges[0].pid))


async def test_stale_records_are_cleaned(tmp_path: Path) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    record = BridgeRecord(session_id="sess_dead", pid=gone.pid, start_time=1, host="127.0.0.1", port=9, secret="x")
    write_record(tmp_path, record)
    assert find(tmp_path, "sess_dead") is None
    assert not record_path(tmp_path, "sess_dead").exists()
    # A live pid that is not the bridge's any more (started at another time): reused, so stale.
    me = process_start_time(os.getpid())
    assert me is not None
    reused = BridgeRecord(session_id="sess_reused", pid=os.getpid(), start_time=me + 1, host="127.0.0.1", port=9,
                          secret="x")  # fmt: skip
    write_record(tmp_path, reused)
    assert clean_stale(tmp_path) == ["sess_reused"]
    assert read_record(tmp_path, "sess_reused") is None
    assert is_alive(os.getpid(), me)  # (and nothing was done to the process that has that pid now)


async def test_a_dead_bridge_is_replaced_and_the_program_it_left_behind_is_killed(tmp_path: Path) -> None:
    bridge = await find_or_start(tmp_path, SESSION, [*PROGRAM, "--ignore-eof"], idle_seconds=120)
    boot = await bridge.start()
    program = (await bridge.status())["pid"]
    assert bridge.pid is not None
    os.kill(bridge.pid, signal.SIGKILL)
    await bridge.aclose()
    await wait_until(lambda: bridge.pid is not None and dead(bridge.pid))
    assert not dead(program)  # a program that ignores its closed stdin outlives the bridge...
    replaced = await find_or_start(tmp_path, SESSION, PROGRAM, idle_seconds=120)
    try:
        await wait_until(lambda: dead(program))  # ...until the stale record is cleaned
        assert replaced.pid != bridge.pid
        assert (await replaced.status())["bootId"] is None  # a new bridge: no boot yet, never the old one's
        with pytest.raises(SessionLostError):  # so the old cursor is answered "session lost"
            await collect(replaced.attach(boot, 0, deadline_seconds=5))
        assert await replaced.start() != boot
    finally:
        await replaced.destroy()
        await replaced.aclose()


async def test_the_idle_timeout_ends_a_detached_bridge_and_its_program(tmp_path: Path) -> None:
    bridge = await find_or_start(tmp_path, SESSION, PROGRAM, idle_seconds=0.5)
    await bridge.start()
    program = (await bridge.status())["pid"]
    await bridge.aclose()
    assert bridge.pid is not None
    await wait_until(lambda: bridge.pid is not None and dead(bridge.pid) and dead(program))
    assert read_record(tmp_path, SESSION) is None


async def test_a_detached_bridge_holds_no_kit_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOL_APPROVAL_SECRET", "kit-secret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "kit-credentials")
    bridge = await find_or_start(tmp_path, SESSION, PROGRAM, idle_seconds=120)
    try:
        assert bridge.pid is not None
        environ = Path(f"/proc/{bridge.pid}/environ").read_bytes().split(b"\0")
        names = {entry.split(b"=", 1)[0].decode() for entry in environ if entry}
        assert names <= {"PATH", "HOME", "LANG", "TZ", "PYTHONPATH"}
        secret = bridge.headers[SECRET_HEADER].encode()
        assert secret not in Path(f"/proc/{bridge.pid}/cmdline").read_bytes()  # it came on stdin
        assert secret not in b"\0".join(environ)
    finally:
        await bridge.destroy()
        await bridge.aclose()


def test_a_local_bridge_refuses_to_run_without_a_secret(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "durable_harness.server.bridge", "--session", SESSION, "--data", str(tmp_path)]
    done = subprocess.run([*command, "--", *PROGRAM], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "needs a secret" in done.stderr


async def test_in_agentcore_mode_the_bridge_adopts_the_invoked_session_and_ends_on_sigterm(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "durable_harness.server.bridge", "--agentcore", "--host", "127.0.0.1",
               "--port", "0", "--", *PROGRAM]  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    try:
        ready = json.loads(await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 60))
        url = f"http://127.0.0.1:{ready['port']}"
        async with httpx.AsyncClient() as http:
            assert (await http.get(url + "/ping")).json()["status"] == "Healthy"  # no secret: IAM guards the invoke
            headers = {SESSION_HEADER: SESSION}
            start = await http.post(url + "/invocations", json={"action": "start"}, headers=headers)
            program = start.json()["pid"]
            status = await http.post(url + "/invocations", json={"action": "status"}, headers=headers)
            assert status.json()["sessionId"] == SESSION
            other = await http.post(url + "/invocations", json={"action": "status"}, headers={SESSION_HEADER: "x" * 40})
            assert other.status_code == 400
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        await wait_until(lambda: dead(program))
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
