#!/usr/bin/env python3
"""A harness program that waits (issue 21): the ``wait`` and ``sleep`` lines of protocol 1.

The user's text picks what it does: ``build`` (default) calls its own ``build`` tool, whose start
appends ``started`` to ``$WAIT_DIR/effects.log`` (a side effect that must happen once), writes a
checkpoint, then ``{"type":"wait","name":"build-done"}`` (with ``$WAIT_TIMEOUT`` as its
``timeoutSeconds`` when set) and reports the event's payload (or ``timeout``) as the tool's
result; ``nap`` sleeps ``$NAP_SECONDS`` (default 1) the same way; ``bad`` writes its ``wait``
line after a part without a checkpoint between (a protocol error). When the run parks, the
program is stopped; the next process gets ``continue`` with the last checkpoint, writes the same
line again and is answered.

``--persistent``: the same turns in a persistent session (protocol 2): the process serves turn
after turn (``start`` / ``continue`` lines), writes each turn's last checkpoint before ``finish``,
and, when the run parks, goes on waiting on its stdin for the ``event`` line (or ``cancel``, which
ends the turn). Each turn line it reads and each answer it gets is noted with its pid in
``$WAIT_DIR/pids.log`` (``<pid> start|continue|event|cancel``; ``stray-<type>``: a line that came
between turns). With ``$HOLD_FILE`` set it holds after the answer until that file exists.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

NO_USAGE = {"inputTokens": {}, "outputTokens": {}}


def emit(obj: dict[str, Any]) -> None:
    """One line to the runner."""
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


PERSISTENT = "--persistent" in sys.argv[1:]


def note(what: str) -> None:
    """``<pid> <what>`` in ``$WAIT_DIR/pids.log``: which process saw which line."""
    with (Path(os.environ["WAIT_DIR"]) / "pids.log").open("a") as pids:
        pids.write(f"{os.getpid()} {what}\n")


def answer() -> dict[str, Any]:
    """The runner's ``event`` line (others, such as ``stop``, do not concern a waiting program);
    persistent: ``cancel`` too."""
    for line in sys.stdin:
        message = json.loads(line)
        if message["type"] == "event" or (PERSISTENT and message["type"] == "cancel"):
            if PERSISTENT:
                note(message["type"])
            return message
    sys.exit(0)  # stdin closed: the run parked, nobody answers this process


def said(messages: list[dict[str, Any]]) -> str:
    last = next(m for m in reversed(messages) if m["role"] == "user")
    content = last["content"]
    return content if isinstance(content, str) else " ".join(p.get("text", "") for p in content)


def turn(first: dict[str, Any]) -> None:
    """One turn from its first line: its first step waits, its second answers."""
    if first["type"] == "start":
        text = said(first["messages"])
        state: dict[str, Any] = {"mode": "nap" if "nap" in text else "bad" if "bad" in text else "build"}
    else:
        state = first["state"]
    mode = state["mode"]
    if not state.get("started"):
        with (Path(os.environ["WAIT_DIR"]) / "effects.log").open("a") as effects:
            effects.write("started\n")
        emit({"type": "tool-call", "toolCallId": "c1", "toolName": mode, "input": "{}", "providerExecuted": True})
        state = {**state, "started": True}
        if mode != "bad":
            emit({"type": "checkpoint", "state": state})  # the state the program resumes from
    if mode == "nap":
        emit({"type": "sleep", "name": "nap", "seconds": float(os.environ.get("NAP_SECONDS", "1")),
              "toolCallId": "c1"})  # fmt: skip
        event = answer()
        result: Any = "slept" if event.get("slept") else "woke early"
    else:
        timeout = os.environ.get("WAIT_TIMEOUT")
        emit({"type": "wait", "name": "build-done", "toolCallId": "c1",
              **({"timeoutSeconds": float(timeout)} if timeout else {})})  # fmt: skip
        event = answer()
        result = "timeout" if event.get("timeout") else event.get("payload")
    while (hold := os.environ.get("HOLD_FILE")) and not Path(hold).exists():
        time.sleep(0.01)  # the test's cue (it synchronises on the file), not a wait for the runner
    if event["type"] == "cancel":  # persistent: the user cancelled the waiting turn
        emit({"type": "finish", "finishReason": {"unified": "other"}, "totalUsage": NO_USAGE})
        return
    emit({"type": "tool-result", "toolCallId": "c1", "toolName": mode, "result": result})
    emit({"type": "finish-step", "finishReason": {"unified": "tool-calls"}, "usage": NO_USAGE})
    emit({"type": "checkpoint", "state": {**state, "result": result}})
    emit({"type": "text-start", "id": "t1"})
    emit({"type": "text-delta", "id": "t1", "delta": f"Result: {json.dumps(result, sort_keys=True)}"})
    emit({"type": "text-end", "id": "t1"})
    emit({"type": "finish-step", "finishReason": {"unified": "stop"}, "usage": NO_USAGE})
    if PERSISTENT:  # protocol 2: the turn's last checkpoint comes before `finish`
        emit({"type": "checkpoint", "state": {**state, "result": result, "done": True}})
    emit({"type": "finish", "finishReason": {"unified": "stop"}, "totalUsage": NO_USAGE})


def main() -> None:
    """One turn (slice mode), or the session's turns as they come (``--persistent``)."""
    if not PERSISTENT:
        turn(json.loads(sys.stdin.readline()))
        return
    for line in sys.stdin:
        first = json.loads(line)
        if first["type"] in ("start", "continue"):
            note(first["type"])
            turn(first)
        else:
            note(f"stray-{first['type']}")


if __name__ == "__main__":
    main()
