"""Fixtures for the whole suite."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(autouse=True, scope="session")
def _moto_stop_waits_for_a_started_execution() -> Iterator[None]:
    """Work around a race in moto's Step Functions interpreter (not in AWS).

    moto runs an execution on a thread that creates its environment only when it gets going;
    a ``StopExecution`` that arrives before then fails inside moto with ``AttributeError:
    'NoneType' object has no attribute 'set_stop'``. AWS accepts a stop at any time, so the
    stop here waits (at most 5 s) for the thread to have set up the execution.
    """
    try:
        from moto.stepfunctions.parser.backend.execution_worker import ExecutionWorker
    except ImportError:  # moto without its interpreter: nothing to patch
        yield
        return
    original = ExecutionWorker.stop

    def stop(self: Any, *args: Any, **kwargs: Any) -> Any:
        deadline = time.monotonic() + 5
        while getattr(self, "env", None) is None and time.monotonic() < deadline:
            threading.Event().wait(0.005)
        return original(self, *args, **kwargs)

    ExecutionWorker.stop = stop
    try:
        yield
    finally:
        ExecutionWorker.stop = original
