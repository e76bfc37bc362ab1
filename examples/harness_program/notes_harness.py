#!/usr/bin/env python3
"""A harness program with no dependencies: a small multi-step agent speaking the JSON-lines protocol.

Run by ``ProcessHarness`` (see ``agent.py`` beside this file and ``docs/harness.md``). It reads one
JSON object per line on stdin and writes one per line on stdout: harness stream parts, plus
``{"type":"checkpoint","state":...}`` lines whose state is all it needs to continue later, in
another process. What it does, from the last user message:

* "Save a note: <text>": drafts the note (a step with its own ``draft_note`` tool), then asks to
  run ``save_note``, a tool that needs the user's approval: the turn pauses. Approved, the next
  run saves the note (to ``NOTES_DIR``) and says so; denied, it says it did not.
* "Run a long task in <n> parts": ``n`` steps of its own ``work`` tool, ``STEP_SECONDS`` each
  (default 0.3), then a summary. A long task spans several time slices.
* "What is the weather in <city>?": calls ``get_weather``, a *host* tool defined in the agent file
  and run by the server; its result comes back on stdin.

Each step ends with ``finish-step`` and a checkpoint: a slice may end there. On ``stop`` the
program finishes the step it is in and exits at its end (the runner records that step too, so no
step is done twice). ``STEP_LOG`` names a file where it notes each step it executes (with its pid).
Everything is deterministic, so a step redone after a crash (``replayStep``) shows exactly what it showed before.
"""

from __future__ import annotations

import json
import os
import queue
import re
import sys
import threading
from pathlib import Path
from typing import Any

NO_USAGE = {"inputTokens": {}, "outputTokens": {}}
_inbox: queue.Queue[dict[str, Any]] = queue.Queue()
_stop = threading.Event()
_saved: dict[str, Any] = {}


def emit(obj: dict[str, Any]) -> None:
    """Write one line to the runner."""
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


_turns: queue.Queue[dict[str, Any] | None] = queue.Queue()
_cancel = threading.Event()
_served = [0]  # persistent mode: the turns this process has served (in memory only)


def _read_stdin(persistent: bool = False) -> None:
    """After the first line: tool results go to the inbox; ``stop`` sets the stop flag. In a
    persistent session, ``start``/``continue`` lines are the next turns, ``cancel`` ends the turn
    and ``destroy`` the process."""
    for line in sys.stdin:
        message = json.loads(line)
        kind = message["type"]
        if kind == "stop":
            _stop.set()
        elif persistent and kind in ("start", "continue"):
            _turns.put(message)
        elif persistent and kind == "cancel":
            _cancel.set()
        elif persistent and kind == "destroy":
            break
        else:
            _inbox.put(message)
    _stop.set()  # stdin closed: nobody is listening any more
    _turns.put(None)


def stop_requested() -> bool:
    """True once the runner asked us to stop (the slice ends)."""
    return _stop.is_set()


def log_step(what: str) -> None:
    """Note a step we execute in ``STEP_LOG`` (when set): one line each, with our pid."""
    if path := os.environ.get("STEP_LOG"):
        with open(path, "a", encoding="utf-8") as log:
            log.write(f"{os.getpid()} {what}\n")


def text(step: int, words: str) -> None:
    """A text block of a step, streamed a few words at a time."""
    block = f"t{step}"
    emit({"type": "text-start", "id": block})
    for piece in re.findall(r"\S+\s*", words):
        emit({"type": "text-delta", "id": block, "delta": piece})
    emit({"type": "text-end", "id": block})


def own_tool(call_id: str, name: str, args: dict[str, Any]) -> None:
    """A call of one of our own tools (we run it: providerExecuted)."""
    emit({"type": "tool-call", "toolCallId": call_id, "toolName": name, "input": json.dumps(args),
          "providerExecuted": True})  # fmt: skip


def checkpoint(state: dict[str, Any]) -> None:
    """Everything written so far becomes durable with ``state``: all we need to go on from here."""
    _saved["state"] = state
    emit({"type": "checkpoint", "state": state})


def end_step(state: dict[str, Any] | None, reason: str = "tool-calls") -> None:
    """Close the step and checkpoint the state the next step starts from (a slice point).

    The turn's last step has no state to go on from (None): ``finish`` follows at once, and a
    checkpoint there would offer the runner a slice point in front of it.
    """
    emit({"type": "finish-step", "finishReason": {"unified": reason}, "usage": NO_USAGE})
    if state is not None:
        checkpoint(state)


def finish(reason: str) -> None:
    """End the turn."""
    emit({"type": "finish", "finishReason": {"unified": reason}, "totalUsage": NO_USAGE})


def plan(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The turn's task, from the last user message."""
    said = ""
    for message in reversed(messages):
        if message["role"] == "user":
            content = message["content"]
            said = content if isinstance(content, str) else " ".join(p.get("text", "") for p in content)
            break
    if m := re.search(r"save a note:\s*(.+)", said, re.I | re.S):
        return {"task": "note", "note": m.group(1).strip(), "step": 0}
    if m := re.search(r"long task in (\d+) parts", said, re.I):
        return {"task": "long", "parts": max(1, min(20, int(m.group(1)))), "step": 0}
    if m := re.search(r"weather in ([\w .-]+)", said, re.I):
        return {"task": "weather", "city": m.group(1).strip(" .?"), "step": 0}
    return {"task": "hello", "step": 0}


def run_step(state: dict[str, Any], approvals: list[dict[str, Any]]) -> str | None:
    """Run the state's current step; returns the turn's finish reason when the turn ends."""
    step, task = state["step"], state["task"]
    if task == "note":
        log_step(f"note {step}")
    if task == "note" and step == 0:
        text(0, "Let me draft that note first.")
        draft = {"title": " ".join(state["note"].split()[:3]) or "note", "text": state["note"]}
        own_tool("call_draft", "draft_note", {"text": state["note"]})
        emit({"type": "tool-result", "toolCallId": "call_draft", "toolName": "draft_note", "result": draft})
        end_step({**state, "step": 1, "draft": draft})
        return None
    if task == "note" and step == 1:  # ask for approval, and pause
        own_tool("call_save", "save_note", state["draft"])
        emit({"type": "tool-approval-request", "approvalId": "approval-call_save", "toolCallId": "call_save"})
        end_step({**state, "step": 2})  # pending approval: no slice ends here; `finish` follows
        return "tool-calls"
    if task == "note" and step == 2:  # continued with the user's (verified) answer
        answer = next((a for a in approvals if a["toolCallId"] == "call_save"), None)
        if answer is not None and answer["approved"]:
            folder = Path(os.environ.get("NOTES_DIR", "/tmp/durable-harness-notes"))
            folder.mkdir(parents=True, exist_ok=True)
            name = re.sub(r"[^a-z0-9]+", "-", state["draft"]["title"].lower()).strip("-") + ".txt"
            (folder / name).write_text(state["draft"]["text"] + "\n", encoding="utf-8")
            emit({"type": "tool-result", "toolCallId": "call_save", "toolName": "save_note", "result": {"saved": name}})
            text(2, f"Saved your note as {name}.")
        elif answer is not None:  # denied: the server shows the denial; we only say so
            text(2, "OK, I did not save the note.")
        else:  # no valid answer reached us (a tampered approval never does)
            text(2, "I did not save the note: the approval was missing or not valid.")
        end_step(None, "stop")
        return "stop"
    if task == "long" and step < state["parts"]:
        part = step + 1
        log_step(f"work {part}")
        own_tool(f"call_work_{part}", "work", {"part": part, "of": state["parts"]})
        if _cancel.wait(float(os.environ.get("STEP_SECONDS", "0.3"))):
            return "other"  # cancelled mid-step (persistent mode): the turn ends here
        emit({"type": "tool-result", "toolCallId": f"call_work_{part}", "toolName": "work",
              "result": {"part": part, "done": part == state["parts"]}})  # fmt: skip
        end_step({**state, "step": part})
        return None
    if task == "long":
        text(step, f"All {state['parts']} parts are done.")
        end_step(None, "stop")
        return "stop"
    if task == "weather" and step == 0:
        emit({"type": "tool-call", "toolCallId": "call_weather", "toolName": "get_weather",
              "input": json.dumps({"city": state["city"]})})  # fmt: skip
        # Checkpoint before waiting: were the turn to pause or crash here, we resume waiting.
        checkpoint({**state, "step": 1})
        return run_step({**state, "step": 1}, approvals)
    if task == "weather" and step == 1:
        result = _inbox.get()  # {"type":"tool-result", ...} from the host
        report = result["result"] if not result["isError"] else {"error": result["result"]}
        end_step({**state, "step": 2, "report": report})
        return None
    if task == "weather":
        report = state["report"]
        if "error" in report:
            text(2, f"I could not get the weather: {report['error']}")
        else:
            text(2, f"It is {report['conditions']} in {report['city']}, {report['tempC']} °C.")
        end_step(None, "stop")
        return "stop"
    log_step("hello")
    again = f" This is turn {_served[0]} of this session." if _served[0] > 1 else ""
    text(0, "Hello! Ask me to save a note, to run a long task in 3 parts, or about the weather in a city." + again)
    end_step(None, "stop")
    return "stop"


def first_state(first: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The state and approval answers a turn's first line starts from."""
    if first["type"] == "start":
        return plan(first["messages"]), []
    # continue: from our last checkpoint (replayStep: a crash cut the step; we redo it whole)
    return first["state"], first["approvals"]


def run_turn(state: dict[str, Any], approvals: list[dict[str, Any]], persistent: bool) -> None:
    """Run steps until the turn ends (or, in slice mode, the runner says stop)."""
    while True:
        reason = run_step(state, approvals)
        if reason is not None:
            if persistent:  # protocol 2: the turn's last checkpoint comes before `finish`
                paused = reason == "tool-calls"  # the next turn continues from the approval's step
                checkpoint(_saved["state"] if paused else {"task": state["task"], "step": "done"})
            finish(reason)
            return
        if not persistent and stop_requested():
            return  # the slice ends; our last checkpoint is where the next one starts
        state = _saved["state"]  # the next step starts from exactly what the checkpoint holds


def serve_session() -> None:
    """Persistent mode (protocol 2): one process serves every turn of the session."""
    threading.Thread(target=_read_stdin, args=(True,), daemon=True).start()
    while (first := _turns.get()) is not None:
        _served[0] += 1
        _cancel.clear()
        run_turn(*first_state(first), persistent=True)


def main() -> None:
    """Slice mode: read the first line, then run steps until the turn ends or the runner says
    stop. ``--persistent``: serve the session's turns as they come."""
    if "--persistent" in sys.argv[1:]:
        serve_session()
        return
    state, approvals = first_state(json.loads(sys.stdin.readline()))
    threading.Thread(target=_read_stdin, daemon=True).start()
    run_turn(state, approvals, persistent=False)


if __name__ == "__main__":
    main()
