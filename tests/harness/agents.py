"""Harnesses for the tests, loadable as ``AGENT=tests.harness.agents:<name>``.

``example`` is the example agent file's harness; the others run ``faulty_notes.py`` (the same
program with one fault) with a short stop grace period, so that a test does not wait 10 s.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from durable_harness.harness import ProcessHarness

from examples.harness_program.agent import agent as example
from examples.harness_program.agent import get_weather, session_agent

HERE = Path(__file__).resolve().parent
GRACE = 1.0
BUILTIN = ["draft_note", "save_note", "work"]
FAULT_DIR = Path(os.environ.get("FAULT_DIR") or tempfile.gettempdir())
"""Where the fault programs keep their marker files (``FAULT_DIR``, so that a test can find them)."""


def faulty(mode: str, *, grace: float = GRACE, fault_dir: Path = FAULT_DIR, **options: Any) -> ProcessHarness:
    """The example program with ``mode``'s fault injected (see ``faulty_notes.py``); it gets
    ``INPUT_LOG``. ``options`` go to the harness (``session="persistent"``: the program's
    persistent mode)."""
    persistent = ["--persistent"] if options.get("session") == "persistent" else []
    return ProcessHarness(
        command=[sys.executable, str(HERE / "faulty_notes.py"), mode, str(fault_dir), *persistent],
        tools=[get_weather],
        env={**example.env, "INPUT_LOG": None},
        builtin_tools=BUILTIN,
        stop_grace_seconds=grace,
        **options,
    )


def misbehaving(mode: str, **options: Any) -> ProcessHarness:
    """``misbehaving.py MODE`` (see there), with ``get_weather`` as its host tool; it gets ``PIDS_DIR``."""
    return ProcessHarness(
        command=[sys.executable, str(HERE / "misbehaving.py"), mode],
        env={"PIDS_DIR": None, **options.pop("env", {})},
        tools=[get_weather],
        **options,
    )


WAITING_ENV: dict[str, str | None] = {"WAIT_DIR": None, "WAIT_TIMEOUT": None, "NAP_SECONDS": None, "HOLD_FILE": None}
waiting = ProcessHarness(command=[sys.executable, str(HERE / "waiting_program.py")], env=WAITING_ENV)
"""``waiting_program.py``: a program that waits for an event (or sleeps) over the wire."""


def waiting_session(**options: Any) -> ProcessHarness:
    """``waiting_program.py --persistent`` in a persistent session (``options``: e.g. ``sessions_dir``)."""
    return ProcessHarness(
        command=[sys.executable, str(HERE / "waiting_program.py"), "--persistent"],
        env=WAITING_ENV, session="persistent", stop_grace_seconds=GRACE, **options,
    )  # fmt: skip


persistent = session_agent(stop_grace_seconds=GRACE)
"""The example program in a persistent session (its bridges register in the server's data folder)."""
destroys_on_finish = session_agent(stop_grace_seconds=GRACE, destroy_on_finish=True)
"""A persistent session that ends when its turn finishes."""
idles_out = session_agent(stop_grace_seconds=GRACE, session_idle_seconds=1)
"""A persistent session that ends after 1 s unused."""
recorded_session = faulty("none", session="persistent")
"""The example program in a persistent session, noting every line it reads in ``INPUT_LOG``."""
session_kills_mid_step = faulty("kill-mid-step", session="persistent")
"""``kill-mid-step`` in a persistent session: the test SIGKILLs the program mid-step (``kill_mid_step``)."""
kills_mid_step = faulty("kill-mid-step")
ignores_stop = faulty("ignore-stop")
invalid_output = faulty("invalid-output")
exits_early = faulty("exit-early")
orphan = misbehaving("orphan")
session_steps = misbehaving("session-steps")
environ = misbehaving("environ")


def kill_mid_step(run_id: str, fault_dir: Path = FAULT_DIR) -> None:
    """The test's half of the ``kill-mid-step`` fault, called once the client (or the log) shows the
    second step's tool call: SIGKILL the program that showed it (it waits mid-step to be killed) and
    let the run's next program go on. Triggered by what was observed, so it never races the runner."""
    pid = int((fault_dir / f"kill-mid-step-{run_id}.pid").read_text())
    (fault_dir / f"kill-mid-step-{run_id}.killed").touch()
    os.kill(pid, signal.SIGKILL)


__all__ = [
    "destroys_on_finish", "environ", "example", "exits_early", "faulty", "idles_out", "ignores_stop", "invalid_output",
    "kill_mid_step", "kills_mid_step", "misbehaving", "orphan", "persistent", "recorded_session",
    "session_kills_mid_step", "session_steps", "waiting", "waiting_session",
]  # fmt: skip
