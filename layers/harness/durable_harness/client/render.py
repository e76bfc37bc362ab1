"""What the terminal client shows: the chunks of a turn as lines, colours, and the spinner.

Text streams as it arrives, reasoning is dimmed, each tool call is one line
(``⚙ get_weather {"city":"Paris"} → {"tempC":21,…}``), and a dropped stream resumes with a short
dim notice. Colours only on a terminal and without ``NO_COLOR``; the spinner only on a terminal.
The commands that use it are in :mod:`.terminal`.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TextIO

from ..protocol.ui_chunks import UIMessageChunk
from ._cursor import ReconnectEvent

_SPIN_AFTER = frozenset({
    "start", "start-step", "finish-step", "reset-step", "tool-input-start", "tool-input-delta", "tool-input-available",
    "tool-output-available", "tool-output-error", "tool-output-denied",
})  # fmt: skip
_NOTEWORTHY_FINISH = frozenset({"length", "content-filter", "error", "other"})


def use_color(stream: TextIO, environ: Mapping[str, str] = os.environ) -> bool:
    """ANSI colours: only on a terminal, never with ``NO_COLOR`` (any non-empty value) or ``TERM=dumb``."""
    if environ.get("NO_COLOR") or environ.get("TERM") == "dumb":
        return False
    return is_terminal(stream)


def is_terminal(stream: Any) -> bool:
    """Whether ``stream`` is a terminal (False for anything that cannot tell)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


@dataclass(frozen=True)
class Style:
    """ANSI styling, or plain text when ``enabled`` is false."""

    enabled: bool

    def _wrap(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.enabled and text else text

    def dim(self, text: str) -> str:
        """Faint text (reasoning, notices)."""
        return self._wrap("2", text)

    def bold(self, text: str) -> str:
        """Bold text (the prompt)."""
        return self._wrap("1", text)

    def red(self, text: str) -> str:
        """Errors."""
        return self._wrap("31", text)

    def yellow(self, text: str) -> str:
        """Questions (approvals)."""
        return self._wrap("33", text)

    def cyan(self, text: str) -> str:
        """Tool names."""
        return self._wrap("36", text)


def compact(value: Any, limit: int = 100) -> str:
    """Compact JSON of ``value``, cut to ``limit`` characters with ``…``."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Spinner:
    """A one-cell spinner drawn by a background thread, either as a line of its own (``label``)
    or right after the text of an open line (``inline``). Every write to the terminal goes through
    :meth:`Renderer.write`, which erases it first under the same lock."""

    FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"

    def __init__(self, out: TextIO, lock: threading.Lock, style: Style, *, interval: float = 0.08) -> None:
        """A spinner on ``out``, sharing ``lock`` with the writer."""
        self.out = out
        self.lock = lock
        self.style = style
        self.interval = interval
        self._label: str | None = None
        self._inline = False
        self._drawn = False
        self._frame = 0
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None

    def start(self, label: str, *, inline: bool = False) -> None:
        """Show the spinner (the caller holds the lock)."""
        self._label, self._inline = label, inline
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="durable-harness-spinner", daemon=True)
            self._thread.start()

    def erase(self) -> None:
        """Hide the spinner (the caller holds the lock)."""
        if self._drawn:
            self.out.write("\b\b  \b\b" if self._inline else "\r\x1b[K")
            self._drawn = False
        self._label = None

    def close(self) -> None:
        """Hide it and stop the thread."""
        with self.lock:
            self.erase()
            self._closed = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(1)

    def _run(self) -> None:
        while not self._wake.wait(self.interval):
            with self.lock:
                if self._closed:
                    return
                self.draw()

    def draw(self) -> None:
        """Draw the next frame, if the spinner is shown (the caller holds the lock)."""
        if self._label is None:
            return
        frame = self.style.dim(self.FRAMES[self._frame % len(self.FRAMES)])
        self._frame += 1
        if self._inline:
            self.out.write(("\b" if self._drawn else " ") + frame)
        else:
            self.out.write(f"\r{frame} {self.style.dim(self._label)}\x1b[K")
        self._drawn = True
        self.out.flush()


class Renderer:
    """Writes a run's chunks to a terminal (or any text stream), compactly."""

    def __init__(self, out: TextIO, style: Style, *, spinner: bool = False) -> None:
        """A renderer on ``out``; ``spinner`` only makes sense on a terminal."""
        self.out = out
        self.style = style
        self.lock = threading.Lock()
        self.spinner = Spinner(out, self.lock, style) if spinner else None
        self.line_open = False
        self._mode: str | None = None  # "text" or "reasoning" while such a part streams
        self._tools: dict[str, tuple[str, Any]] = {}  # tool call id -> (name, input)
        self._open_tool: str | None = None  # the call whose line waits for its result

    # --- output -------------------------------------------------------------------------------------

    def write(self, text: str) -> None:
        """Write ``text`` (erasing the spinner first)."""
        if not text:
            return
        with self.lock:
            if self.spinner is not None:
                self.spinner.erase()
            self.out.write(text)
            self.out.flush()
        self.line_open = not text.endswith("\n")

    def end_line(self) -> None:
        """Move to a fresh line if the current one has text."""
        if self.line_open:
            self.write("\n")
        self._mode = None
        self._open_tool = None

    def line(self, text: str) -> None:
        """Write ``text`` on a line of its own."""
        self.end_line()
        self.write(text + "\n")

    def notice(self, text: str) -> None:
        """A dim line of its own."""
        self.line(self.style.dim(text))

    def error(self, text: str) -> None:
        """A red line of its own."""
        self.line(self.style.red(text))

    def wait(self, label: str = "thinking") -> None:
        """Show the spinner (nothing unless enabled), inline after an open tool line."""
        if self.spinner is None:
            return
        with self.lock:
            if not self.line_open:
                self.spinner.start(label + "…")
            elif self._open_tool is not None:
                self.spinner.start("", inline=True)

    def idle(self) -> None:
        """Hide the spinner."""
        if self.spinner is not None:
            with self.lock:
                self.spinner.erase()
                self.out.flush()

    def close(self) -> None:
        """Stop the spinner thread."""
        if self.spinner is not None:
            self.spinner.close()

    def reconnected(self, event: ReconnectEvent) -> None:
        """The dim notice of a resumed stream."""
        wait = f" in {event.delay:.1f}s" if event.delay else ""
        self.notice(f"↻ {event.reason}; resuming at chunk {event.start_index}{wait}")
        self.wait("reconnecting")

    # --- chunks -------------------------------------------------------------------------------------

    def chunk(self, chunk: UIMessageChunk) -> None:
        """Show one chunk."""
        kind = chunk.type
        data = chunk.to_dict()
        if kind in ("text-start", "reasoning-start"):
            mode = kind.split("-")[0]
            if self._mode != mode:
                self.end_line()
            self._mode = mode
        elif kind == "text-delta":
            if self._mode != "text":
                self.end_line()
                self._mode = "text"
            self.write(data["delta"])
        elif kind == "reasoning-delta":
            if self._mode != "reasoning":
                self.end_line()
                self._mode = "reasoning"
            self.write(self.style.dim(data["delta"]))
        elif kind == "reasoning-end":
            self.end_line()
        elif kind == "text-end":
            self._mode = None
        elif kind == "tool-input-start":
            self.end_line()
        elif kind in ("tool-input-available", "tool-input-error"):
            call_id, name = data["toolCallId"], data["toolName"]
            self._tools[call_id] = (name, data.get("input"))
            self.end_line()
            self.write(f"{self.style.cyan('⚙ ' + name)} {compact(data.get('input'))}")
            self._open_tool = call_id
            if kind == "tool-input-error":
                self._tool_result(call_id, self.style.red(f"✗ {data['errorText']}"))
        elif kind == "tool-approval-request":
            self._tool_result(data["toolCallId"], self.style.yellow("⏸ needs approval"))
        elif kind == "tool-output-available":
            if not data.get("preliminary"):
                self._tool_result(data["toolCallId"], f"→ {compact(data.get('output'))}")
        elif kind == "tool-output-error":
            self._tool_result(data["toolCallId"], self.style.red(f"✗ {data['errorText']}"))
        elif kind == "tool-output-denied":
            self._tool_result(data["toolCallId"], self.style.dim("✗ denied"))
        elif kind == "finish-step":
            self.end_line()
        elif kind == "reset-step":
            self.notice("↺ the step is being retried")
        elif kind == "source-url":
            self.notice(f"↗ {data.get('title') or ''} {data['url']}".replace("↗  ", "↗ "))
        elif kind in ("file", "reasoning-file"):
            self.notice(f"[file {data['mediaType']}]")
        elif kind == "error":
            self.error(f"error: {data['errorText']}")
        elif kind == "abort":
            self.notice("[aborted]")
        elif kind == "finish":
            self.end_line()
            reason = data.get("finishReason")
            if reason in _NOTEWORTHY_FINISH:
                self.notice(f"[finished: {reason}]")
        if kind in _SPIN_AFTER:
            label = f"calling {data['toolName']}" if kind == "tool-input-start" else "thinking"
            self.wait(label)
        elif kind == "finish":
            self.idle()

    def _tool_result(self, call_id: str, result: str) -> None:
        if self._open_tool == call_id and self.line_open:
            self.write(f" {result}\n")
        else:
            name, _ = self._tools.get(call_id, (call_id, None))
            self.line(f"{self.style.cyan('⚙ ' + name)} {result}")
        self._open_tool = None
