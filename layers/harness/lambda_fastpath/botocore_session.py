"""botocore clients from one shared botocore session, without boto3, reading the layer's trimmed
endpoint data for the services whose models the layer ships.

A boto3 client *is* a botocore client: what boto3 adds (the S3 transfer methods, the resource
API) a function never uses, yet importing it (with s3transfer) costs a cold start about 15-20 ms.
Every client made here comes from the same botocore session, so that a process parses botocore's
endpoint data and each service model once, however many clients it makes (boto3's default
session would be a second one).

In the Lambda layer that session reads a trimmed copy of botocore's endpoint data, which the layer
build writes next to this module (``build_layer.trim_endpoints``: ``botocore-data/endpoints.json``):
the entries of only the services whose models the layer ships, 33 KB instead of 690 KB of JSON,
which the first client of every cold start parses (about 10 ms of the chat function's load,
``bench/cold_start.py``). Only those services' clients come from it: for any other, its entries
would be missing, and a global service's (IAM, Route 53) client would sign for the wrong Region,
so those come from a second session that reads botocore's full data. Outside the layer (no
trimmed data) every client comes from that second session.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from botocore.config import Config

__all__ = ["client"]

_TRIMMED_DATA = os.path.join(os.path.dirname(__file__), "botocore-data")
"""The folder of the trimmed endpoint data (only in the built layer: ``build_layer.TRIMMED_ENDPOINTS``)."""

_sessions: dict[bool, Any] = {}  # trimmed endpoint data or not -> the shared session
_lock = threading.Lock()  # a botocore session is not thread-safe; its clients are
_trimmed_services: frozenset[str] | None = None


def client(service: str, *, region: str | None = None, config: Config | None = None) -> Any:
    """A new botocore client for ``service`` from the process's shared session for it (region and
    credentials from the environment, as ``boto3.client`` would take them)."""
    with _lock:
        import botocore.session  # here, not at import: a function whose clients are all lite never loads it

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
        import botocore

        models = os.path.join(os.path.dirname(botocore.__file__), "data")
        if os.path.isfile(os.path.join(_TRIMMED_DATA, "endpoints.json")):
            _trimmed_services = frozenset(e.name for e in os.scandir(models) if e.is_dir())
        else:
            _trimmed_services = frozenset()
    return _trimmed_services
