"""Authentication of chat requests, and the principal that owns a run.

Modes (the template's ``AuthMode`` parameter, ``AUTH_MODE`` in the environment):

* ``token`` (the deployed default): ``Authorization: Bearer <token>``. Only SHA-256 hashes of the
  tokens are configured (from Secrets Manager, or ``AUTH_TOKEN_HASHES`` locally), as
  ``name:hexdigest`` entries; the principal is the token's name.
* ``iam``: the Function URL checks SigV4 (``AuthType: AWS_IAM``); the caller's ARN comes from the
  request context that the Lambda Web Adapter forwards in ``x-amzn-request-context``.
* ``none``: everyone is the principal ``anonymous``; for local development only.

A run's stream, status and approvals are served only to the principal that started it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Callable, Mapping
from typing import Protocol

from ..errors import InvalidRequestError
from ..secretsmanager import read_secret

ANONYMOUS = "anonymous"


class Unauthorized(InvalidRequestError):
    """The request carries no valid credentials (401)."""

    def __init__(self, message: str = "Authentication required: send 'Authorization: Bearer <token>'.") -> None:
        super().__init__(message, code="unauthorized", status=401)


class Authenticator(Protocol):
    """Turns request headers into the name of the caller (the principal)."""

    def authenticate(self, headers: Mapping[str, str]) -> str:
        """The principal, or raise :class:`Unauthorized`."""
        ...


class NoAuth:
    """Everyone is ``anonymous`` (local development)."""

    def authenticate(self, headers: Mapping[str, str]) -> str:
        """Always the anonymous principal."""
        return ANONYMOUS


class TokenAuth:
    """Bearer tokens checked against configured SHA-256 hashes (never the tokens themselves)."""

    def __init__(self, load_hashes: Callable[[], Mapping[str, str]]) -> None:
        self._load_hashes = load_hashes

    @classmethod
    def from_entries(cls, entries: str) -> TokenAuth:
        """From ``"name:hexdigest,name2:hexdigest2"`` (a bare digest gets a name made from it)."""
        hashes = parse_token_hashes(entries)
        return cls(lambda: hashes)

    @classmethod
    def from_secret(cls, secret_id: str, *, max_age: int = 300) -> TokenAuth:
        """From a Secrets Manager secret holding the same entries (cached for ``max_age`` s)."""

        def load() -> Mapping[str, str]:
            return parse_token_hashes(read_secret(secret_id, max_age=max_age))

        return cls(load)

    def authenticate(self, headers: Mapping[str, str]) -> str:
        """The name of the token in the ``Authorization`` header."""
        scheme, _, token = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized()
        digest = hashlib.sha256(token.strip().encode()).hexdigest()
        for expected, name in self._load_hashes().items():
            if hmac.compare_digest(digest, expected):
                return name
        raise Unauthorized("The bearer token is not valid.")


class IamAuth:
    """The caller's IAM identity, as verified by the Function URL (``AuthType: AWS_IAM``)."""

    def authenticate(self, headers: Mapping[str, str]) -> str:
        """The caller ARN (or caller id) of the SigV4-signed request."""
        raw = headers.get("x-amzn-request-context")
        try:
            iam = json.loads(raw or "{}").get("authorizer", {}).get("iam", {})
        except (ValueError, AttributeError):
            iam = {}
        principal = iam.get("userArn") or iam.get("callerId")
        if not principal:
            raise Unauthorized("This endpoint requires a SigV4-signed request (AuthMode iam).")
        return str(principal)


def parse_token_hashes(entries: str) -> dict[str, str]:
    """``{hexdigest: name}`` from ``name:hexdigest`` entries separated by commas, newlines or a JSON list."""
    text = entries.strip()
    items: list[str]
    if text.startswith("["):
        items = [str(x) for x in json.loads(text)]
    else:
        items = [x for x in text.replace("\n", ",").split(",") if x.strip()]
    hashes: dict[str, str] = {}
    for item in items:
        name, _, digest = item.strip().rpartition(":")
        digest = digest.lower()
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise ValueError("each token entry must be 'name:<sha256 hex digest>'")
        hashes[digest] = name or f"token-{digest[:8]}"
    return hashes


def authenticator_from_env(env: Mapping[str, str] = os.environ, *, default_mode: str = "token") -> Authenticator:
    """The authenticator the environment asks for (``AUTH_MODE``, ``AUTH_TOKENS_SECRET``,
    ``AUTH_TOKEN_HASHES``); a clear error when ``token`` mode has no tokens configured."""
    mode = env.get("AUTH_MODE", default_mode).strip().lower()
    if mode == "none":
        return NoAuth()
    if mode == "iam":
        return IamAuth()
    if mode == "token":
        if env.get("AUTH_TOKENS_SECRET"):
            return TokenAuth.from_secret(env["AUTH_TOKENS_SECRET"])
        if env.get("AUTH_TOKEN_HASHES"):
            return TokenAuth.from_entries(env["AUTH_TOKEN_HASHES"])
        raise ValueError("AUTH_MODE=token needs AUTH_TOKENS_SECRET (a Secrets Manager secret) or AUTH_TOKEN_HASHES")
    raise ValueError(f"AUTH_MODE must be token, iam or none, not {mode!r}")
