"""What telemetry reads of a run's state, named here: telemetry observes the runner, which calls it,
so it states what it reads instead of importing the runner's
:class:`~durable_harness.runner.state.RunState` (which satisfies these protocols).

A member whose type is the runner's own is a plain attribute; one the runner types more narrowly
(a ``Literal``, a ``list`` of its records) is a read-only property, which mypy lets it narrow.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class WaitView(Protocol):
    """A wait of a parked run: the tool call that waits, the event's (or sleep's) name, when it parked."""

    tool_call_id: str
    name: str
    since: float

    @property
    def kind(self) -> str:
        """``event`` or ``sleep``."""
        ...


class ContinuationView(Protocol):
    """The paused run a run continues (``paused_run_id``: the run whose approvals it answers)."""

    paused_run_id: str


class RunView(Protocol):
    """A run's state, as telemetry reads it (the runner's ``RunState`` is one).

    ``slices`` is the number of slices run so far (the current one's while it runs).
    """

    run_id: str
    session_id: str
    slices: int

    @property
    def origin(self) -> str:
        """``chat`` or ``event``."""
        ...

    @property
    def status(self) -> str:
        """The run's status (the runner's ``RunStatus``)."""
        ...

    @property
    def continuation(self) -> ContinuationView | None:
        """Set on a run that answers a paused run's approvals, until its first checkpoint."""
        ...

    @property
    def waits(self) -> Sequence[WaitView]:
        """While ``awaiting_event``: what the run waits for."""
        ...

    @property
    def pending_approvals(self) -> Sequence[object]:
        """The approval requests the turn raised."""
        ...

    @property
    def steps(self) -> Sequence[object]:
        """The turn's finished steps."""
        ...

    @property
    def slice_times(self) -> Sequence[tuple[int, float]]:
        """When each slice began: (the log index of its first chunk, epoch seconds)."""
        ...

    @property
    def chunk_times(self) -> Sequence[tuple[int, float]]:
        """When the timed chunks were written: (log index, epoch seconds)."""
        ...
