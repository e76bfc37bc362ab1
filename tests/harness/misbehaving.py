#!/usr/bin/env python3
"""Harness programs that misbehave (or report what they see), for the tests: ``misbehaving.py MODE``.

Every start writes ``leader-<attempt>-<pid>.pid`` to ``PIDS_DIR`` (attempt 0, 1, ... per run) and
every child it forks ``child-<attempt>-<pid>.pid``, so that a test can wait for a program to be
there and check afterwards that every one of them is gone. Modes:

* ``linger``: ends the turn, then never exits; ``close-stdout``: ends the turn, closes stdout and
  never exits; ``child-holds-stdout``: ends the turn with a child holding stdout, and exits;
* ``fork-finish``: forks a child (stdout not inherited), ends the turn, exits 0;
  ``fork-crash``: attempt 0 forks a child, checkpoints a step and exits 1 (no ``finish``); later
  attempts end the turn; ``fork-hang``: forks a child and hangs mid-step (for cancel, shutdown);
  ``fork-step``: attempt 0 forks a child, checkpoints a step (a slice point) and waits for ``stop``;
* ``silent``: writes nothing, ever; ``silent-once``: attempt 0 checkpoints a step, then is silent
  forever; later attempts end the turn; ``heartbeat``: 40 heartbeats 50 ms apart, then ends;
* ``session-steps``: a turn of two steps: the first says what its ``start`` line's ``sessionState``
  held (``previous: none`` without one), checkpoints ``{"said": <the user's text>, "step": 1}`` (a
  slice point) and waits for ``stop``; the next slice's program says ``said: <text>``, ends the turn
  and checkpoints ``{"said": <text>, "step": "done"}`` after ``finish`` (the turn's last state);
* ``echo``: says its first line's ``protocol`` and ``callOptions``; its last checkpoint's
  ``output`` is ``callOptions.answer``; ``host-echo``: calls the host tool ``get_weather`` and
  writes its result back as its own ``tool-result``;
* ``environ``: says its variables' names and whether it can read its parent's
  ``/proc/<ppid>/environ`` (and whether ``TOOL_APPROVAL_SECRET`` is in it);
* ``orphan``: attempt 0 hangs mid-step (its server is killed); a later attempt says whether a
  program of an earlier attempt was still running when it started.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

MODE = sys.argv[1]
PIDS = Path(os.environ["PIDS_DIR"])
USAGE = {"inputTokens": {"total": 3}, "outputTokens": {"total": 2}}


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def say(text: str, block: str = "t") -> None:
    emit({"type": "text-start", "id": block})
    emit({"type": "text-delta", "id": block, "delta": text})
    emit({"type": "text-end", "id": block})


def end_step(reason: str = "stop") -> None:
    emit({"type": "finish-step", "finishReason": {"unified": reason}, "usage": USAGE})


def finish(reason: str = "stop") -> None:
    emit({"type": "finish", "finishReason": {"unified": reason}, "totalUsage": USAGE})


def record(name: str, pid: int) -> None:
    """Write a pid file whole (a test may read it at any moment)."""
    temp = PIDS / f".{name}.tmp"
    temp.write_text(str(pid))
    temp.replace(PIDS / name)


def fork(attempt: int, *, hold_stdout: bool = False) -> None:
    child = subprocess.Popen(  # stays in our process group
        [sys.executable, "-c", "import time; time.sleep(600)"],
        stdin=subprocess.DEVNULL,
        stdout=None if hold_stdout else subprocess.DEVNULL,
    )
    record(f"child-{attempt}-{child.pid}.pid", child.pid)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def forever() -> None:
    while True:
        time.sleep(60)


def main() -> None:
    PIDS.mkdir(parents=True, exist_ok=True)
    earlier = sorted(PIDS.glob("leader-*.pid"))
    attempt = len(earlier)
    first = json.loads(sys.stdin.readline())
    record(f"leader-{attempt}-{os.getpid()}.pid", os.getpid())
    if MODE in ("linger", "close-stdout", "child-holds-stdout"):
        if MODE == "child-holds-stdout":
            fork(attempt, hold_stdout=True)
        say("done")
        end_step()
        finish()
        if MODE == "child-holds-stdout":
            return
        if MODE == "close-stdout":
            sys.stdout.close()
            os.close(1)
        forever()
    if MODE == "fork-finish":
        fork(attempt)
        say("done")
        end_step()
        finish()
        return
    if MODE in ("fork-crash", "silent-once", "fork-step") and attempt == 0:
        if MODE != "silent-once":
            fork(attempt)
        say("step one", "t0")
        end_step("tool-calls")
        emit({"type": "checkpoint", "state": {"step": 1}})
        if MODE == "fork-crash":
            sys.exit(1)
        if MODE == "fork-step":
            for line in sys.stdin:  # until stop
                if json.loads(line)["type"] == "stop":
                    return
        forever()
    if MODE in ("fork-crash", "silent-once", "fork-step"):
        say("step two", "t1")
        end_step()
        finish()
        return
    if MODE == "fork-hang":
        fork(attempt)
        emit({"type": "text-start", "id": "t"})
        forever()
    if MODE == "silent":
        forever()
    if MODE == "heartbeat":
        for _ in range(40):
            emit({"type": "heartbeat"})
            time.sleep(0.05)
        say("still here")
        end_step()
        finish()
        return
    if MODE == "echo":
        options = first.get("callOptions")
        say(json.dumps({"type": first["type"], "protocol": first.get("protocol"), "callOptions": options}))
        end_step()
        finish()
        output = (options or {}).get("answer")
        emit({"type": "checkpoint", "state": {"done": True}, **({"output": output} if output is not None else {})})
        return
    if MODE == "echo-session":  # says what the previous turn's last checkpoint held
        previous = (first.get("sessionState") or {}).get("said", "none")
        said = next(m for m in reversed(first["messages"]) if m["role"] == "user")["content"]
        said = said if isinstance(said, str) else " ".join(p.get("text", "") for p in said)
        say(f"previous: {previous}")
        end_step()
        finish()
        emit({"type": "checkpoint", "state": {"said": said}})
        return
    if MODE == "session-steps":
        if first["type"] == "start":
            said = next(m for m in reversed(first["messages"]) if m["role"] == "user")["content"]
            said = said if isinstance(said, str) else " ".join(p.get("text", "") for p in said)
            previous = json.dumps(first["sessionState"], sort_keys=True) if "sessionState" in first else "none"
            say(f"previous: {previous}", "t0")
            end_step("tool-calls")
            emit({"type": "checkpoint", "state": {"said": said, "step": 1}})
            for line in sys.stdin:  # the slice ends at this slice point
                if json.loads(line)["type"] == "stop":
                    return
            return
        said = first["state"]["said"]
        say(f"said: {said}", "t1")
        end_step()
        finish()
        emit({"type": "checkpoint", "state": {"said": said, "step": "done"}})
        return
    if MODE == "host-echo":
        call = {"type": "tool-call", "toolCallId": "call_w", "toolName": "get_weather", "input": '{"city": "Oslo"}'}
        emit(call)
        result = json.loads(sys.stdin.readline())
        emit({"type": "tool-result", "toolCallId": "call_w", "toolName": "get_weather", "result": result["result"]})
        end_step("tool-calls")
        say(f"It is {result['result']['conditions']}.", "t1")
        end_step()
        finish()
        return
    if MODE == "environ":
        try:
            data = Path(f"/proc/{os.getppid()}/environ").read_bytes()
            parent = "readable, " + ("with" if b"TOOL_APPROVAL_SECRET=" in data else "without") + " the secret"
        except OSError as exc:
            parent = f"unreadable ({exc.strerror})"
        say(json.dumps({"variables": sorted(os.environ), "parent": parent}))
        end_step()
        finish()
        return
    if MODE == "orphan":
        if attempt == 0:
            emit({"type": "text-start", "id": "t"})
            forever()
        running = [p.name for p in earlier if alive(int(p.read_text()))]
        say("overlap: " + ", ".join(running) if running else "alone")
        end_step()
        finish()
        return
    raise SystemExit(f"unknown mode {MODE}")


if __name__ == "__main__":
    main()
