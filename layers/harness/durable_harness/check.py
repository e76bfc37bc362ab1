"""``durable-harness check URL``: what a user tries first, against a deployed (or local) server.

The steps, in order, each printed with its result and how long it took; the first failure stops
the check with its reason (exit status 1):

* ``health``: ``GET /health`` answers;
* ``turn``: a chat turn (``--prompt``) streams to exactly one ``finish``, last, with no ``error``
  chunk (a refused model's advice is the reason shown); its timings: time to the first chunk and
  the gaps between chunks (median and largest);
* ``approval``: when the turn, or the ``--approval-prompt`` turn, asks to run a tool that needs
  approval, the approval is granted the way the chat page does (the history POSTed again with the
  answer) and the continuation must run the tool and finish; skipped (and said so) otherwise;
* ``resume-middle`` / ``resume-tail``: the finished run read again from its middle and from its
  last chunks gives the very chunks the turn streamed;
* ``run-api``: ``GET /api/runs/{id}`` reports the finished run with its chunk count, and an
  unknown run is a 404;
* ``cancel``: a turn (``--cancel-prompt``, by default the demo's five-part long task) cancelled
  after its first chunk ends with one ``finish`` and the status ``cancelled``.

Everything goes through :class:`~durable_harness.client.ChatClient`, the project's own client
(resumes and retries included), so the check sees what a client program would.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, TextIO

from .client import ChatClient, ChatClientError, Conversation, ResponseError, TurnStream
from .protocol.ui_chunks import UIMessageChunk

__all__ = ["DEFAULT_CANCEL_PROMPT", "DEFAULT_PROMPT", "CheckFailed", "DeployCheck", "Timings"]

DEFAULT_PROMPT = "What is the weather in Paris?"
DEFAULT_CANCEL_PROMPT = "Do the long task, one part at a time."
UNKNOWN_RUN = "wrun_" + "0" * 26
"""A well-formed run id that no run has (the run API must answer 404)."""


class CheckFailed(Exception):
    """A step of the check failed; ``step`` names it, the message says why."""

    def __init__(self, step: str, reason: str) -> None:
        """The failure of ``step``."""
        super().__init__(reason)
        self.step = step


@dataclass
class Timings:
    """When a stream's chunks arrived, in seconds from the request."""

    arrivals: list[float] = field(default_factory=list)

    @property
    def first_chunk(self) -> float | None:
        """Seconds from the request to the first chunk."""
        return self.arrivals[0] if self.arrivals else None

    def gaps(self) -> list[float]:
        """Seconds between consecutive chunks."""
        return [b - a for a, b in zip(self.arrivals, self.arrivals[1:], strict=False)]

    def describe(self) -> str:
        """``first chunk 0.41 s, per chunk median 0.020 s / max 0.300 s``."""
        if self.first_chunk is None:
            return "no chunk"
        text = f"first chunk {self.first_chunk:.2f} s"
        gaps = self.gaps()
        if gaps:
            text += f", per chunk median {statistics.median(gaps):.3f} s / max {max(gaps):.3f} s"
        return text


@dataclass(eq=False)
class DeployCheck:
    """The check of the server ``client`` talks to (see the module docstring); :meth:`run` runs
    every step.

    ``clock`` measures the timings (monotonic seconds); ``out`` gets one line per step.
    """

    client: ChatClient
    _: KW_ONLY
    out: TextIO
    prompt: str = DEFAULT_PROMPT
    approval_prompt: str | None = None
    cancel_prompt: str = DEFAULT_CANCEL_PROMPT
    clock: Callable[[], float] = time.monotonic

    def run(self) -> None:
        """Every step in order; raises :class:`CheckFailed` at the first failure."""
        self._step("health", self._health)
        chat = self.client.conversation()
        chunks: list[UIMessageChunk] = []
        run_id = self._step("turn", lambda: self._turn(chat, chunks))
        self._step("approval", lambda: self._approval(chat))
        self._step("resume-middle", lambda: self._resume(run_id, chunks, len(chunks) // 2))
        self._step("resume-tail", lambda: self._resume(run_id, chunks, -min(3, len(chunks))))
        self._step("run-api", lambda: self._run_api(run_id, len(chunks)))
        self._step("cancel", self._cancel)

    # --- steps ---------------------------------------------------------------------------------------

    def _health(self) -> str:
        status = self.client.health().get("status")
        if status != "ok":
            raise CheckFailed("health", f"GET /health answered status {status!r}, not 'ok'")
        return "ok"

    def _turn(self, chat: Conversation, into: list[UIMessageChunk]) -> tuple[str, str]:
        timings = Timings()
        into += self._read("turn", chat.send(self.prompt), timings)
        run_id = chat.run_id or ""
        return run_id, f"run {run_id}: {len(into)} chunks, {timings.describe()}, finish {_finish_reason(into)}"

    def _approval(self, chat: Conversation) -> str:
        pending = chat.pending_approvals()
        if not pending and self.approval_prompt:
            self._read("approval", chat.send(self.approval_prompt), Timings())
            pending = chat.pending_approvals()
            if not pending:
                raise CheckFailed("approval", f"the turn {self.approval_prompt!r} asked for no tool approval")
        if not pending:
            return "skipped: the turn asked for no approval (--approval-prompt names a turn that does)"
        names = ", ".join(p["toolName"] for p in pending)
        turn: TurnStream | None = None
        for approval in pending:  # the last answer sends the history, as the chat page does
            turn = chat.answer_approval(approval["approvalId"], True)
        assert turn is not None
        timings = Timings()
        chunks = self._read("approval", turn, timings)
        message = chat.last_assistant_message or {}
        states = {p.get("toolCallId"): p.get("state") for p in message.get("parts", []) if "toolCallId" in p}
        for approval in pending:
            if states.get(approval["toolCallId"]) != "output-available":
                state = states.get(approval["toolCallId"])
                raise CheckFailed("approval", f"approved tool {approval['toolName']} did not run (state {state})")
        return f"approved {names}; continuation {chat.run_id}: {len(chunks)} chunks, {timings.describe()}"

    def _resume(self, run_id: str, chunks: list[UIMessageChunk], start: int) -> str:
        step = "resume-middle" if start >= 0 else "resume-tail"
        timings = Timings()
        resumed = self._read(step, self.client.resume(run_id, start, drop_orphans=False), timings)
        expected = chunks[start:]
        if resumed != expected:
            got, want = [c.type for c in resumed], [c.type for c in expected]
            raise CheckFailed(step, f"from index {start} the run's stream differs from the turn's: {got} != {want}")
        return f"from index {start}: {len(resumed)} chunks as streamed, {timings.describe()}"

    def _run_api(self, run_id: str, count: int) -> str:
        status = self.client.run_status(run_id)
        if status.get("runId") != run_id or status.get("chunkCount") != count:
            raise CheckFailed("run-api", f"GET /api/runs/{run_id} reports {status}, expected {count} chunks")
        try:
            self.client.run_status(UNKNOWN_RUN)
        except ResponseError as exc:
            if exc.status != 404:
                raise CheckFailed("run-api", f"an unknown run got {exc}, expected HTTP 404") from None
        else:
            raise CheckFailed("run-api", f"GET /api/runs/{UNKNOWN_RUN} (no such run) answered 200")
        return f"status {status.get('status')}, {count} chunks; an unknown run is a 404"

    def _cancel(self) -> str:
        turn = self.client.conversation().send(self.cancel_prompt)
        timings = Timings()
        pairs = self._timed(turn, timings)
        first = next(pairs, None)
        if first is None or turn.run_id is None:
            raise CheckFailed("cancel", "the turn to cancel streamed nothing")
        try:
            answer = self.client.cancel(turn.run_id)
        except ResponseError as exc:
            if exc.code == "run_ended":
                raise CheckFailed("cancel", f"the run ended before the cancel: {exc}; pass a --cancel-prompt "
                                  "that takes longer") from None  # fmt: skip
            raise
        chunks = [first, *pairs]
        _one_finish_last("cancel", chunks)
        status = self.client.run_status(turn.run_id).get("status")
        if answer.get("status") != "cancelled" or status != "cancelled":
            raise CheckFailed("cancel", f"the cancel answered {answer}; the run API says {status!r}")
        reason = _finish_reason(chunks)
        return f"run {turn.run_id} cancelled after its first chunk; {len(chunks)} chunks, finish {reason}"

    # --- helpers -------------------------------------------------------------------------------------

    def _step(self, name: str, action: Callable[[], Any]) -> Any:
        started = self.clock()
        try:
            outcome = action()
        except CheckFailed as exc:
            self._line("FAIL", name, started, str(exc))
            raise
        except ChatClientError as exc:  # the client's errors are one line that says what went wrong
            self._line("FAIL", name, started, str(exc))
            raise CheckFailed(name, str(exc)) from None
        value, detail = outcome if isinstance(outcome, tuple) else (outcome, outcome)
        self._line("ok", name, started, detail)
        return value

    def _line(self, mark: str, name: str, started: float, detail: str) -> None:
        print(f"{mark:<4} {name:<13} {self.clock() - started:7.2f} s  {detail}", file=self.out, flush=True)

    def _timed(self, stream: Iterator[UIMessageChunk], timings: Timings) -> Iterator[UIMessageChunk]:
        started = self.clock()
        for chunk in stream:
            timings.arrivals.append(self.clock() - started)
            yield chunk

    def _read(self, step: str, stream: Iterator[UIMessageChunk], timings: Timings) -> list[UIMessageChunk]:
        chunks = list(self._timed(stream, timings))
        _one_finish_last(step, chunks)
        return chunks


def _finish_reason(chunks: list[UIMessageChunk]) -> str:
    return str(getattr(chunks[-1], "finish_reason", None) or "-") if chunks else "-"


def _one_finish_last(step: str, chunks: list[UIMessageChunk]) -> None:
    """Exactly one ``finish``, last, and no ``error`` chunk (its text is the reason)."""
    errors = [str(getattr(c, "error_text", "")) for c in chunks if c.type == "error"]
    if errors:
        raise CheckFailed(step, f"the run streamed an error: {errors[0]}")
    finishes = [i for i, c in enumerate(chunks) if c.type == "finish"]
    if finishes != [len(chunks) - 1]:
        raise CheckFailed(step, f"the stream has {len(finishes)} finish chunk(s), not one at its end")


def run_check(args: Any, out: TextIO, err: TextIO) -> int:
    """``durable-harness check``: run the check of ``args.url``; 0 when every step passed, else 1
    (the failed step and its reason on ``err``)."""
    print(f"durable-harness check · {args.url}", file=out, flush=True)
    with ChatClient(args.url, token=args.token) as client:
        check = DeployCheck(
            client, out=out, prompt=args.prompt, approval_prompt=args.approval_prompt, cancel_prompt=args.cancel_prompt
        )
        try:
            check.run()
        except CheckFailed as exc:
            print(f"durable-harness check: failed at {exc.step}: {exc}", file=err, flush=True)
            return 1
    print("durable-harness check: every step passed", file=out, flush=True)
    return 0
