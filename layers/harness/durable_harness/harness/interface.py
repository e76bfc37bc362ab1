"""The harness adapter interface: what the durable runner needs from any agent runtime (decision D12).

A *harness* is an agent runtime seen through one turn at a time. For every time slice the runner
opens a :class:`HarnessTurn` with a :class:`StartTurn` (a new turn on the conversation) or a
:class:`ContinueTurn` (the state of the turn's last checkpoint, and the verified answers to its
approval requests when the turn was paused), and reads its events:

* harness stream parts (:mod:`durable_harness.protocol.harness_parts`, the 19 seed types), which
  the runner translates into UI message chunks for the client;
* UI message chunks, for what the harness protocol cannot say (the built-in loop uses a few);
* :class:`Checkpoint` events carrying the adapter's own opaque JSON state: every chunk before a
  checkpoint becomes durable together with that state (a ``deferrable`` one may be superseded by
  the next checkpoint instead of being written).

The rules the runner applies, the same for every harness:

* A ``finish-step`` part directly followed by a checkpoint (not ``deferrable``) is a **slice
  point**: when the slice's time budget is spent there, the runner calls :meth:`HarnessTurn.stop`
  (the adapter may hand back one last checkpoint) and the next slice continues from the last
  checkpoint's state.
* A slice that died mid-step is retried from the last checkpoint with ``replay_step=True``: the
  client has been sent ``reset-step`` and the adapter re-sends what the current step had shown.
* A ``tool-approval-request`` part pauses the turn: the runner signs the request for the client,
  records it in the approval ledger, and when the turn's ``finish`` part arrives the run ends
  ``awaiting_tool_approval``. No slice ends while approval requests are pending. The answer
  (a chat POST or the run API) is verified by the runner and starts a new run whose first slice
  continues the paused run's last checkpoint with :attr:`ContinueTurn.continuation`.
* A :class:`Wait` event parks the run (decision D16): it follows a checkpoint (not
  ``deferrable``) that holds everything the turn needs to resume; the runner ends the slice with
  status ``awaiting_event`` and a ``data-wait`` chunk per wait, and opens the turn again (a
  :class:`ContinueTurn` of that checkpoint) once an event it waits for arrives or a deadline
  passes. The turn reads the run's events through ``events`` (:class:`RunEvents`).
* A ``finish`` part ends the turn; only a checkpoint may follow it (its ``output`` is the run's
  structured output). An ``error`` part fails the run with ``error`` + ``finish``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias, runtime_checkable

from pydantic import BaseModel, ValidationError

from ..approvals import ApprovalSecret
from ..errors import InvalidRequestError
from ..messages import ModelMessage
from ..protocol.harness_parts import HarnessStreamPart
from ..protocol.ui_chunks import UIMessageChunk
from ..waits import RunEvents, WaitSpec
from ..wire import JSONValue


@dataclass(frozen=True)
class Checkpoint:
    """A point where the turn can be made durable: ``state`` is the adapter's own JSON state.

    ``output`` is the turn's structured output, on a checkpoint that follows ``finish``.

    ``deferrable``: losing this checkpoint in a crash costs only work that can be done again (a
    model call, not a tool's side effect), and the harness yields another checkpoint soon. The
    runner may then write it only if the next one has not come within its grace period
    (``Runner(checkpoint_grace=...)``), which keeps a step to one write; it checks that the slice
    still holds the run before the harness goes on, and never ends a slice there (a deferrable
    checkpoint after ``finish-step`` is no slice point: use it when the turn ends next). A
    checkpoint that records a side effect (a tool's result while another tool may start) must not
    be deferrable.
    """

    state: JSONValue
    output: Any = None
    deferrable: bool = False
    detach: bool = False
    """End the slice here, also mid-step (a persistent session whose program goes on): the
    next slice opens a ``ContinueTurn`` from this state."""


@dataclass(frozen=True)
class Wait:
    """The turn parks until one of ``waits`` is due (an event arrived, or its deadline passed)."""

    waits: tuple[WaitSpec, ...]


HarnessEvent: TypeAlias = HarnessStreamPart | UIMessageChunk | Checkpoint | Wait
"""What a harness turn yields."""


@dataclass(frozen=True)
class PendingApproval:
    """An approval request the paused turn waits for (recorded by the runner from the stream)."""

    approval_id: str
    tool_call_id: str
    tool_name: str
    input: Any = None
    provider_executed: bool = False
    """The runtime runs the call itself once approved (not the host)."""


@dataclass(frozen=True)
class ApprovalDecision:
    """A verified answer to one approval request: the runner checked its signature and the ledger."""

    approval_id: str
    tool_call_id: str
    approved: bool
    reason: str | None = None
    tool_name: str = ""
    input: Any = None

    def to_json(self) -> dict[str, Any]:
        """The wire shape of ``continue.approvals`` items."""
        return {
            "approvalId": self.approval_id,
            "toolCallId": self.tool_call_id,
            "approved": self.approved,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Continuation:
    """The answer to a paused turn, handed to the adapter with the paused run's last checkpoint.

    ``approvals`` holds only the answers whose signature and ledger record were verified: a
    tampered answer never reaches the adapter (its request stays unanswered in ``pending``).
    ``messages`` is the conversation as the chat client sent it with its answers (None when the
    answer came through the run API); adapters that keep their own state ignore it.
    """

    paused_run_id: str
    approvals: tuple[ApprovalDecision, ...]
    pending: tuple[PendingApproval, ...]
    messages: tuple[ModelMessage, ...] | None = None


@dataclass(frozen=True)
class StartTurn:
    """Open a new turn on ``messages`` (the conversation, ending with the new input)."""

    run_id: str
    session_id: str
    messages: list[ModelMessage]
    call_options: dict[str, Any] | None = None
    """The run's call options, as :meth:`Harness.parse_call_options` returned them."""
    events: RunEvents | None = None
    """The run's external events (None: the turn cannot wait for any)."""
    session_state: JSONValue | None = None
    """The state of the last checkpoint of the session's previous turn (None on a first turn)."""
    budget_seconds: float | None = None
    """The slice's time budget from when the turn is opened (None: no limit); a harness that can
    end a slice mid-step yields a ``detach`` checkpoint when it is spent."""


@dataclass(frozen=True)
class ContinueTurn:
    """Continue a turn from the ``state`` of its last checkpoint.

    ``replay_step``: the last slice died mid-step and the client was sent ``reset-step``; re-send
    what the current step had shown (without re-running finished tools) first.
    ``continuation``: set on the first slice of a run that answers a paused run's approvals.
    """

    run_id: str
    session_id: str
    state: JSONValue
    replay_step: bool = False
    continuation: Continuation | None = None
    call_options: dict[str, Any] | None = None
    """The run's call options (a continuation's may differ from the paused run's)."""
    events: RunEvents | None = None
    """The run's external events (None: the turn cannot wait for any)."""
    budget_seconds: float | None = None
    """The slice's time budget from when the turn is opened (None: no limit); a harness that can
    end a slice mid-step yields a ``detach`` checkpoint when it is spent."""

    @property
    def approvals(self) -> tuple[ApprovalDecision, ...]:
        """The verified answers due with this continuation (empty when none are due)."""
        return self.continuation.approvals if self.continuation is not None else ()


TurnRequest: TypeAlias = StartTurn | ContinueTurn
"""How the runner opens a turn for one slice."""


@dataclass(frozen=True)
class CancelNotice:
    """The runner ended a run ``cancelled`` (a user's cancel): release what the turn holds."""

    run_id: str
    session_id: str
    state: JSONValue | None


@dataclass(frozen=True)
class HarnessOptions:
    """What the runner needs to know about a harness (fixed for the harness's lifetime).

    * ``tool_names``: the merged tool set the runtime may call (host tools and the runtime's own
      built-ins); a ``tool-call`` naming anything else becomes ``tool-input-error`` unless it is
      ``providerExecuted`` and ``dynamic``. None accepts every name.
    * ``send_reasoning``: forward reasoning parts to the client.
    * ``allow_system_in_messages``: accept client-sent system messages.
    * ``approval_secret``: signs approval requests and verifies answers; None uses the default
      (``TOOL_APPROVAL_SECRET`` / ``TOOL_APPROVAL_SECRET_ARN``).
    * ``has_output``: the harness produces structured output at the end of a turn.
    """

    tool_names: Collection[str] | None = None
    send_reasoning: bool = True
    allow_system_in_messages: bool = False
    approval_secret: ApprovalSecret | None = None
    has_output: bool = False
    replays_tail: bool = False
    """After a slice died, the next re-yields exactly what it yielded after its last checkpoint
    (a persistent session reads its program's lines again from the checkpoint's cursor): the
    runner then matches that against the log instead of sending ``reset-step``."""
    wants_session_state: bool = False
    """The harness reads ``StartTurn.session_state``: only then does the runner look up the chat's
    previous turn when it creates a run (a storage read before the model is called)."""


@runtime_checkable
class HarnessTurn(Protocol):
    """One slice's conversation with a harness (opened by :meth:`Harness.open`)."""

    def events(self) -> AsyncIterator[HarnessEvent]:
        """The turn's events, until it pauses or ends (or :meth:`stop` is called)."""
        ...

    async def stop(self) -> Checkpoint | None:
        """End the slice at the slice point just reached; return one last checkpoint, or None.

        Called after the events' iterator yielded a checkpoint that follows ``finish-step``; no
        more events are read afterwards, unless the turn has ``drains_after_stop = True``: then
        the runner goes on reading and recording its events until its next slice point (the
        slice ends there), its ``finish``, or the end of its events (its last checkpoint stands).
        """
        ...

    async def close(self) -> None:
        """Release what the turn holds (called once, always, also after errors and cancels)."""
        ...


@runtime_checkable
class Harness(Protocol):
    """An agent runtime the durable runner drives across time slices."""

    @property
    def options(self) -> HarnessOptions:
        """What the runner needs to know about this harness."""
        ...

    def create_session(self, session_id: str | None = None) -> str:
        """The session id of a conversation (a new one when None)."""
        ...

    def open(self, request: TurnRequest) -> HarnessTurn:
        """Open the turn for one slice."""
        ...

    def parse_call_options(self, raw: Mapping[str, Any]) -> dict[str, Any] | None:
        """Validate a request's call options (the client's extra ``body`` fields, an event's
        ``callOptions``): the JSON-ready options to checkpoint, or None when the harness takes none.

        Raises :class:`~durable_harness.errors.InvalidRequestError` naming the bad field.
        """
        ...

    def run_result(self, state: JSONValue | None) -> dict[str, Any]:
        """The JSON result of a turn from the state of its last checkpoint (the run API's result;
        the runner adds what it knows itself: finish reason, usage, pending approvals, output)."""
        ...

    async def on_cancel(self, notice: CancelNotice) -> None:
        """The runner ended a run ``cancelled``; called once, after its ``finish`` is durable."""
        ...


@dataclass
class GeneratorTurn:
    """A :class:`HarnessTurn` over an async generator (for adapters that need nothing at stop).

    :meth:`stop` and :meth:`close` close the generator; stop returns no extra checkpoint.
    """

    generator: AsyncGenerator[HarnessEvent, None]
    _closed: bool = field(default=False, init=False)

    def events(self) -> AsyncIterator[HarnessEvent]:
        """The generator itself."""
        return self.generator

    async def stop(self) -> Checkpoint | None:
        """Close the generator; the last checkpoint it yielded stands."""
        await self.close()
        return None

    async def close(self) -> None:
        """Close the generator (runs its ``finally`` blocks)."""
        if not self._closed:
            self._closed = True
            await self.generator.aclose()


def validate_call_options(model: type[BaseModel] | None, raw: Mapping[str, Any]) -> dict[str, Any] | None:
    """``raw`` validated by ``model`` and dumped to JSON (None without a model: nothing is passed on).

    Raises :class:`InvalidRequestError` (400, ``invalid_call_options``) naming each bad field.
    """
    if model is None:
        return None
    try:
        return model.model_validate(dict(raw)).model_dump(mode="json")
    except ValidationError as exc:
        problems = "; ".join(
            f"'{'.'.join(str(p) for p in err['loc']) or '(body)'}': {err['msg']}" for err in exc.errors()
        )
        raise InvalidRequestError(f"Invalid call options: {problems}.", code="invalid_call_options") from None
