"""Requests and responses shared by the sync and async clients (httpx, no I/O here)."""

from __future__ import annotations

from typing import Any

import httpx

from ._common import stream_path
from ._cursor import RUN_ID_HEADER, StreamCursor
from .errors import ChatClientError, ResponseError, StreamError

CHAT_PATH = "/api/chat"


def stream_request(
    http: httpx.Client | httpx.AsyncClient,
    url: str,
    headers: dict[str, str],
    cursor: StreamCursor,
    post: dict[str, Any] | None,
) -> httpx.Request:
    """The POST that starts a turn (``post`` given), else the GET of the cursor's next position."""
    if post is not None:
        return http.build_request("POST", url + CHAT_PATH, json=post, headers=headers)
    if cursor.run_id is None:
        raise StreamError("no run to resume")
    # `?startIndex=` appended literally, as the transport does.
    return http.build_request("GET", f"{url}{stream_path(cursor.run_id)}?startIndex={cursor.next_start()}",
                              headers=headers)  # fmt: skip


def response_error(response: httpx.Response, body: bytes) -> ResponseError:
    """The error of a non-2xx response."""
    return ResponseError.from_response(response, body)


def run_id_of(response: httpx.Response) -> str:
    """The run id of a POST's response (``x-workflow-run-id``)."""
    run_id: str | None = response.headers.get(RUN_ID_HEADER)
    if not run_id:
        raise StreamError(
            f"the response of POST {response.request.url} has no {RUN_ID_HEADER} header "
            "(is this a durable-harness chat server?)"
        )
    return run_id


def decode_json(response: httpx.Response) -> dict[str, Any]:
    """The JSON object of a run API response."""
    try:
        data = response.json()
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise ChatClientError(f"{response.request.method} {response.request.url}: the response is not a JSON object")
    return data
