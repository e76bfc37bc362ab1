"""The durable runner: run state, time slices, checkpoints, and the in-process orchestrator."""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from .runner import Runner
from .state import FinalResult, RunState, RunStatus, StreamContext

if TYPE_CHECKING:
    from .local import LocalOrchestrator

# The in-process orchestrator (local mode) is imported on first use: no Lambda function runs it.
__getattr__ = lazy_exports(__name__, {"LocalOrchestrator": ".local"})

__all__ = ["FinalResult", "LocalOrchestrator", "RunState", "RunStatus", "Runner", "StreamContext"]
