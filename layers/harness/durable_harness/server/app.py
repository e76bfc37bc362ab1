"""The chat app: a dependency-free ASGI application (uvicorn locally, :mod:`lambda_fastpath.httpd`
behind the Lambda Web Adapter).

Routes:

* ``POST /api/chat`` -- start a turn; 200 with ``x-workflow-run-id`` and the run's SSE stream;
  extra body fields are the agent's call options;
* ``GET /api/chat/{runId}/stream?startIndex=N`` -- the run's stream from absolute index N
  (N < 0 counts from the tail), following a live run until ``finish`` (``x-workflow-run-id`` too);
* ``GET /api/runs?status=&chat=&limit=&cursor=`` -- the caller's runs, newest first (see :mod:`.runlist`);
* ``GET /api/runs/{runId}``, ``GET /api/runs/{runId}/result``, ``POST /api/runs/{runId}/cancel``,
  ``POST /api/runs/{runId}/approvals`` -- the run API (status, result, cancel, approvals of a run
  that has no chat client);
* ``POST /api/runs/{runId}/events/{name}`` and ``POST /hooks/events/{token}`` -- deliver an event to
  a run (the run's principal; the signed URL a tool handed out, whose token is the credential);
  see :mod:`.events`;
* ``GET /health`` and ``GET /openapi.json``;
* ``GET /`` (or ``GET /index.html``), ``GET /runs`` (a run's page: ``GET /runs?run=<runId>``) and
  ``GET /assets/<file>`` -- the chat page and the runs inspector, when built and enabled (see :mod:`.static`).

Everything under ``/api`` needs the caller's credentials (see :mod:`.auth`); a run is served
only to the principal that started it (404 for anyone else).

Every error is JSON ``{"error": {"code", "message"}}`` with a 4xx status that says what to fix;
storage that cannot be used right now is a 503 ``storage_unavailable`` with ``Retry-After``; an
unexpected failure is a 500 with a generic message, never a traceback.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote

from ..errors import InvalidRequestError, MethodNotAllowedError, RunNotFoundError, StorageError
from ..ids import is_run_id
from ..protocol.sse import SSE_DONE, SSE_KEEPALIVE, UI_MESSAGE_STREAM_HEADERS
from ..protocol.ui_chunks import FINISH_PREFIX
from .auth import Authenticator, NoAuth
from .events import EventDesk
from .openapi import openapi_document
from .resume import NOTHING_TO_RESUME, chat_run_to_resume, stream_start
from .runlist import list_runs, parse_list_query
from .service import ChatService
from .static import StaticSite

logger = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

EXPOSED_HEADERS = "x-workflow-run-id, x-workflow-stream-tail-index"


class ChatApp:
    """The ASGI chat application over a :class:`ChatService`."""

    def __init__(
        self,
        service: ChatService,
        *,
        max_body_bytes: int = 4 * 1024 * 1024,
        cors_origins: tuple[str, ...] = (),
        authenticator: Authenticator | None = None,
        on_shutdown: Callable[[], Awaitable[None]] | None = None,
        static_dir: str | Path | None = None,
        on_startup: Callable[[], Awaitable[None]] | None = None,
        wake: Callable[[str], None] | None = None,
    ) -> None:
        """``wake(run_id)``: how an event delivery makes a parked run go on (see :class:`.events.EventDesk`)."""
        self.service = service
        self.authenticator = authenticator or NoAuth()
        self.max_body_bytes = max_body_bytes
        self.cors_origins = cors_origins
        self.on_shutdown = on_shutdown
        self.on_startup = on_startup
        self.static_site = StaticSite(static_dir) if static_dir is not None else None
        self.events = EventDesk(service, wake)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        cors = self._cors_headers(scope)
        try:
            await self._route(scope, receive, send, cors)
        except InvalidRequestError as exc:
            extra = [(b"www-authenticate", b"Bearer")] if exc.status == 401 else []
            if isinstance(exc, MethodNotAllowedError):
                extra.append((b"allow", exc.allow.encode()))
            await _json(send, exc.status, {"error": {"code": exc.code, "message": str(exc)}}, cors + extra)
        except RunNotFoundError as exc:
            await _json(send, 404, {"error": {"code": "run_not_found", "message": str(exc)}}, cors)
        except StorageError as exc:
            # Transient by nature: the client retries; runs already started go on by themselves.
            logger.warning("storage unavailable serving %s %s: %s", scope.get("method"), scope.get("path"), exc)
            retry = self.service.config.storage_retry_after
            message = f"Storage is unavailable right now; try again in {retry} s. Started runs resume by themselves."
            body = {"error": {"code": "storage_unavailable", "message": message}}
            await _json(send, 503, body, [*cors, (b"retry-after", str(retry).encode())])
        except Exception:
            logger.exception("unhandled error serving %s %s", scope.get("method"), scope.get("path"))
            await _json(send, 500, {"error": {"code": "internal_error", "message": "Internal server error."}}, cors)

    async def _route(self, scope: Scope, receive: Receive, send: Send, cors: list[tuple[bytes, bytes]]) -> None:
        method = scope["method"]
        raw_path: bytes = scope.get("raw_path") or scope["path"].encode()
        segments = [unquote(s) for s in raw_path.decode("latin-1").split("?")[0].split("/")[1:]]
        if method == "OPTIONS":
            await send({"type": "http.response.start", "status": 204, "headers": cors + _preflight()})
            await send({"type": "http.response.body", "body": b""})
            return
        if segments == ["health"]:
            _allow(method, "GET")
            await _json(send, 200, {"status": "ok"}, cors)
            return
        if segments == ["openapi.json"]:
            _allow(method, "GET")
            await _json(send, 200, openapi_document(), cors)
            return
        if self.static_site is not None and self.static_site.matches(segments):
            await self.static_site.serve(method, segments, _headers(scope), send)
            return
        if len(segments) == 3 and segments[:2] == ["hooks", "events"]:
            _allow(method, "POST")  # no credentials but the token: an external system calls it
            answer = await self.events.by_token(segments[2], await self._read_body(receive))
            await _json(send, answer.status, answer.body, cors)
            return
        if segments[:1] != ["api"]:
            raise _not_found(method, scope)
        principal = self.authenticator.authenticate(_headers(scope))
        if segments == ["api", "chat"]:
            _allow(method, "POST")
            await self._post_chat(scope, receive, send, cors, principal)
        elif len(segments) == 4 and segments[:2] == ["api", "chat"] and segments[3] == "stream":
            _allow(method, "GET")
            await self._get_stream(scope, segments[2], receive, send, cors, principal)
        elif segments == ["api", "runs"]:
            _allow(method, "GET")
            query = parse_list_query(parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True))
            await _json(send, 200, await list_runs(self.service.runner.store, principal, query), cors)
        elif len(segments) == 3 and segments[:2] == ["api", "runs"]:
            _allow(method, "GET")
            await _json(send, 200, await self.service.status(_run_id(segments[2]), principal), cors)
        elif len(segments) == 4 and segments[:2] == ["api", "runs"] and segments[3] == "result":
            _allow(method, "GET")
            await _json(send, 200, await self.service.result(_run_id(segments[2]), principal), cors)
        elif len(segments) == 4 and segments[:2] == ["api", "runs"] and segments[3] == "cancel":
            _allow(method, "POST")
            state = await self.service.cancel(_run_id(segments[2]), principal)
            await _json(send, 200, {"runId": state.run_id, "status": state.status}, cors)
        elif len(segments) == 4 and segments[:2] == ["api", "runs"] and segments[3] == "approvals":
            _allow(method, "POST")
            body = _parse_json(await self._read_body(receive))
            state = await self.service.answer_approvals(_run_id(segments[2]), body, principal)
            location = f"/api/chat/{state.run_id}/stream?startIndex=0"
            await _json(send, 202, {"runId": state.run_id, "status": state.status, "stream": location}, cors)
        elif len(segments) == 5 and segments[:2] == ["api", "runs"] and segments[3] == "events":
            _allow(method, "POST")
            run_id, body = _run_id(segments[2]), await self._read_body(receive)
            answer = await self.events.by_api(run_id, segments[4], body, principal)
            await _json(send, answer.status, answer.body, cors)
        else:
            raise _not_found(method, scope)

    async def _post_chat(
        self, scope: Scope, receive: Receive, send: Send, cors: list[tuple[bytes, bytes]], principal: str
    ) -> None:
        # JSON whatever the content type: the transport sends text/plain.
        payload = _parse_json(await self._read_body(receive))
        state = await self.service.start_turn(payload, principal=principal, origin=request_origin(scope))
        headers = [(b"x-workflow-run-id", state.run_id.encode())]
        # A run no slice has checkpointed yet has nothing in its log, or a slice of this process
        # wrote it and the commit signal knows: no first read (a thread hop that would compete with
        # the slice's start). Chunks written by another process are read at the first poll.
        first: list[str] | None = [] if state.status == "not_started" and not state.slices else None
        await self._stream(state.run_id, 0, -1, headers, receive, send, cors, first, settle=True)

    async def _get_stream(
        self, scope: Scope, target: str, receive: Receive, send: Send, cors: list[tuple[bytes, bytes]], principal: str
    ) -> None:
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        raw = query.get("startIndex", ["0"])[-1]
        # ASCII digits only: int() would also take "+3", "1_0", " 7 " and digits of other scripts.
        if not _START_INDEX.fullmatch(raw):
            raise InvalidRequestError(
                f"startIndex must be an integer in ASCII digits, optionally with a leading '-', got {raw!r}.",
                code="invalid_start_index",
            )
        start = int(raw)
        summary = None
        if target.startswith("wrun_"):  # meant as a run id: a malformed one is a 400, not a chat id
            run_id = _run_id(target)
        else:  # a chat id (useChat's resume): its latest run, while that is in progress
            found = await chat_run_to_resume(self.service, _chat_id(target), start, principal)
            if found is None:
                await _nothing_to_resume(send, cors, "startIndex" in query)
                return
            run_id, summary = found
        at = await stream_start(self.service, run_id, start, principal, summary)
        # The seed's GET handler names the run too (x-workflow-run-id), like the POST.
        extra = [(b"x-workflow-run-id", run_id.encode())]
        await self._stream(run_id, at.start, at.count - 1, extra, receive, send, cors, at.first, complete=at.complete)

    async def _stream(
        self,
        run_id: str,
        start: int,
        tail_index: int,
        extra: list[tuple[bytes, bytes]],
        receive: Receive,
        send: Send,
        cors: list[tuple[bytes, bytes]],
        first: list[str] | None = None,
        *,
        settle: bool = False,
        complete: bool = False,
    ) -> None:
        """Stream the run from ``start``; with ``settle``, the response ends only once a slice of
        the run that this process runs is done (deployed, the function is frozen when its response
        ends), whether the client is still there or not. ``complete``: the run's stream ended
        before ``start``, so the response has no chunks."""
        headers = [*UI_MESSAGE_STREAM_HEADERS, *extra, (b"x-workflow-stream-tail-index", str(tail_index).encode())]
        if complete:
            await send({"type": "http.response.start", "status": 200, "headers": headers + cors})
            await send({"type": "http.response.body", "body": SSE_DONE, "more_body": False})
            return
        finished: bool | None = None  # None: the client went away, nothing more to send
        try:
            await send({"type": "http.response.start", "status": 200, "headers": headers + cors})
            pump = asyncio.get_running_loop().create_task(self._pump(run_id, start, send, first))
            disconnected = asyncio.get_running_loop().create_task(_wait_disconnect(receive))
            try:
                await asyncio.wait({pump, disconnected}, return_when=asyncio.FIRST_COMPLETED)
                if pump.done() and not pump.cancelled():
                    finished = pump.result()
            finally:
                for task in (pump, disconnected):
                    task.cancel()
                await asyncio.gather(pump, disconnected, return_exceptions=True)
        finally:
            if settle:
                await self.service.settle(run_id)
        if finished is not None:
            await send({"type": "http.response.body", "body": SSE_DONE if finished else b"", "more_body": False})

    async def _pump(self, run_id: str, start: int, send: Send, first: list[str] | None) -> bool:
        """Copy the run's chunks to the response as SSE events until ``finish`` (True) or the
        window ends (False)."""
        finished = False
        try:
            async for batch in self.service.follow(run_id, start, first):
                if batch is None:
                    await send({"type": "http.response.body", "body": SSE_KEEPALIVE, "more_body": True})
                    continue
                payload = b"".join(b"data: " + c.encode() + b"\n\n" for c in batch)
                finished = batch[-1].startswith(FINISH_PREFIX)
                await send({"type": "http.response.body", "body": payload, "more_body": True})
        except Exception:
            # The status line is gone already: end the body without `finish`; the client resumes.
            logger.exception("run %s: streaming failed", run_id)
            return False
        return finished

    async def _read_body(self, receive: Receive) -> bytes:
        parts, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise InvalidRequestError("The client went away before sending the whole body.")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise InvalidRequestError(
                    f"The request body is larger than {self.max_body_bytes} bytes.", code="body_too_large", status=413
                )
            parts.append(chunk)
            if not message.get("more_body"):
                return b"".join(parts)

    def _cors_headers(self, scope: Scope) -> list[tuple[bytes, bytes]]:
        headers = [(b"access-control-expose-headers", EXPOSED_HEADERS.encode())]
        if not self.cors_origins:
            return headers
        origin = next((v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"origin"), None)
        if "*" in self.cors_origins:
            headers.append((b"access-control-allow-origin", b"*"))
        elif origin in self.cors_origins:
            headers += [(b"access-control-allow-origin", origin.encode()), (b"vary", b"origin")]
        return headers

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                if self.on_startup is not None:
                    await self.on_startup()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self.on_shutdown is not None:
                    await self.on_shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return


_HOST = re.compile(r"[A-Za-z0-9.-]{1,253}(:[0-9]{1,5})?")


def request_origin(scope: Scope) -> str | None:
    """``scheme://host`` of the request (its ``Host`` header; the scheme a proxy forwarded, as the
    Lambda Web Adapter does, else the connection's), or None for a host that is not a plain name.

    Behind a Function URL the Host is the URL's own domain (AWS routes by it), and it only ever
    makes the event URLs of the run this request starts."""
    headers = _headers(scope)
    host = headers.get("host", "")
    scheme = headers.get("x-forwarded-proto", "").split(",")[0].strip() or str(scope.get("scheme") or "http")
    if not _HOST.fullmatch(host) or scheme not in ("http", "https"):
        return None
    return f"{scheme}://{host}"


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


def _run_id(value: str) -> str:
    if not is_run_id(value):
        raise InvalidRequestError(
            f"{value!r} is not a run id (expected 'wrun_' and 26 characters).", code="invalid_run_id"
        )
    return value


def _chat_id(value: str) -> str:
    if not 0 < len(value) <= 200:
        raise InvalidRequestError(
            "Expected a run id ('wrun_' and 26 characters) or a chat id (1 to 200 characters) in the path.",
            code="invalid_chat_id",
        )
    return value


async def _nothing_to_resume(send: Send, cors: list[tuple[bytes, bytes]], with_index: bool) -> None:
    """A resume by chat id when the chat has no run in progress (see :mod:`.resume`)."""
    if not with_index:  # DefaultChatTransport: 204 is "no active stream"
        await send({"type": "http.response.start", "status": 204, "headers": cors})
        await send({"type": "http.response.body", "body": b""})
        return
    headers = [*UI_MESSAGE_STREAM_HEADERS, (b"x-workflow-stream-tail-index", b"0")]
    await send({"type": "http.response.start", "status": 200, "headers": headers + cors})
    await send({"type": "http.response.body", "body": NOTHING_TO_RESUME})


_START_INDEX = re.compile(r"-?[0-9]{1,18}")

MAX_JSON_DEPTH = 100
"""Deeper request bodies are refused: no UI message needs them, and they exhaust recursion later."""


def _parse_json(body: bytes) -> Any:
    try:
        value = json.loads(body, parse_constant=_refuse_constant)
    except ValueError as exc:  # also UnicodeDecodeError, and integers over Python's digit limit
        raise InvalidRequestError(f"The request body is not valid JSON: {exc}", code="invalid_json") from exc
    except RecursionError:
        value = None
    problem = "too deep" if value is None and body.strip() != b"null" else _shape_problem(value)
    if problem == "too deep":
        raise InvalidRequestError(
            f"The request body is nested more than {MAX_JSON_DEPTH} levels deep.", code="invalid_json"
        )
    if problem:
        raise InvalidRequestError(f"The request body {problem}.", code="invalid_json")
    return value


def _refuse_constant(name: str) -> Any:
    """Python's parser reads NaN, Infinity and -Infinity; JSON has no such values."""
    raise InvalidRequestError(
        f"The request body contains {name}, which is not valid JSON (send a number, a string or null).",
        code="invalid_json",
    )


def _shape_problem(value: Any) -> str | None:
    """Why a parsed body cannot be stored (too deep, or a lone surrogate no UTF-8 can hold), or None."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if any("\ud800" <= ch <= "\udfff" for ch in item):
                return "contains a lone UTF-16 surrogate, which is not valid Unicode text"
        elif isinstance(item, dict | list):
            if depth > MAX_JSON_DEPTH:
                return "too deep"
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return None


def _not_found(method: str, scope: Scope) -> InvalidRequestError:
    return InvalidRequestError(f"No route for {method} {scope['path']}.", code="not_found", status=404)


def _allow(method: str, allowed: str) -> None:
    if method != allowed:
        raise MethodNotAllowedError(method, f"{allowed}, OPTIONS")  # OPTIONS: every path answers a preflight


def _preflight() -> list[tuple[bytes, bytes]]:
    return [
        (b"access-control-allow-methods", b"GET, POST, OPTIONS"),
        (b"access-control-allow-headers", b"content-type, authorization"),
        (b"access-control-max-age", b"300"),
    ]


async def _json(send: Send, status: int, body: dict[str, Any], cors: list[tuple[bytes, bytes]]) -> None:
    data = json.dumps(body, separators=(",", ":")).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers + cors})
    await send({"type": "http.response.body", "body": data})


async def _wait_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
