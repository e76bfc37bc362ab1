"""The terminal front end of the client: ``durable-harness chat`` and ``durable-harness runs ...``.

A chat asks approvals inline and continues the turn with the answers; ``runs show``, ``follow``
and ``cancel`` use the run API. What a turn looks like on screen (text as it arrives, a line per
tool call, the spinner, colours) is :mod:`.render`'s.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TextIO

from ._common import generate_id
from ._cursor import ReconnectEvent
from .errors import ChatClientError, ResponseError
from .render import Renderer, Style, compact, is_terminal, use_color
from .sync import ChatClient, Conversation, TurnStream

APPROVAL_CHOICES = "[y/N, or n <reason>]"


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
        return is_terminal(self.stdin)

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


def describe_error(exc: ChatClientError) -> str:
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
    renderer = Renderer(term.stdout, style, spinner=is_terminal(term.stdout))
    try:
        with ChatClient(url, token=token, on_reconnect=renderer.reconnected) as client:
            client.health()
            renderer.notice(f"durable-harness chat · {client.url} · Ctrl-D to quit")
            conversation = client.conversation(chat_id=generate_id())
            return _chat_loop(conversation, renderer, style, term)
    except ChatClientError as exc:
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
        with contextlib.suppress(ChatClientError):  # it ended meanwhile: its stream has `finish` anyway
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
    except ChatClientError as exc:
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
    renderer = Renderer(term.stdout, style, spinner=is_terminal(term.stdout) and not as_json)

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
            for raw, chunk in iter(stream.next_pair, None):  # next_pair's StopIteration ends it
                if as_json:
                    term.stdout.write(json.dumps(raw, ensure_ascii=False, separators=(",", ":")) + "\n")
                    term.stdout.flush()
                else:
                    renderer.chunk(chunk)
    except ChatClientError as exc:
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


def run_cancel(url: str, token: str | None, run_id: str, term: Terminal) -> int:
    """``runs cancel``: stop a live run."""
    try:
        with ChatClient(url, token=token) as client:
            result = client.cancel(run_id)
    except ChatClientError as exc:
        return term.fail(describe_error(exc))
    term.stdout.write(f"{result.get('runId', run_id)}: {result.get('status', 'cancelled')}\n")
    return 0
