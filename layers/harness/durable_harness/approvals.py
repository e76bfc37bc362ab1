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
import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from .errors import ApprovalSecretError, SecretUnavailableError
from .secretsmanager import DEFAULT_MAX_AGE, read_secret, read_secret_uncached

logger = logging.getLogger(__name__)

SIGNATURE_VERSION = "ai-sdk-tool-approval-v1"
DEFAULT_SECRET_ENV = "TOOL_APPROVAL_SECRET"
DEFAULT_SECRET_ARN_ENV = "TOOL_APPROVAL_SECRET_ARN"
MIN_SECRET_BYTES = 32
"""The shortest secret accepted, in UTF-8 bytes: the seeds' "at least 32 random bytes"."""


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
    seconds); the value :meth:`check` read at start-up is that first read. ``repr`` never shows it.
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
        self._checked: tuple[float, str] | None = None
        """(when, value) of the start-up check's read: the cache until ``max_age`` has passed."""

    def __repr__(self) -> str:
        return f"ApprovalSecret(source={self._source()!r})"

    def _secret_id(self) -> str | None:
        """The Secrets Manager secret the value comes from, if it comes from one."""
        if self._loader is not None:
            return None
        return self.secret_id or (os.environ.get(DEFAULT_SECRET_ARN_ENV) if self.env_var else None)

    def _source(self) -> str:
        """Where the value comes from, for messages (never the value)."""
        if self._loader is not None:
            return "the value given to ApprovalSecret"
        return self._secret_id() or self.env_var or "custom loader"

    def pin(self, environ: Mapping[str, str]) -> None:
        """Take the Secrets Manager secret (``TOOL_APPROVAL_SECRET_ARN``) from ``environ`` now, once,
        instead of from the process environment at each read: a composition root's settings
        (:attr:`durable_harness.settings.Settings.environ`). A source given explicitly stays."""
        if self._loader is None and self.secret_id is None and self.env_var:
            self.secret_id = environ.get(DEFAULT_SECRET_ARN_ENV, "").strip() or None

    @classmethod
    def from_value(cls, value: str) -> ApprovalSecret:
        """A fixed secret (tests, or a value the caller already holds)."""
        return cls(env_var=None, loader=lambda: value)

    def get(self) -> str | None:
        """The secret, or None when none is configured (approvals are then unsigned)."""
        if self._loader is not None:
            return self._loader()
        secret_id = self._secret_id()
        if secret_id:
            checked = self._checked
            if checked is not None and time.monotonic() - checked[0] < self.max_age:
                return checked[1]  # read at start-up: a cold start reads the secret once
            self._checked = None
            return read_secret(secret_id, max_age=self.max_age)
        if self.env_var:
            return os.environ.get(self.env_var) or None
        return None

    def keys(self) -> list[str]:
        """The configured secrets: the first signs, every one verifies.

        Several secrets (one per line) let a rotation keep approvals issued under the old
        secret valid: put the new secret first and remove the old one once its approvals expired.
        Raises :class:`~durable_harness.errors.ApprovalSecretError` when one is shorter than
        :data:`MIN_SECRET_BYTES`: a short key would make signatures guessable, so it signs nothing.
        """
        return self._keys_of(self.get())

    def _keys_of(self, value: str | None) -> list[str]:
        keys = [k.strip() for k in value.splitlines() if k.strip()] if value else []
        for line, key in enumerate(keys, 1):
            size = len(key.encode("utf-8", "surrogatepass"))
            if size < MIN_SECRET_BYTES:
                where = f"line {line} of " if len(keys) > 1 else ""
                raise ApprovalSecretError(
                    f"the approval secret ({where}{self._source()}) is {size} bytes; it must be at least "
                    f"{MIN_SECRET_BYTES} random bytes (make one with: python -c "
                    f"'import secrets; print(secrets.token_urlsafe(32))')"
                )
        return keys

    def check(self) -> None:
        """Read the secret now (at start-up) so that a bad one stops the server, not its first approval.

        Raises :class:`~durable_harness.errors.ApprovalSecretError` for a secret under
        :data:`MIN_SECRET_BYTES` and :class:`~durable_harness.errors.SecretError` for a Secrets
        Manager secret that does not exist or may not be read. A Secrets Manager secret is read
        without the cache (and without boto3: a lite client in Lambda), and the value read is the
        one used for the next ``max_age`` seconds; when Secrets Manager cannot be reached right
        now, that is logged and the secret is checked when it is first used.
        """
        secret_id = self._secret_id()
        if secret_id is None:
            self.keys()
            return
        try:
            value = read_secret_uncached(secret_id)
        except SecretUnavailableError as exc:
            logger.warning("approval secret not checked at start-up (%s); it is checked when first used", exc)
            return
        self._keys_of(value)
        self._checked = (time.monotonic(), value)

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
