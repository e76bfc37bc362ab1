"""The harness's AWS clients: a lite client in Lambda where one serves, else botocore clients from
one shared botocore session, without boto3 (both from the Lambda fast path, :mod:`lambda_fastpath`).

In a Lambda function (``AWS_LAMBDA_FUNCTION_NAME`` set) a client made without a session of the
caller's is a lite client of :mod:`lambda_fastpath.aws` when one serves the service (credentials in
the environment, as Lambda sets them; the ``aws`` or ``aws-cn`` partition): the same methods and
errors without botocore's import and client creation, most of what is left of a function's cold
start (``bench/cold_start.py``). botocore is then imported only when a client of another service
is made; anywhere else (the local kit, tests, a test's session) every client is botocore's. So is
every client in Lambda with ``AWS_LITE_CLIENTS=0`` (the template's ``LiteClients=false``): the way
back to botocore's clients if a lite one ever misbehaves, at their cold-start cost. (The AgentCore
session transport has a lite client only, ``aws/agentcore.py``.)

A botocore client made here without a session of the caller's comes from
:mod:`lambda_fastpath.botocore_session`: one shared botocore session (no boto3), which in the
Lambda layer reads the trimmed endpoint data the layer build writes for the services it ships.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from lambda_fastpath import botocore_session

if TYPE_CHECKING:
    from botocore.config import Config

__all__ = ["LazyClient", "bedrock_model_client", "lite_clients_wanted", "make_client"]

_lock = threading.Lock()  # a caller's session is not thread-safe either; its clients are


def make_client(
    service: str,
    config: Config | Callable[[], Config] | None = None,
    *,
    region: str | None = None,
    session: Any = None,
    lite_settings: Mapping[str, Any] | None = None,
) -> Any:
    """A new client for ``service``: from ``session`` (a ``boto3.Session``, e.g. a test's) when given;
    else, in Lambda, a lite client (:mod:`lambda_fastpath.aws`) if one serves the service; else from
    the process's shared botocore session (:mod:`lambda_fastpath.botocore_session`; region and
    credentials from the environment, as ``boto3.client`` would take them).

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
    if session is None:
        return botocore_session.client(service, region=region, config=config)
    with _lock:
        return session.client(service, region_name=region, config=config)


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
    from lambda_fastpath import aws as lite

    settings: dict[str, Any] = dict(lite_settings or {})
    if lite_settings is None and config is not None and not callable(config):
        retries = config.retries or {}
        attempts = retries.get("total_max_attempts", retries["max_attempts"] + 1 if "max_attempts" in retries else None)
        for name, value in (("connect_timeout", config.connect_timeout), ("read_timeout", config.read_timeout),
                            ("max_attempts", attempts)):  # fmt: skip
            if isinstance(value, int | float):
                settings[name] = float(value) if name != "max_attempts" else int(value)
    return lite.client(service, region=region, **settings)


class LazyClient:
    """A client made on first use, by ``make`` (then kept): for a service a function may never call."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._client: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._client is None:
            self._client = self._make()  # make() must be idempotent: two threads may race here (client_for is)
        return getattr(self._client, name)
