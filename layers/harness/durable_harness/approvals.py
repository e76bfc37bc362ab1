"""Signed tool approvals, exactly like the AI SDK's ``signToolApproval`` (decision D8).

A server that asks the user to approve a tool call signs the request over the approval id, the
tool call id, the tool name and a digest of the input. The user's answer comes back with the
signature; only a valid signature lets the tool run, so a client can never approve something the
server did not ask.

The secret comes from an environment variable or from AWS Secrets Manager (read by
:mod:`.secretsmanager`: Powertools Parameters, cached). It is never logged, stored in run state,
written to chunks or put in errors.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
from collections.abc import Callable
from typing import Any

from .secretsmanager import DEFAULT_MAX_AGE, read_secret

SIGNATURE_VERSION = "ai-sdk-tool-approval-v1"
DEFAULT_SECRET_ENV = "TOOL_APPROVAL_SECRET"
DEFAULT_SECRET_ARN_ENV = "TOOL_APPROVAL_SECRET_ARN"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def canonical_json(value: Any) -> str:
    """JSON with object keys sorted recursively and no whitespace (the AI SDK's ``hashCanonical``).

    Integer-valued floats are written as integers, as JavaScript prints them.
    """
    if isinstance(value, dict):
        return (
            "{"
            + ",".join(json.dumps(k, ensure_ascii=False) + ":" + canonical_json(value[k]) for k in sorted(value))
            + "}"
        )
    if isinstance(value, list | tuple):
        return "[" + ",".join(canonical_json(v) for v in value) + "]"
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return json.dumps(value, ensure_ascii=False)


def approval_id_for(tool_call_id: str) -> str:
    """The approval id WorkflowAgent gives the approval request of a tool call."""
    return f"approval-{tool_call_id}"


def sign_tool_approval(secret: str, approval_id: str, tool_call_id: str, tool_name: str, tool_input: Any) -> str:
    """The signature of an approval request (identical to ``signToolApproval`` in ``ai``)."""
    digest = _b64url(hashlib.sha256(canonical_json(tool_input).encode()).digest())
    payload = json.dumps(
        [SIGNATURE_VERSION, approval_id, tool_call_id, tool_name, digest], ensure_ascii=False, separators=(",", ":")
    )
    return _b64url(hmac.new(secret.encode(), payload.encode(), hashlib.sha256).digest())


def verify_tool_approval(
    secret: str, signature: str | None, approval_id: str, tool_call_id: str, tool_name: str, tool_input: Any
) -> bool:
    """True when ``signature`` was made with ``secret`` for exactly this approval request.

    Accepts the legacy newline payload too, like ``verifyToolApprovalSignature``.
    """
    if not signature:
        return False
    if hmac.compare_digest(signature, sign_tool_approval(secret, approval_id, tool_call_id, tool_name, tool_input)):
        return True
    if any("\n" in part for part in (approval_id, tool_call_id, tool_name)):
        return False
    digest = _b64url(hashlib.sha256(canonical_json(tool_input).encode()).digest())
    legacy = f"{approval_id}\n{tool_call_id}\n{tool_name}\n{digest}"
    expected = _b64url(hmac.new(secret.encode(), legacy.encode(), hashlib.sha256).digest())
    return hmac.compare_digest(signature, expected)


class ApprovalSecret:
    """Where the signing secret comes from: an environment variable or a Secrets Manager secret.

    By default: the secret whose ARN is in ``TOOL_APPROVAL_SECRET_ARN`` (as deployed), else the
    value of ``TOOL_APPROVAL_SECRET``.

    The value is read when first needed and cached (Secrets Manager values for ``max_age``
    seconds). ``repr`` never shows it.
    """

    def __init__(
        self,
        *,
        env_var: str | None = DEFAULT_SECRET_ENV,
        secret_id: str | None = None,
        max_age: int = DEFAULT_MAX_AGE,
        loader: Callable[[], str | None] | None = None,
    ) -> None:
        self.env_var = env_var
        self.secret_id = secret_id
        self.max_age = max_age
        self._loader = loader

    def __repr__(self) -> str:
        source = self.secret_id or self.env_var or "custom loader"
        return f"ApprovalSecret(source={source!r})"

    @classmethod
    def from_value(cls, value: str) -> ApprovalSecret:
        """A fixed secret (tests, or a value the caller already holds)."""
        return cls(env_var=None, loader=lambda: value)

    def get(self) -> str | None:
        """The secret, or None when none is configured (approvals are then unsigned)."""
        if self._loader is not None:
            return self._loader()
        secret_id = self.secret_id or (os.environ.get(DEFAULT_SECRET_ARN_ENV) if self.env_var else None)
        if secret_id:
            return read_secret(secret_id, max_age=self.max_age)
        if self.env_var:
            return os.environ.get(self.env_var) or None
        return None

    def keys(self) -> list[str]:
        """The configured secrets: the first signs, every one verifies.

        Several secrets (one per line) let a rotation keep approvals issued under the old
        secret valid: put the new secret first and remove the old one once its approvals expired.
        """
        value = self.get()
        return [k.strip() for k in value.splitlines() if k.strip()] if value else []

    def sign(self, approval_id: str, tool_call_id: str, tool_name: str, tool_input: Any) -> str | None:
        """The signature of an approval request, or None without a secret."""
        keys = self.keys()
        return sign_tool_approval(keys[0], approval_id, tool_call_id, tool_name, tool_input) if keys else None

    def verify(
        self, signature: str | None, approval_id: str, tool_call_id: str, tool_name: str, tool_input: Any
    ) -> bool:
        """True when no secret is configured, or when the signature is valid under one of the secrets."""
        keys = self.keys()
        if not keys:
            return True
        return any(
            verify_tool_approval(key, signature, approval_id, tool_call_id, tool_name, tool_input) for key in keys
        )
