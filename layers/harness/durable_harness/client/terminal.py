"""The terminal front end of the client: ``durable-harness chat`` and ``durable-harness runs ...``.

Text streams as it arrives, reasoning is dimmed, each tool call is one line
(``⚙ get_weather {"city":"Paris"} → {"tempC":21,…}``), approvals are asked inline and continue
the turn, and a dropped stream resumes with a short dim notice. Colours only on a terminal and
without ``NO_COLOR``; the spinner only on a terminal.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TextIO

from ..protocol.ui_chunks import UIMessageChunk
from ._common import generate_id
from ._cursor import ReconnectEvent
from .errors import ClientError, ResponseError
from .sync import ChatClient, Conversation, TurnStream

APPROVAL_CHOICES = "[y/N, or n <reason>]"
_SPIN_AFTER = frozenset({
    "start", "start-step", "finish-step", "reset-step", "tool-input-start", "tool-input-delta", "tool-input-available",
    "tool-output-available", "tool-output-error", "tool-output-denied",
})  # fmt: skip
_NOTEWORTHY_FINISH = frozenset({"length", "content-filter", "error", "other"})


def use_color(stream: TextIO, environ: Mapping[str, str] = os.environ) -> bool:
    """ANSI colours: only on a terminal, never with ``NO_COLOR`` (any non-empty value) or ``TERM=dumb``."""
    if environ.get("NO_COLOR") or environ.get("TERM") == "dumb":
        return False
    return _isatty(stream)


def _isatty(stream: Any) -> bool:
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


# --- commands ---------------------------------------------------------------------------------------


@dataclass
class Terminal:
    """The streams a command talks to (real ones, or test doubles)."""

    stdin: TextIO
    stdout: TextIO
    stderr: TextIO
    environ: Mapping[str, str]

    @property
    def interactive(self) -> bool:
        """Whether stdin is a terminal (then ``input()`` gives line editing)."""
        return _isatty(self.stdin)

    def read_line(self, prompt: str) -> str:
        """One line from stdin after ``prompt``; EOFError at the end of input."""
        if self.interactive and self.stdin is sys.stdin:
            try:
                return input(prompt)
            except EOFError:
                self.stdout.write("\n")
                raise
        self.stdout.write(prompt)
        self.stdout.flush()
        line = self.stdin.readline()
        self.stdout.write("\n")  # the input is not echoed (and at EOF the prompt's line ends too)
        if not line:
            raise EOFError
        return line.rstrip("\r\n")

    def fail(self, message: str) -> int:
        """Print a one-line error; returns exit status 1."""
        self.stderr.write(f"durable-harness: {message}\n")
        self.stderr.flush()
        return 1


def describe_error(exc: ClientError) -> str:
    """A client error, with a hint where one helps."""
    text = str(exc)
    if isinstance(exc, ResponseError) and exc.status == 401:
        text += " (pass --token or set CHAT_TOKEN)"
    return text


def run_command(args: argparse.Namespace, term: Terminal) -> int:
    """Run ``durable-harness chat`` or ``runs show|follow|cancel`` as parsed by the CLI; the exit status
    (0 ok, 1 a server or network error, already reported in one line; 130 interrupted)."""
    try:
        if args.command == "chat":
            return run_chat(args.url, args.token, term)
        if args.runs_command == "show":
            return run_show(args.url, args.token, args.run, term, as_json=args.json)
        if args.runs_command == "follow":
            return run_follow(args.url, args.token, args.run, term, start_index=args.start_index, as_json=args.json)
        return run_cancel(args.url, args.token, args.run, term)
    except KeyboardInterrupt:
        term.stdout.write("\n")
        return 130


def run_chat(url: str, token: str | None, term: Terminal) -> int:
    """The interactive chat; returns the exit status."""
    style = Style(use_color(term.stdout, term.environ))
    renderer = Renderer(term.stdout, style, spinner=_isatty(term.stdout))
    try:
        with ChatClient(url, token=token, on_reconnect=renderer.reconnected) as client:
            client.health()
            renderer.notice(f"durable-harness chat · {client.url} · Ctrl-D to quit")
            conversation = client.conversation(chat_id=generate_id())
            return _chat_loop(conversation, renderer, style, term)
    except ClientError as exc:
        renderer.end_line()
        return term.fail(describe_error(exc))
    finally:
        renderer.close()


def _chat_loop(conversation: Conversation, renderer: Renderer, style: Style, term: Terminal) -> int:
    while True:
        try:
            text = term.read_line(style.bold("you> "))
        except EOFError:
            return 0
        except KeyboardInterrupt:
            term.stdout.write("\n")
            return 130
        if not text.strip():
            continue
        if text.strip() in ("/quit", "/exit"):
            return 0
        turn: Callable[[], TurnStream] = functools.partial(conversation.send, text)
        while True:
            status = _stream_turn(conversation, turn, renderer)
            if status is not None:
                return status
            pending = conversation.pending_approvals()
            if not pending:
                break
            for request in pending:
                call = f"{request['toolName']} {compact(request['input'])}"
                question = style.yellow(f"Approve {call}? {APPROVAL_CHOICES} ")
                try:
                    answer = term.read_line(question)
                except EOFError:
                    renderer.notice(f"left unanswered: run {conversation.run_id} waits for approval")
                    return 0
                approved, reason = parse_approval(answer)
                conversation.add_approval_response(request["approvalId"], approved, reason)
            turn = conversation.continue_turn


def _stream_turn(conversation: Conversation, start: Callable[[], TurnStream], renderer: Renderer) -> int | None:
    """Stream one turn; None when it ended (normally, or stopped with Ctrl-C), else the exit status.

    Ctrl-C cancels the run and reads its stream on to the ``finish`` the cancel appends, so the
    assistant message in the history stays whole; a second Ctrl-C quits."""
    turn = start()
    renderer.wait("thinking")
    try:
        for chunk in turn:
            renderer.chunk(chunk)
    except KeyboardInterrupt:
        renderer.idle()
        run_id = turn.run_id
        if run_id is None:
            renderer.notice("interrupted")
            return None
        renderer.notice(f"stopping run {run_id}…")
        with contextlib.suppress(ClientError):  # it ended meanwhile: its stream has `finish` anyway
            conversation.client.cancel(run_id)
        try:
            for chunk in turn.resume():
                renderer.chunk(chunk)
        except KeyboardInterrupt:
            return 130
    finally:
        renderer.idle()
        renderer.end_line()
    return None


def parse_approval(answer: str) -> tuple[bool, str | None]:
    """``y``/``yes`` approves; ``n``, ``no``, nothing or anything else denies, with the text after
    ``n``/``no`` as the reason."""
    text = answer.strip()
    word, _, rest = text.partition(" ")
    if word.lower() in ("y", "yes"):
        return True, None
    if word.lower() in ("n", "no"):
        return False, rest.strip() or None
    return False, None


def run_show(url: str, token: str | None, run_id: str, term: Terminal, *, as_json: bool = False) -> int:
    """``runs show``: the run's status."""
    try:
        with ChatClient(url, token=token) as client:
            status = client.run_status(run_id)
    except ClientError as exc:
        return term.fail(describe_error(exc))
    if as_json:
        term.stdout.write(json.dumps(status, indent=2, ensure_ascii=False) + "\n")
        return 0
    term.stdout.write(format_status(status))
    return 0


def format_status(status: Mapping[str, Any]) -> str:
    """The run API's status as aligned ``key  value`` lines."""
    reason = status.get("finishReason")
    rows: list[tuple[str, str]] = [
        ("run", str(status.get("runId", ""))),
        ("status", str(status.get("status", "")) + (f" ({reason})" if reason else "")),
    ]
    for key, label in (("origin", "origin"), ("chatId", "chat"), ("messageId", "message"),
                       ("chunkCount", "chunks"), ("slices", "slices")):  # fmt: skip
        if status.get(key) is not None:
            rows.append((label, str(status[key])))
    usage = status.get("usage")
    if isinstance(usage, dict):
        rows.append(("usage", f"{usage.get('inputTokens', 0)} in, {usage.get('outputTokens', 0)} out tokens"))
    if "output" in status:
        rows.append(("output", compact(status["output"], 200)))
    if status.get("error"):
        rows.append(("error", str(status["error"])))
    for pending in status.get("pendingApprovals") or []:
        call = f"{pending.get('toolName')} {compact(pending.get('input'))}"
        rows.append(("pending", f"{pending.get('approvalId')}  {call}"))
    if status.get("continuedBy"):
        rows.append(("continued", str(status["continuedBy"])))
    return "".join(f"{key:<10} {value}\n" for key, value in rows)


def run_follow(
    url: str, token: str | None, run_id: str, term: Terminal, *, start_index: int = 0, as_json: bool = False
) -> int:
    """``runs follow``: print the run's stream from ``start_index`` until ``finish``, resuming drops."""
    style = Style(use_color(term.stdout, term.environ))
    renderer = Renderer(term.stdout, style, spinner=_isatty(term.stdout) and not as_json)

    def reconnected(event: ReconnectEvent) -> None:
        if as_json:
            wait = f" in {event.delay:.1f}s" if event.delay else ""
            term.stderr.write(f"durable-harness: {event.reason}; resuming at chunk {event.start_index}{wait}\n")
        else:
            renderer.reconnected(event)

    try:
        with (
            ChatClient(url, token=token, on_reconnect=reconnected) as client,
            client.resume(run_id, start_index, drop_orphans=False) as stream,
        ):
            renderer.wait("waiting")
            for raw, chunk in _pairs(stream):
                if as_json:
                    term.stdout.write(json.dumps(raw, ensure_ascii=False, separators=(",", ":")) + "\n")
                    term.stdout.flush()
                else:
                    renderer.chunk(chunk)
    except ClientError as exc:
        renderer.idle()
        renderer.end_line()
        return term.fail(describe_error(exc))
    except KeyboardInterrupt:
        renderer.idle()
        renderer.end_line()
        return 130
    finally:
        renderer.close()
    renderer.end_line()
    return 0


def _pairs(stream: Any) -> Iterator[tuple[dict[str, Any], UIMessageChunk]]:
    while True:
        try:
            yield stream.next_pair()
        except StopIteration:
            return


def run_cancel(url: str, token: str | None, run_id: str, term: Terminal) -> int:
    """``runs cancel``: stop a live run."""
    try:
        with ChatClient(url, token=token) as client:
            result = client.cancel(run_id)
    except ClientError as exc:
        return term.fail(describe_error(exc))
    term.stdout.write(f"{result.get('runId', run_id)}: {result.get('status', 'cancelled')}\n")
    return 0
