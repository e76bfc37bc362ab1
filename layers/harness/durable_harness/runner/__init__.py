"""The durable runner: run state, time slices, checkpoints, and the in-process orchestrator."""

from .local import LocalOrchestrator
from .runner import Runner
from .state import FinalResult, RunState, RunStatus, StreamContext

__all__ = ["FinalResult", "LocalOrchestrator", "RunState", "RunStatus", "Runner", "StreamContext"]
