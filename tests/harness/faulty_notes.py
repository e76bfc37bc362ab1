"""The example harness program with one fault injected, for the tests (the example stays clean).

``python faulty_notes.py MODE [DIR]``, MODE one of:

* ``kill-mid-step``: the long task's second step stops right after its ``tool-call`` line and waits
  to be killed, like a program that crashes or is OOM-killed there. The test kills it once it has
  seen that call shown (its ``tool-input-available``), so the fault never races the runner
  (``tests.harness.agents.kill_mid_step``). The program writes its pid to ``DIR/kill-mid-step-<runId>.pid`` before
  the line; once ``DIR/kill-mid-step-<runId>.killed`` exists, the run's later programs go on;
* ``ignore-stop``: once per run, after ``stop`` the program hangs at its next line (or its stop check) (it
  must be killed);
* ``invalid-output``: the first line written is not JSON;
* ``exit-early``: once per run, the program exits 0 after the first step without ``finish``;
* ``none``: no fault (the example as it is, for its ``INPUT_LOG``).

The program is the example's own code; only its stdin, output and stop handling are wrapped. ``DIR``
(default: the temporary folder) holds the marker files. ``INPUT_LOG`` names a file where the program
notes every line it reads on stdin, as it read it (so that a test can tell what reached it). A
further argument ``--persistent`` runs it in persistent mode (protocol 2), as the example's flag does.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "harness_program"))
import notes_harness as program

MODE = sys.argv[1] if len(sys.argv) > 1 else ""
DIR = Path(sys.argv[2] if len(sys.argv) > 2 else tempfile.gettempdir())
_first: dict[str, Any] = {}


class _Tap:
    """stdin, remembering the first line (it names the run) and noting each line in ``INPUT_LOG``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def readline(self) -> str:
        line: str = self.inner.readline()
        if not _first and line:
            _first.update(json.loads(line))
        if line and (log := os.environ.get("INPUT_LOG")):
            with open(log, "a", encoding="utf-8") as file:
                file.write(line if line.endswith("\n") else line + "\n")
        return line

    def __iter__(self) -> Iterator[str]:
        while line := self.readline():  # line by line (persistent mode reads stdin this way)
            yield line


def fault_file(run_id: str, kind: str) -> Path:
    """``kill-mid-step``'s files for a run (the test's side: ``tests.harness.agents.kill_mid_step``)."""
    return DIR / f"kill-mid-step-{run_id}.{kind}"


def once() -> bool:
    """True the first time this run asks (a marker file per run and mode)."""
    marker = DIR / f"dh-fault-{MODE}-{_first.get('runId', 'none')}"
    if marker.exists():
        return False
    marker.touch()
    return True


_emit = program.emit
_lines = [0]


def emit(obj: dict[str, Any]) -> None:
    _lines[0] += 1
    if MODE == "invalid-output" and _lines[0] == 1:
        sys.stdout.write("this is not JSON\n")
        sys.stdout.flush()
        time.sleep(5)  # the runner fails the run on that line; it does not wait for us
        return
    cut = MODE == "kill-mid-step" and obj.get("toolCallId") == "call_work_2" and obj["type"] == "tool-call"
    if cut and not fault_file(_first["runId"], "killed").exists():
        fault_file(_first["runId"], "pid").write_text(str(os.getpid()))
        _emit(obj)
        threading.Event().wait()  # mid-step for ever: killed by the test (or by the runner after a stop)
    if MODE == "ignore-stop" and program._stop.is_set() and once():
        time.sleep(3600)  # after stop it never reaches its slice point: killed after the grace
    _emit(obj)
    if MODE == "exit-early" and obj["type"] == "checkpoint" and once():
        os._exit(0)


def stop_requested() -> bool:
    if program._stop.is_set() and MODE == "ignore-stop" and once():
        time.sleep(3600)  # stop came after the step's last line: it hangs here instead
    return program._stop.is_set()


sys.stdin = _Tap(sys.stdin)  # type: ignore[assignment]
program.emit = emit
program.stop_requested = stop_requested

if __name__ == "__main__":
    program.main()
