"""Run leases of the local orchestrator (decision D13): who drives which run, until when.

A server process takes a run's lease before driving it, renews the leases of the runs it drives
every third of ``seconds``, and drops a lease once the run needs no driver (it ended or paused with
its ``finish`` in the log). A run whose driver stopped in any other way (the process was killed,
the task died, a cancel or the failure finalizer did not get its ``finish`` in) keeps its lease
without renewals: once that lapses, any server on the data folder drives the run again, and a run
that had ended is only checked (and its closing chunks appended if they are missing).

Leases only save work: a run driven twice is still written by one slice at a time (fencing).
So a process may take over the lease of an owner it knows is dead before it lapses: owners are
``host:pid:nonce``, and a lease whose process on this host no longer exists is free at once. That
is what makes a restart pick up its runs immediately. A wrong guess (a reused pid) only delays.

A keeper drives only its own agent's runs (``agent_id``, the runner's; ``Lease.agent``, the run's,
see :func:`~durable_harness.runner.state.foreign`): a server started on the same data folder with
another ``AGENT`` leaves the others' runs, leased or not, to a server of their agent.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable

from ..ports import RunLeases
from .state import foreign

logger = logging.getLogger(__name__)

_HOST = socket.gethostname()


def new_owner() -> str:
    """A lease owner id for this process: ``host:pid:nonce`` (the nonce tells apart two
    orchestrators of one process, and a pid reused later)."""
    return f"{_HOST}:{os.getpid()}:{secrets.token_hex(4)}"


def owner_is_dead(owner: str) -> bool:
    """True when ``owner``'s process is known to be gone: same host, and no process has its pid.

    Never true for another host, for this process, or when in doubt: a lease then simply lapses.
    """
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != _HOST or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid() or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # it exists, as another user's process
    return False


class LeaseKeeper:
    """The lease operations of one orchestrator, off the event loop.

    Storage errors propagate (``StorageError``); the orchestrator decides how to retry.
    """

    def __init__(
        self, leases: RunLeases, *, seconds: float = 15.0, owner: str | None = None, agent_id: str | None = None
    ) -> None:
        """``agent_id``: the agent whose runs this keeper drives (None: any run)."""
        if seconds <= 0:
            raise ValueError(f"lease seconds must be > 0, got {seconds}")
        self.leases = leases
        self.seconds = seconds
        self.owner = owner or new_owner()
        self.agent_id = agent_id
        self._left_alone: set[str] = set()  # other agents' runs already logged once

    @property
    def renew_every(self) -> float:
        """How often the orchestrator renews its leases and looks for runs without a driver."""
        return self.seconds / 3

    async def acquire(self, run_id: str) -> bool:
        """Take the run's lease; False while another live driver holds it."""
        return await asyncio.to_thread(self.take, run_id)

    def take(self, run_id: str) -> bool:
        """:meth:`acquire`, blocking (in a worker thread): one trip, a dead owner's lease taken over in it."""
        now = time.time()
        lease = self.leases.acquire_lease(run_id, self.owner, now + self.seconds, now=now)
        if lease.owner == self.owner:
            return True
        if lease.owner is not None and owner_is_dead(lease.owner):
            now = time.time()
            lease = self.leases.acquire_lease(run_id, self.owner, now + self.seconds, now=now, steal_from=lease.owner)
        return lease.owner == self.owner

    async def renew(self, run_ids: list[str]) -> None:
        """Extend this orchestrator's leases of ``run_ids``."""
        if run_ids:
            await asyncio.to_thread(self.leases.renew_leases, self.owner, run_ids, time.time() + self.seconds)

    async def release(self, run_id: str) -> None:
        """Drop this orchestrator's lease of the run."""
        await asyncio.to_thread(self.leases.release_lease, run_id, self.owner)

    async def orphans(self, driving: Callable[[str], bool]) -> list[str]:
        """This agent's runs that need a driver now: active runs without a lease, and runs whose lease
        lapsed or whose owner is dead. ``driving(run_id)`` tells the runs this orchestrator drives
        already."""
        candidates = await asyncio.to_thread(self.leases.lease_candidates)
        now = time.time()
        found = []
        for lease in candidates:
            if driving(lease.run_id):
                continue
            if foreign(lease.agent, self.agent_id):
                if lease.run_id not in self._left_alone:
                    self._left_alone.add(lease.run_id)
                    logger.info("run %s is the agent %r's, not %r's: left to a server of that agent",
                                lease.run_id, lease.agent, self.agent_id)  # fmt: skip
                continue
            if (
                lease.owner is None
                or lease.expires_at < now
                or (lease.owner != self.owner and owner_is_dead(lease.owner))
            ):
                found.append(lease.run_id)
        return found
