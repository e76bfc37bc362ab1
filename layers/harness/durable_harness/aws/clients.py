"""botocore clients from one shared botocore session, without boto3.

A boto3 client *is* a botocore client: what boto3 adds (the S3 transfer methods, the resource
API) the harness never uses, yet importing it (with s3transfer) costs a cold start about 15-20 ms.
Every client made here without a session of the caller's comes from the same botocore session,
so that a process parses botocore's endpoint data and each service model once, however many
clients it makes (boto3's default session would be a second one).

In the Lambda layer that session reads a trimmed copy of botocore's endpoint data, which the layer
build writes next to this module (``build_layer.trim_endpoints``): the entries of only the services
whose models the layer ships, 33 KB instead of 690 KB of JSON, which the first client of every cold
start parses (about 10 ms of the chat function's load, ``bench/cold_start.py``). Only those
services' clients come from it: for any other, its entries would be missing, and a global service's
(IAM, Route 53) client would sign for the wrong Region, so those come from a second session that
reads botocore's full data.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

# Imported here, not when the first client is made: a function imports this module in its init
# phase, which runs with more CPU than its first invocation.
import botocore
import botocore.session

if TYPE_CHECKING:
    from botocore.config import Config

__all__ = ["LazyClient", "make_client"]

_TRIMMED_DATA = os.path.join(os.path.dirname(__file__), "botocore-data")
"""The folder of the trimmed endpoint data (only in the built layer)."""

_sessions: dict[bool, Any] = {}  # trimmed endpoint data or not -> the shared session
_lock = threading.Lock()  # a botocore session is not thread-safe; its clients are
_trimmed_services: frozenset[str] | None = None


def make_client(service: str, config: Config | None = None, *, region: str | None = None, session: Any = None) -> Any:
    """A new client for ``service``: from ``session`` (a ``boto3.Session``, e.g. a test's) when given,
    else from the process's shared botocore session (region and credentials from the environment,
    as ``boto3.client`` would take them)."""
    with _lock:
        if session is not None:
            return session.client(service, region_name=region, config=config)
        trimmed = service in _services_of_trimmed_data()
        shared = _sessions.get(trimmed)
        if shared is None:
            shared = _sessions[trimmed] = botocore.session.get_session()
            if trimmed:  # botocore's loader looks in its data_path (AWS_DATA_PATH) first, in order
                data_path = shared.get_config_variable("data_path")
                shared.set_config_variable("data_path", os.pathsep.join(filter(None, [_TRIMMED_DATA, data_path])))
        return shared.create_client(service, region_name=region, config=config)


def _services_of_trimmed_data() -> frozenset[str]:
    """The services the trimmed endpoint data has entries for: those whose models the layer ships,
    the folders of botocore's own data (none outside the layer, which has no trimmed data)."""
    global _trimmed_services
    if _trimmed_services is None:
        models = os.path.join(os.path.dirname(botocore.__file__), "data")
        if os.path.isfile(os.path.join(_TRIMMED_DATA, "endpoints.json")):
            _trimmed_services = frozenset(e.name for e in os.scandir(models) if e.is_dir())
        else:
            _trimmed_services = frozenset()
    return _trimmed_services


class LazyClient:
    """A client made on first use, by ``make`` (then kept): for a service a function may never call."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._client: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._client is None:
            self._client = self._make()  # make() must be idempotent: two threads may race here (client_for is)
        return getattr(self._client, name)

