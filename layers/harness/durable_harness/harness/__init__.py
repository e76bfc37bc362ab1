"""Bring your own harness: the interface the durable runner drives, and adapters for other runtimes.

* :class:`Harness` and the types around it (:mod:`.interface`): what any agent runtime implements
  to run durably (the built-in :class:`~durable_harness.Agent` implements it too);
* :class:`ProcessHarness`: any program, over JSON lines on stdin and stdout (:mod:`.process`);
* :class:`PydanticAIHarness`: a Pydantic AI ``Agent`` (needs ``durable-harness[pydantic-ai]``).

See ``docs/harness.md`` for the interface and the wire protocol.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from .interface import (
    ApprovalDecision,
    CancelNotice,
    Checkpoint,
    Continuation,
    ContinueTurn,
    GeneratorTurn,
    Harness,
    HarnessEvent,
    HarnessOptions,
    HarnessTurn,
    PendingApproval,
    StartTurn,
    TurnRequest,
)

if TYPE_CHECKING:
    from .process import DEFAULT_STOP_GRACE_SECONDS, ProcessHarness
    from .pydantic_ai import PydanticAIHarness

__all__ = [
    "DEFAULT_STOP_GRACE_SECONDS",
    "ApprovalDecision",
    "CancelNotice",
    "Checkpoint",
    "Continuation",
    "ContinueTurn",
    "GeneratorTurn",
    "Harness",
    "HarnessEvent",
    "HarnessOptions",
    "HarnessTurn",
    "PendingApproval",
    "ProcessHarness",
    "PydanticAIHarness",
    "StartTurn",
    "TurnRequest",
]


# The adapters are imported on first use: the built-in agent needs only the interface, and Pydantic
# AI is an optional extra (imported only when its adapter is asked for).
__getattr__ = lazy_exports(
    __name__,
    {
        "DEFAULT_STOP_GRACE_SECONDS": ".process",
        "ProcessHarness": ".process",
        "PydanticAIHarness": ".pydantic_ai",
    },
)
