"""Keep the kit's own processes unreadable by the programs they start (a harness program, a tool's
subprocess): on Linux, ``prctl(PR_SET_DUMPABLE, 0)`` makes ``/proc/<pid>/environ``, ``mem`` and
``maps`` of this process readable by root only, and refuses ``ptrace`` to processes of the same
user. The approval secret, the token hashes and AWS credentials live in this process's environment
and memory. Programs this process starts are dumpable again after their ``exec``.
"""

from __future__ import annotations

import logging
import sys

logger = logging.getLogger(__name__)

PR_SET_DUMPABLE = 4
PR_GET_DUMPABLE = 3


def deny_proc_reads() -> bool:
    """Make this process non-dumpable (Linux); True when it is. Elsewhere a no-op returning False."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes  # only here: nothing else of the kit needs it

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
            logger.warning("prctl(PR_SET_DUMPABLE, 0) failed (errno %d)", ctypes.get_errno())
            return False
        return bool(libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 0)
    except (OSError, AttributeError) as exc:
        logger.warning("cannot make the process non-dumpable: %s", exc)
        return False


__all__ = ["deny_proc_reads"]
