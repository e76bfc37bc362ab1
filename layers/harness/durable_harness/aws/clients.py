"""botocore clients from one shared botocore session, without boto3.

A boto3 client *is* a botocore client: what boto3 adds (the S3 transfer methods, the resource
API) the harness never uses, yet importing it (with s3transfer) costs a cold start about 15-20 ms.
Every client made here without a session of the caller's comes from the same botocore session,
so that a process parses botocore's endpoint data (1.2 MB of JSON) and each service model once,
however many clients it makes (boto3's default session would be a second one).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

# Imported here, not when the first client is made: a function imports this module in its init
# phase, which runs with more CPU than its first invocation.
import botocore.session

if TYPE_CHECKING:
    from botocore.config import Config

__all__ = ["LazyClient", "make_client"]

_session: Any = None
_lock = threading.Lock()  # a botocore session is not thread-safe; its clients are


def make_client(service: str, config: Config | None = None, *, region: str | None = None, session: Any = None) -> Any:
    """A new client for ``service``: from ``session`` (a ``boto3.Session``, e.g. a test's) when given,
    else from the process's shared botocore session (region and credentials from the environment,
    as ``boto3.client`` would take them)."""
    with _lock:
        if session is not None:
            return session.client(service, region_name=region, config=config)
        global _session
        if _session is None:
            _session = botocore.session.get_session()
        return _session.create_client(service, region_name=region, config=config)


class LazyClient:
    """A client made on first use, by ``make`` (then kept): for a service a function may never call."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._client: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._client is None:
            self._client = self._make()  # make() must be idempotent: two threads may race here (client_for is)
        return getattr(self._client, name)

