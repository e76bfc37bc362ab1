"""Authentication of chat requests, and the principal that owns a run.

Modes (the template's ``AuthMode`` parameter, ``AUTH_MODE`` in the environment):

* ``token`` (the deployed default): ``Authorization: Bearer <token>``. Only SHA-256 hashes of the
  tokens are configured (from Secrets Manager, or ``AUTH_TOKEN_HASHES`` locally), as
  ``name:hexdigest`` entries; the principal is the token's name.
* ``iam``: the Function URL checks SigV4 (``AuthType: AWS_IAM``); the caller's ARN comes from the
  request context that the Lambda Web Adapter forwards in ``x-amzn-request-context``. Only the
  Function URL makes that context trustworthy: a local server (or a direct Invoke of the function)
  would take whatever a client sends, so the local server refuses this mode unless told otherwise
  for tests (``AUTH_IAM_ALLOW_LOCAL=1``). ``AUTH_IAM_PRINCIPAL=role`` keys the runs of assumed-role
  callers by the role, without the session name (see :class:`IamAuth`).
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


IAM_PRINCIPALS = ("caller", "role")
"""How :class:`IamAuth` names an assumed-role caller: by its session (the default) or by its role."""


class IamAuth:
    """The caller's IAM identity, as verified by the Function URL (``AuthType: AWS_IAM``).

    The principal is the caller's ARN (``userArn``), or its ``callerId`` when there is no ARN. For
    an assumed role the ARN names the session: ``arn:aws:sts::<account>:assumed-role/<role>/<session>``,
    so every session is a principal of its own. With ``principal="role"`` the session name is
    dropped (``arn:aws:sts::<account>:assumed-role/<role>``, and ``<role id>`` for a caller id
    ``<role id>:<session>``): every session of a role sees the role's runs. Users and other
    identities are named by their ARN either way.
    """

    def __init__(self, principal: str = "caller") -> None:
        """Name assumed-role callers by their session (``"caller"``) or by their role (``"role"``)."""
        if principal not in IAM_PRINCIPALS:
            raise ValueError(f"AUTH_IAM_PRINCIPAL must be one of {', '.join(IAM_PRINCIPALS)}, not {principal!r}")
        self.by_role = principal == "role"

    def authenticate(self, headers: Mapping[str, str]) -> str:
        """The caller ARN (or caller id) of the SigV4-signed request."""
        iam = _iam_context(headers.get("x-amzn-request-context"))
        arn, caller_id = iam.get("userArn"), iam.get("callerId")
        if isinstance(arn, str) and arn.strip():
            return _role_of_arn(arn) if self.by_role else arn
        if isinstance(caller_id, str) and caller_id.strip():
            return caller_id.partition(":")[0] if self.by_role else caller_id
        raise Unauthorized("This endpoint requires a SigV4-signed request (AuthMode iam).")


def _iam_context(raw: str | None) -> dict[str, object]:
    """``requestContext.authorizer.iam`` as an object; empty for anything malformed (then 401)."""
    try:
        context = json.loads(raw or "{}")
    except ValueError:
        return {}
    authorizer = context.get("authorizer") if isinstance(context, dict) else None
    iam = authorizer.get("iam") if isinstance(authorizer, dict) else None
    return iam if isinstance(iam, dict) else {}


def _role_of_arn(arn: str) -> str:
    """An assumed-role session ARN without its session name; any other ARN as it is."""
    prefix, sep, path = arn.partition(":assumed-role/")
    if not sep or "/" not in path:
        return arn
    return f"{prefix}:assumed-role/{path.rsplit('/', 1)[0]}"


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


def authenticator_from_env(
    env: Mapping[str, str] = os.environ, *, default_mode: str = "token", local: bool = False
) -> Authenticator:
    """The authenticator the environment asks for (``AUTH_MODE``, ``AUTH_TOKENS_SECRET``,
    ``AUTH_TOKEN_HASHES``, ``AUTH_IAM_PRINCIPAL``); a clear error when ``token`` mode has no tokens
    configured, or when a ``local`` server is asked for ``iam`` mode without ``AUTH_IAM_ALLOW_LOCAL=1``."""
    mode = env.get("AUTH_MODE", default_mode).strip().lower()
    if mode == "none":
        return NoAuth()
    if mode == "iam":
        if local and env.get("AUTH_IAM_ALLOW_LOCAL", "").strip() != "1":
            raise ValueError(
                "AUTH_MODE=iam works only behind a Lambda Function URL with AuthType AWS_IAM, which verifies "
                "the caller; a local server would believe any request context a client sends. Use "
                "AUTH_MODE=token locally (AUTH_IAM_ALLOW_LOCAL=1 allows iam for tests only)."
            )
        return IamAuth(env.get("AUTH_IAM_PRINCIPAL", "caller").strip().lower() or "caller")
    if mode == "token":
        if env.get("AUTH_TOKENS_SECRET"):
            return TokenAuth.from_secret(env["AUTH_TOKENS_SECRET"])
        if env.get("AUTH_TOKEN_HASHES"):
            return TokenAuth.from_entries(env["AUTH_TOKEN_HASHES"])
        raise ValueError("AUTH_MODE=token needs AUTH_TOKENS_SECRET (a Secrets Manager secret) or AUTH_TOKEN_HASHES")
    raise ValueError(f"AUTH_MODE must be token, iam or none, not {mode!r}")
