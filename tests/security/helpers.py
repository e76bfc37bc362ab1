"""Shared helpers of the security suites: principals and tokens, a configurable loopback server,
the demo approval round trip over HTTP, and the checks every error response must pass."""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
from durable_harness.errors import ModelError
from durable_harness.messages import TextPart, UserMessage
from durable_harness.models.base import ModelRequest, ModelStreamPart
from durable_harness.models.demo import DemoModel
from durable_harness.protocol.assemble import assemble_ui_message

from tests.support import parse_sse_body, serve, user_message

ALICE_TOKEN = "tok-alice-7Hq2vLx9Rk3Wm5Pz8Nc4"
BOB_TOKEN = "tok-bob-Yd6Fs1Jg0Tb2Qe7Ua9Kv"
TOKENS = {"alice": ALICE_TOKEN, "bob": BOB_TOKEN}
TOKEN_HASHES = ",".join(f"{name}:{hashlib.sha256(tok.encode()).hexdigest()}" for name, tok in TOKENS.items())

APPROVAL_SECRET = "apprv-secret-4d1c9e77b0a2f3e8-Kx"

ERROR_STATUSES = {400, 401, 404, 405, 409, 413}
"""Every error status the API documents (docs/http-api.md)."""


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


serve_asgi = serve
"""Any ASGI app on loopback, with uvicorn options (``tests.support.serve``)."""


def assert_error_response(response: httpx.Response, status: int | set[int] | None = None) -> dict[str, Any]:
    """A documented error: a 4xx status, JSON ``{"error": {"code": str, "message": str}}`` and nothing else."""
    allowed = {status} if isinstance(status, int) else (status or ERROR_STATUSES)
    assert response.status_code in allowed, (response.status_code, response.content[:300])
    assert response.headers.get("content-type", "").startswith("application/json"), response.headers
    if response.request.method == "HEAD":
        return {}
    body = response.json()
    assert isinstance(body, dict) and set(body) == {"error"}, body
    error = body["error"]
    assert isinstance(error, dict) and set(error) == {"code", "message"}, body
    assert isinstance(error["code"], str) and error["code"], body
    assert isinstance(error["message"], str) and error["message"], body
    if response.status_code == 401:
        assert response.headers.get("www-authenticate") == "Bearer"
    return error  # type: ignore[no-any-return]


class Notes(dict[str, str]):
    """``SAVED_NOTES`` that also records every write: one entry per execution of ``save_note``."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[tuple[str, str]] = []

    def __setitem__(self, key: str, value: str) -> None:
        self.writes.append((key, value))
        super().__setitem__(key, value)


class DemoChat:
    """Turns of the demo agent over HTTP, as the AI SDK client sends them."""

    def __init__(self, client: httpx.Client, url: str, token: str | None = None) -> None:
        self.client, self.url = client, url
        self.headers = bearer(token) if token else {}

    def post(self, messages: list[dict[str, Any]], chat_id: str | None = None, **kw: Any) -> httpx.Response:
        body: dict[str, Any] = {"messages": messages, **({"id": chat_id} if chat_id else {})}
        headers = {**self.headers, **kw.pop("headers", {})}
        return self.client.post(f"{self.url}/api/chat", content=json.dumps(body), headers=headers, **kw)

    def ask_to_save(self, note: str, chat_id: str | None = None, message_id: str = "u1") -> PausedTurn:
        """A first turn that ends waiting for approval of ``save_note``."""
        user = user_message(f"Save a note: {note}", message_id)
        response = self.post([user], chat_id)
        assert response.status_code == 200, response.text
        chunks = parse_sse_body(response.content)
        assert chunks[-1] == {"type": "finish", "finishReason": "tool-calls"}, chunks[-3:]
        return PausedTurn(user, assemble_ui_message(chunks), response.headers["x-workflow-run-id"], chat_id)


class PausedTurn:
    """A turn paused on a ``save_note`` approval: the user message and the assistant message so far."""

    def __init__(self, user: dict[str, Any], assistant: dict[str, Any], run_id: str, chat_id: str | None) -> None:
        self.user, self.assistant, self.run_id, self.chat_id = user, assistant, run_id, chat_id

    @property
    def part(self) -> dict[str, Any]:
        return next(p for p in self.assistant["parts"] if p.get("type") == "tool-save_note")

    def answered(self, approved: bool = True, **change: Any) -> list[dict[str, Any]]:
        """The history ``addToolApprovalResponse`` makes; ``change`` edits the tool part (``signature`` and
        ``approval_id`` edit its approval, ``message_id`` the assistant message)."""
        assistant = copy.deepcopy(self.assistant)
        part = next(p for p in assistant["parts"] if p.get("type") == "tool-save_note")
        part["state"] = "approval-responded"
        part["approval"]["approved"] = approved
        for key, value in change.items():
            if key == "signature":
                if value is None:
                    part["approval"].pop("signature", None)
                else:
                    part["approval"]["signature"] = value
            elif key == "approval_id":
                part["approval"]["id"] = value
            elif key == "message_id":
                assistant["id"] = value
            else:
                part[key] = value
        return [self.user, assistant]


class GatedDemoModel(DemoModel):
    """The demo model, except that a turn whose prompt contains "hold" waits until the gate opens:
    a run that is deterministically live while a test pokes at it."""

    def __init__(self) -> None:
        super().__init__(delay=0)
        self.gate = threading.Event()

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamPart]:
        last = request.messages[-1] if request.messages else None
        parts = last.content if isinstance(last, UserMessage) else []
        text = " ".join(p.text for p in parts if isinstance(p, TextPart))
        if "hold" in text and not await asyncio.to_thread(self.gate.wait, 30):
            raise ModelError("the test never opened the gate")
        async for part in super().stream(request):
            yield part

    @contextmanager
    def holding(self) -> Iterator[None]:
        """Runs asked to "hold" wait inside this block; the gate opens when it ends, whatever happens."""
        self.gate.clear()
        try:
            yield
        finally:
            self.gate.set()
