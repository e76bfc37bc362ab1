"""The thread pool that runs synchronous tools, apart from everything else.

Storage calls, model SDK calls and the server's file reads go through asyncio's default executor
(``asyncio.to_thread``), which has ``min(32, cpus + 4)`` threads: six on a 2-core machine. If
tools ran there too, six slow tools would stall every stream, checkpoint and other run of the
process. They get a bounded pool of their own instead, sized by ``TOOL_THREADS`` (default
:data:`DEFAULT_TOOL_THREADS`): when every tool thread is busy, further sync tool calls wait for
one, and nothing else does. Async tools run on the event loop and need no thread.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..errors import AgentConfigError

TOOL_THREADS_ENV = "TOOL_THREADS"
DEFAULT_TOOL_THREADS = 16

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_size = 0


def tool_threads(environ: Mapping[str, str] | None = None) -> int:
    """The configured size of the tool pool (``TOOL_THREADS``); AgentConfigError if it is invalid."""
    raw = (os.environ if environ is None else environ).get(TOOL_THREADS_ENV, "").strip()
    if not raw:
        return DEFAULT_TOOL_THREADS
    if not raw.isascii() or not raw.isdigit() or not 1 <= int(raw) <= 1024:
        raise AgentConfigError(f"{TOOL_THREADS_ENV} must be a whole number from 1 to 1024, got {raw!r}")
    return int(raw)


def tool_executor() -> ThreadPoolExecutor:
    """The process's tool pool, created on first use with :func:`tool_threads` threads."""
    global _pool, _size
    with _lock:
        if _pool is None:
            _size = tool_threads()
            _pool = ThreadPoolExecutor(max_workers=_size, thread_name_prefix="tool")
        return _pool


def set_tool_threads(size: int) -> None:
    """Resize the tool pool (tools already running finish on the old one)."""
    global _pool, _size
    if size < 1:
        raise ValueError(f"the tool pool needs at least one thread, got {size}")
    with _lock:
        old, _pool, _size = _pool, ThreadPoolExecutor(max_workers=size, thread_name_prefix="tool"), size
    if old is not None:
        old.shutdown(wait=False)


async def run_in_tool_thread(function: Callable[..., Any], *args: Any) -> Any:
    """Call ``function(*args)`` on the tool pool, with the caller's context variables (as
    ``asyncio.to_thread`` would)."""
    context = contextvars.copy_context()
    call = functools.partial(context.run, function, *args)
    return await asyncio.get_running_loop().run_in_executor(tool_executor(), call)
