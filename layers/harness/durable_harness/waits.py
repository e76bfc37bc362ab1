"""Durable waits of tools (decision D16): external events, their signed URLs, and the event book.

A tool waits through its :class:`~durable_harness.tools.ToolContext` (``wait_for_event``,
``sleep``); the run then parks in status ``awaiting_event`` with nothing running. This module holds
what the runner and the HTTP API share about it:

* :class:`EventBook`: every event delivered to a run, one record per (run, name) in the checkpoint
  store (ids ``evt_<digest>``, which no run id can match; ``meta`` names the run and the outcome).
  They expire with the run: deployed with the store's records (their TTL); locally (where runs
  are kept) the SQLite store drops a run's *kept* events when the run ends, in its terminal save.
  The record is created conditionally, so a second delivery of the same event finds the first one
  and answers with its outcome: nothing runs twice. An event that arrives before the tool waits is
  kept there until the tool asks.
* Event tokens: ``ctx.event_url(name)`` gives a URL with a token signed (HMAC-SHA256) by the
  approval secret (:class:`~durable_harness.approvals.ApprovalSecret`, with its rotation: the first
  key signs, every key verifies), bound to the run, the tool call and the event name, and expiring.
  An external system posts its event there with no other credentials. A tampered token is a 401, an
  expired one a 410.
* :func:`parse_event_payload`: a payload is JSON of at most :data:`MAX_EVENT_BYTES` (413 beyond,
  400 when it is not JSON).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import time
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from .approvals import ApprovalSecret
from .errors import InvalidRequestError, RunExistsError, RunNotFoundError, ToolError
from .ports import CheckpointStore, StoredRun

MAX_EVENT_BYTES = 256 * 1024
"""The largest event payload accepted (its JSON text, in bytes)."""

DEFAULT_URL_SECONDS = 7 * 24 * 3600.0
"""How long an event URL of a wait without a timeout stays valid (the store's run lifetime)."""

TOKEN_VERSION = "durable-harness-event-v1"
"""Domain separation: an event token's MAC can never be an approval signature, nor one its."""

EVENTS_PATH = "/hooks/events/"
"""Where signed event URLs point (outside ``/api``: the token is the credential)."""

EVENT_ID_PREFIX = "evt_"
"""The start of every event record's id in the checkpoint store."""

EVENT_RUN_META = "eventOf"
"""The key of an event record's ``meta`` that names its run (what the local store expires it by);
``outcome`` is the other key (``kept`` ones expire when the run ends)."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")

WaitKind = Literal["event", "sleep"]


class WaitTimeout(Exception):
    """Raised in a tool by ``ctx.wait_for_event`` when its timeout passed before the event came."""

    def __init__(self, name: str, timeout_seconds: float | None) -> None:
        super().__init__(f"No event {name!r} arrived within {timeout_seconds:g} s.")
        self.name = name
        self.timeout_seconds = timeout_seconds


@dataclass(frozen=True)
class WaitSpec:
    """What a parked tool call waits for: an event (``name``) or a sleep, until ``deadline``
    (epoch seconds; None: an event with no timeout)."""

    tool_call_id: str
    name: str
    kind: WaitKind
    deadline: float | None = None


class ParkTool(BaseException):
    """Raised inside a tool to park its run; a BaseException so that a tool's ``except Exception``
    lets it through (like ``asyncio.CancelledError``)."""

    def __init__(self, spec: WaitSpec) -> None:
        super().__init__(f"tool call {spec.tool_call_id} waits for {spec.kind} {spec.name!r}")
        self.spec = spec


def check_event_name(name: str) -> str:
    """``name`` if it is a valid event name (letters, digits, ``_.:-``; at most 128), else a 400."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidRequestError(
            f"{name!r} is not an event name: use 1 to 128 letters, digits, '_', '.', ':' or '-', "
            "starting with a letter or digit.",
            code="invalid_event_name",
        )
    return name


def parse_event_payload(body: bytes) -> Any:
    """The JSON payload of an event delivery: 413 over :data:`MAX_EVENT_BYTES`, 400 if not JSON."""
    if len(body) > MAX_EVENT_BYTES:
        raise InvalidRequestError(
            f"The event payload is {len(body)} bytes; at most {MAX_EVENT_BYTES} are accepted.",
            code="payload_too_large",
            status=413,
        )
    if not body.strip():
        raise InvalidRequestError("The event payload is empty; send a JSON value (null is fine).", code="invalid_json")
    try:
        return json.loads(body, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise InvalidRequestError(f"The event payload is not valid JSON: {exc}", code="invalid_json") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def payload_size(payload: Any) -> int:
    """The size of ``payload`` as compact JSON, in bytes."""
    return len(json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass"))


def event_record_id(run_id: str, name: str) -> str:
    """The checkpoint-store id of the event ``name`` of ``run_id``."""
    digest = hashlib.sha256("\x1f".join([run_id, name, "event"]).encode("utf-8", "surrogatepass"))
    return EVENT_ID_PREFIX + digest.hexdigest()[:48]


@dataclass(frozen=True)
class Delivery:
    """An event as the book keeps it, and how its first delivery was answered."""

    run_id: str
    name: str
    payload: Any
    outcome: str
    """``resumed`` (the run was waiting for it) or ``kept`` (the run will find it when it asks)."""
    delivered_at: float
    via: str

    def to_json(self) -> dict[str, Any]:
        """The API's answer about this delivery."""
        return {"runId": self.run_id, "name": self.name, "outcome": self.outcome, "deliveredAt": self.delivered_at}


@runtime_checkable
class RunEvents(Protocol):
    """The run's external events, as the runner gives them to a turn (blocking calls: storage)."""

    def event(self, name: str) -> Delivery | None:
        """The run's event ``name`` (its ``payload``) if it was delivered, else None."""
        ...

    def url(self, tool_call_id: str, name: str, expires_at: float) -> str:
        """A signed URL that accepts the event ``name`` for this run and call, until ``expires_at``."""
        ...


class EventBook:
    """Events delivered to runs, one conditional record per (run, name), in a checkpoint store."""

    def __init__(self, store: CheckpointStore) -> None:
        self.store = store

    def deliver(self, run_id: str, name: str, payload: Any, *, outcome: str, via: str) -> tuple[Delivery, bool]:
        """Record the event; returns it and True, or the first delivery and False for a duplicate."""
        delivery = Delivery(run_id, name, payload, outcome, time.time(), via)
        body = {"runId": run_id, "name": name, "payload": payload, "outcome": outcome,
                "deliveredAt": delivery.delivered_at, "via": via}  # fmt: skip
        record = StoredRun(run_id=event_record_id(run_id, name), state=json.dumps(body), status="delivered",
                            meta={EVENT_RUN_META: run_id, "outcome": outcome})  # fmt: skip
        try:
            self.store.create(record)
        except RunExistsError:
            first = self.get(run_id, name)
            assert first is not None
            return first, False
        return delivery, True

    def get(self, run_id: str, name: str) -> Delivery | None:
        """The event ``name`` delivered to ``run_id``, or None."""
        try:
            record = self.store.load(event_record_id(run_id, name))
        except RunNotFoundError:
            return None
        data = json.loads(record.state)
        return Delivery(run_id, name, data.get("payload"), str(data.get("outcome")),
                        float(data.get("deliveredAt") or 0), str(data.get("via")))  # fmt: skip


# --- signed event URLs ------------------------------------------------------------------------------


@dataclass(frozen=True)
class EventClaims:
    """What a verified event token names."""

    run_id: str
    tool_call_id: str
    name: str
    expires_at: float


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(key: str, body: str) -> str:
    return _b64(hmac.new(key.encode(), f"{TOKEN_VERSION}.{body}".encode(), hashlib.sha256).digest())


def sign_event_token(secret: ApprovalSecret, claims: EventClaims) -> str:
    """A token for ``claims``, signed with the secret's first key; 'secret' errors when none is set."""
    keys = secret.keys()
    if not keys:
        raise ToolError("ctx.event_url needs a signing secret: set TOOL_APPROVAL_SECRET (or TOOL_APPROVAL_SECRET_ARN).")
    fields = [claims.run_id, claims.tool_call_id, claims.name, int(claims.expires_at)]
    body = _b64(json.dumps(fields, separators=(",", ":")).encode())
    return f"{body}.{_mac(keys[0], body)}"


def verify_event_token(secret: ApprovalSecret, token: str, *, now: float | None = None) -> EventClaims:
    """The claims of a token signed by one of the secret's keys: 401 if it is not, 410 if expired."""
    body, _, mac = token.partition(".")
    keys = secret.keys()
    valid = any(hmac.compare_digest(mac.encode(), _mac(k, body).encode()) for k in keys)
    if not body or not mac or not valid:
        raise InvalidRequestError("The event URL's token is not valid (altered, or not issued here).",
                                  code="invalid_token", status=401)  # fmt: skip
    run_id, call_id, name, expires = json.loads(_unb64(body))
    claims = EventClaims(str(run_id), str(call_id), str(name), float(expires))
    if (time.time() if now is None else now) >= claims.expires_at:
        raise InvalidRequestError("The event URL has expired (the wait it was made for is over).",
                                  code="expired", status=410)  # fmt: skip
    return claims
