"""Where a botocore client would send a request and for what it signs it, without sending it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


def signed_for(client: Any, call: Callable[[Any], Any]) -> tuple[str, str]:
    """The URL of ``call``'s request and the ``Region/service`` of its SigV4 signature, caught before it is sent."""
    seen: dict[str, str] = {}

    class Caught(Exception):
        pass

    def before_send(request: Any, **_: Any) -> None:
        seen["url"] = request.url
        scope = request.headers["Authorization"].decode().split("Credential=")[1].split(",")[0]
        seen["scope"] = "/".join(scope.split("/")[2:4])  # key/date/REGION/SERVICE/aws4_request
        raise Caught

    client.meta.events.register("before-send", before_send)
    with pytest.raises(Caught):
        call(client)
    return seen["url"], seen["scope"]
