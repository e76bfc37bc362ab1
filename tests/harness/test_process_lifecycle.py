"""ProcessHarness programs that misbehave: the run ends at ``finish``, process groups are killed on
every path, an orphan of a killed server is ended, a silent program times out, and the program's
environment is minimal. The programs are ``misbehaving.py`` (real child processes); the tests wait
on what they observe (pid files, chunks), never on sleeps.
"""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from durable_harness.errors import AgentConfigError
from durable_harness.harness import ProcessHarness
from durable_harness.harness.process import DEFAULT_IDLE_TIMEOUT_SECONDS
from durable_harness.harness.programs import ProgramRegistry, kill_group

from tests.harness import agents
from tests.harness.serving import ROOT, Server, python_for_others, wait_until
from tests.harness.support import Turns, parts_of
from tests.harness.test_process import to_model
from tests.support import user_message


@pytest.fixture
def pids(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "pids"
    monkeypatch.setenv("PIDS_DIR", str(folder))
    return folder


@pytest.fixture
def registry(tmp_path: Path) -> Path:
    return tmp_path / "registry"


def running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie has ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def recorded(folder: Path, kind: str = "") -> list[int]:
    return [int(p.read_text()) for p in sorted(folder.glob(f"{kind}*.pid"))]


async def until(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


async def all_gone(folder: Path) -> None:
    """Every program and child recorded in ``folder`` ends (SIGKILL is delivered asynchronously)."""
    await until(lambda: not [pid for pid in recorded(folder) if running(pid)], "the recorded processes to end")


def program(mode: str, registry: Path, **options: Any) -> ProcessHarness:
    return agents.misbehaving(mode, registry_dir=registry, stop_grace_seconds=0.5, **options)


# --- item 12: the run ends at finish -----------------------------------------------------------


@pytest.mark.parametrize("mode", ["linger", "close-stdout", "child-holds-stdout"])
async def test_a_run_ends_at_finish_whatever_the_program_does_after_it(mode: str, pids: Path, registry: Path) -> None:
    chunks, state = await asyncio.wait_for(Turns(program(mode, registry)).ask("hi"), 60)
    assert state.status == "finished"
    assert chunks[-1] == {"type": "finish", "finishReason": "stop"}
    assert parts_of(chunks)[-1] == {"type": "text", "text": "done", "state": "done"}
    await all_gone(pids)  # the program got its grace, then its process group was killed
    assert not list(registry.glob("*.json"))


# --- item 13: process groups --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "slice_seconds", "texts"),
    [("fork-finish", None, ["done"]), ("fork-crash", None, ["step one", "step two"]),
     ("fork-step", 0, ["step one", "step two"])],
    ids=["finish", "crash", "stop"],
)  # fmt: skip
async def test_a_forked_child_ends_with_its_program(
    mode: str, slice_seconds: float | None, texts: list[str], pids: Path, registry: Path
) -> None:
    chunks, state = await Turns(program(mode, registry), slice_seconds=slice_seconds).ask("hi")
    assert state.status == "finished"
    assert [p["text"] for p in parts_of(chunks) if p["type"] == "text"] == texts
    assert recorded(pids, "child")
    await all_gone(pids)


@pytest.mark.parametrize("path", ["cancel", "shutdown"])
async def test_a_cancel_or_a_shutdown_kills_the_programs_whole_group(path: str, pids: Path, registry: Path) -> None:
    turns = Turns(program("fork-hang", registry))
    run_id = turns.runner.create_run(to_model([user_message("hi")]), message_id="msg_c").run_id
    turns.orchestrator.start(run_id)
    await until(lambda: bool(recorded(pids, "child")), "the program's child")
    if path == "cancel":
        turns.orchestrator.cancel(run_id)
        state = await turns.runner.finalize(run_id, status="cancelled")
        assert state.status == "cancelled"
    else:
        await turns.orchestrator.aclose()
    await all_gone(pids)


def test_an_orphan_of_a_server_that_died_is_ended_before_the_run_goes_on(pids: Path, tmp_path: Path) -> None:
    # A SIGKILLed server cannot kill its program; the restarted server ends it (its pid and start
    # time were recorded) before its own program starts the same step.
    server = Server("tests.harness.agents:orphan", tmp_path / "data", {"PIDS_DIR": str(pids)}).start()
    try:
        run_id = server.start_run("hi")
        (orphan,) = wait_until(lambda: recorded(pids, "leader"), "the first program")
        server.kill()
        assert running(orphan)  # in its own session, it outlived the server
        server.start()  # the same data: the run is driven again at start-up
        result = server.finished(run_id)
        assert result["status"] == "finished" and result["text"] == "alone"
        assert not running(orphan)
    finally:
        server.stop()
        for pid in recorded(pids):
            kill_group(pid)


def test_the_program_cannot_read_the_servers_environment(tmp_path: Path) -> None:
    # The server makes itself non-dumpable: its /proc/<pid>/environ (the approval secret, token
    # hashes, AWS credentials) is not readable by the programs it starts. Root could read it
    # anyway, so a test run as root runs the server (and so the program) as ``nobody``.
    user = "nobody" if os.geteuid() == 0 else None
    python, python_env = python_for_others() if user is not None else (sys.executable, {})
    data = Path(tempfile.mkdtemp(prefix="dh-environ-"))
    try:
        if user is not None:
            entry = pwd.getpwnam(user)
            os.chown(data, entry.pw_uid, entry.pw_gid)
        env = {"PIDS_DIR": str(data / "pids"), "HOME": str(data), "TOOL_APPROVAL_SECRET": "s" * 40, **python_env}
        server = Server("tests.harness.agents:environ", data / "data", env, user=user, python=python).start()
        try:
            result = server.finished(server.start_run("hi"))
        finally:
            server.stop()
        assert result["status"] == "finished"
        seen = json.loads(result["text"])
        assert seen["parent"] == "unreadable (Permission denied)"
        assert "TOOL_APPROVAL_SECRET" not in seen["variables"]
    finally:
        shutil.rmtree(data, ignore_errors=True)


# --- item 14: the idle timeout ------------------------------------------------------------------


def test_the_idle_timeout_is_ten_minutes_unless_configured() -> None:
    assert DEFAULT_IDLE_TIMEOUT_SECONDS == 600.0
    assert ProcessHarness(command=["true"]).idle_timeout_seconds == 600.0
    with pytest.raises(AgentConfigError, match="idle_timeout_seconds"):
        ProcessHarness(command=["true"], idle_timeout_seconds=0)


async def test_a_silent_program_is_killed_and_its_slice_retried_from_the_checkpoint(pids: Path, registry: Path) -> None:
    chunks, state = await Turns(program("silent-once", registry, idle_timeout_seconds=0.5)).ask("hi")
    assert state.status == "finished"
    assert [p["text"] for p in parts_of(chunks) if p["type"] == "text"] == ["step one", "step two"]
    assert len(recorded(pids, "leader")) == 2
    await all_gone(pids)


async def test_a_program_silent_on_every_attempt_fails_the_run_with_a_clear_error(pids: Path, registry: Path) -> None:
    chunks, state = await Turns(program("silent", registry, idle_timeout_seconds=0.3)).ask("hi")
    assert state.status == "failed" and chunks[-1] == {"type": "finish", "finishReason": "error"}
    assert state.error is not None and "wrote nothing for 0.3 s (idle_timeout_seconds)" in state.error
    assert chunks[-2] == {"type": "error", "errorText": state.error}
    assert len(recorded(pids, "leader")) == 3  # the bounded retries
    await all_gone(pids)


async def test_heartbeats_keep_a_quiet_program_alive(pids: Path, registry: Path) -> None:
    # 40 heartbeats 50 ms apart: 2 s without a part, twice the idle timeout.
    chunks, state = await Turns(program("heartbeat", registry, idle_timeout_seconds=1.0)).ask("hi")
    assert state.status == "finished" and parts_of(chunks)[-1]["text"] == "still here"
    assert len(recorded(pids, "leader")) == 1
    assert "heartbeat" not in {c["type"] for c in chunks}


# --- item 15: the environment -------------------------------------------------------------------


async def test_the_program_gets_a_minimal_environment(
    pids: Path, registry: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "OPENAI_API_KEY", "TOOL_APPROVAL_SECRET", "OTHER"):
        monkeypatch.setenv(name, "s3cret-value")
    monkeypatch.setenv("TZ", "UTC")
    harness = program("environ", registry, env={"PIDS_DIR": None, "NAMED": "yes", "UNSET_HERE": None})
    chunks, state = await Turns(harness).ask("hi")
    assert state.status == "finished"
    seen = json.loads(parts_of(chunks)[-1]["text"])["variables"]
    # Python itself may add LC_CTYPE (PEP 538) in the program; HOME and LANG only when the server has them.
    allowed = {"PATH", "HOME", "LANG", "TZ", "PIDS_DIR", "NAMED", "LC_CTYPE"}
    assert {"PATH", "TZ", "PIDS_DIR", "NAMED"} <= set(seen) <= allowed


def test_env_may_not_name_the_servers_secrets() -> None:
    for name in ("TOOL_APPROVAL_SECRET", "TOOL_APPROVAL_SECRET_ARN", "AUTH_TOKEN_HASHES", "AUTH_TOKENS_SECRET"):
        with pytest.raises(AgentConfigError, match=name):
            ProcessHarness(command=["true"], env={name: None})


LOAD_FUNCTION = """
import ctypes, importlib.util, sys
name = sys.argv[1]
libc = ctypes.CDLL(None)
before = libc.prctl(3, 0, 0, 0, 0)  # PR_GET_DUMPABLE
spec = importlib.util.spec_from_file_location(f"{name}_app", f"functions/{name}/app.py")
spec.loader.exec_module(importlib.util.module_from_spec(spec))
print(before, libc.prctl(3, 0, 0, 0, 0))
"""


@pytest.mark.parametrize("function", ["chat", "slice", "trigger", "finalizer"])
def test_every_function_makes_its_process_non_dumpable(function: str, tmp_path: Path) -> None:
    # A fresh interpreter per function: loading its module is what a Lambda cold start does (the
    # chat function's, without RUNS_TABLE, builds the local kit in DATA_DIR).
    env = {"PATH": os.environ.get("PATH", ""), "AWS_REGION": "us-east-1", "POWERTOOLS_TRACE_DISABLED": "true",
           "PYTHONPATH": str(ROOT / "layers" / "harness"), "DATA_DIR": str(tmp_path / "data")}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", LOAD_FUNCTION, function], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "0"]  # dumpable before the module loaded, not after


async def test_program_records_in_a_folder_others_may_write_are_not_trusted(tmp_path: Path) -> None:
    # A record another user could have written might name any of our pids: it is ignored.
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    try:
        folder = tmp_path / "shared"
        registry = ProgramRegistry(folder)
        registry.record("wrun_x", sleeper.pid)
        folder.chmod(0o777)
        await registry.end_orphan("wrun_x")
        assert sleeper.poll() is None
        folder.chmod(0o700)
        await registry.end_orphan("wrun_x")  # ours alone: the orphan is ended
        assert sleeper.wait(30) == -9
    finally:
        sleeper.kill()
        sleeper.wait()
