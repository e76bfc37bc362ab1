"""The origin a chat POST gives the event URLs of the first slice its function runs (issue 21)."""

from __future__ import annotations

from typing import Any

import pytest
from durable_harness.server.app import request_origin


def scope(headers: dict[str, str], scheme: str = "http") -> dict[str, Any]:
    return {"type": "http", "scheme": scheme, "headers": [(k.encode(), v.encode()) for k, v in headers.items()]}


def test_the_origin_is_the_host_with_the_scheme_a_proxy_forwarded() -> None:
    host = "abc123.lambda-url.us-east-1.on.aws"
    assert request_origin(scope({"host": host, "x-forwarded-proto": "https"})) == f"https://{host}"
    assert request_origin(scope({"host": "127.0.0.1:9120"})) == "http://127.0.0.1:9120"


NOT_PLAIN = [{}, {"host": "evil.test/x?"}, {"host": "user@evil.test"}, {"host": "a b"},
             {"host": "ok.test", "x-forwarded-proto": "javascript"}]  # fmt: skip


@pytest.mark.parametrize("headers", NOT_PLAIN)
def test_a_host_that_is_not_a_plain_name_gives_no_origin(headers: dict[str, str]) -> None:
    assert request_origin(scope(headers)) is None  # the URLs stay paths
