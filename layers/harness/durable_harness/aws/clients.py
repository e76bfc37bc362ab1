"""The harness's AWS clients: a lite client in Lambda where one serves, else botocore clients from
one shared botocore session, without boto3.

In a Lambda function (``AWS_LAMBDA_FUNCTION_NAME`` set) a client made without a session of the
caller's is a lite client of :mod:`.lite` when one serves the service (credentials in the
environment, as Lambda sets them; the ``aws`` or ``aws-cn`` partition): the same methods and
errors without botocore's import and client creation, most of what is left of a function's cold
start (``bench/cold_start.py``). botocore is then imported only when a client of another service
is made; anywhere else (the local kit, tests, a test's session) every client is botocore's. So is
every client in Lambda with ``AWS_LITE_CLIENTS=0`` (the template's ``LiteClients=false``): the way
back to botocore's clients if a lite one ever misbehaves, at their cold-start cost. (The AgentCore
session transport has a lite client only, ``aws/agentcore.py``.)

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
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from botocore.config import Config

__all__ = ["LazyClient", "bedrock_model_client", "lite_clients_wanted", "make_client"]

_TRIMMED_DATA = os.path.join(os.path.dirname(__file__), "botocore-data")
"""The folder of the trimmed endpoint data (only in the built layer)."""

_sessions: dict[bool, Any] = {}  # trimmed endpoint data or not -> the shared session
_lock = threading.Lock()  # a botocore session is not thread-safe; its clients are
_trimmed_services: frozenset[str] | None = None


def make_client(
    service: str,
    config: Config | Callable[[], Config] | None = None,
    *,
    region: str | None = None,
    session: Any = None,
    lite_settings: Mapping[str, Any] | None = None,
) -> Any:
    """A new client for ``service``: from ``session`` (a ``boto3.Session``, e.g. a test's) when given;
    else, in Lambda, a lite client (:mod:`.lite`) if one serves the service; else from the process's
    shared botocore session (region and credentials from the environment, as ``boto3.client`` would
    take them).

    ``config`` is a botocore ``Config`` or a function that makes one (called only when a botocore
    client is made, so that ``botocore.config`` is not imported for a lite client). A lite client
    takes ``lite_settings`` (its ``connect_timeout``, ``read_timeout``, ``max_attempts``), else a
    given ``Config``'s timeouts and attempts; without either it has ``CLIENT_CONFIG``'s.
    """
    if session is None and lite_clients_wanted():
        made = _lite_client(service, config, region, lite_settings)
        if made is not None:
            return made
    if callable(config):
        config = config()
    with _lock:
        if session is not None:
            return session.client(service, region_name=region, config=config)
        import botocore.session  # here, not at import: a function whose clients are all lite never loads it

        trimmed = service in _services_of_trimmed_data()
        shared = _sessions.get(trimmed)
        if shared is None:
            shared = _sessions[trimmed] = botocore.session.get_session()
            if trimmed:  # botocore's loader looks in its data_path (AWS_DATA_PATH) first, in order
                data_path = shared.get_config_variable("data_path")
                shared.set_config_variable("data_path", os.pathsep.join(filter(None, [_TRIMMED_DATA, data_path])))
        return shared.create_client(service, region_name=region, config=config)


def bedrock_model_client() -> Any:
    """The Bedrock model's client in a function (:func:`.runtime.function_parts` installs it with
    ``models.bedrock.set_client_factory``): :func:`make_client`'s, with the model's
    ``CLIENT_SETTINGS`` whichever kind it is."""
    from ..models import bedrock

    return make_client("bedrock-runtime", bedrock.client_config, lite_settings=bedrock.CLIENT_SETTINGS)


def lite_clients_wanted() -> bool:
    """In Lambda (``AWS_LAMBDA_FUNCTION_NAME`` set), unless ``AWS_LITE_CLIENTS=0``: read when a client
    is made (the environment a test or a function has then)."""
    return bool(os.environ.get("AWS_LAMBDA_FUNCTION_NAME")) and os.environ.get("AWS_LITE_CLIENTS", "1").strip() != "0"


def _lite_client(service: str, config: Any, region: str | None, lite_settings: Mapping[str, Any] | None) -> Any:
    """A lite client for ``service`` with ``lite_settings``, else the timeouts and attempts of
    ``config`` (a ``Config``), or None."""
    from . import lite

    settings: dict[str, Any] = dict(lite_settings or {})
    if lite_settings is None and config is not None and not callable(config):
        retries = config.retries or {}
        attempts = retries.get("total_max_attempts", retries["max_attempts"] + 1 if "max_attempts" in retries else None)
        for name, value in (("connect_timeout", config.connect_timeout), ("read_timeout", config.read_timeout),
                            ("max_attempts", attempts)):  # fmt: skip
            if isinstance(value, int | float):
                settings[name] = float(value) if name != "max_attempts" else int(value)
    return lite.client(service, region=region, **settings)


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


class LazyClient:
    """A client made on first use, by ``make`` (then kept): for a service a function may never call."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._client: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._client is None:
            self._client = self._make()  # make() must be idempotent: two threads may race here (client_for is)
        return getattr(self._client, name)
