"""Secrets read at run time from AWS Secrets Manager, through Powertools Parameters.

Every part of the harness that needs a secret reads it here: the key that signs tool approvals,
the hashes of the bearer tokens, the model providers' API keys. A value is fetched when first
needed and cached for ``max_age`` seconds (Powertools' cache, shared by the whole process), so a
warm Lambda makes one ``GetSecretValue`` call per secret every ``max_age`` seconds and picks up a
rotated value within that time.

A value is never logged, stored or put in an error: a failure names the secret and the AWS error
code only (:class:`~durable_harness.errors.SecretError` when reading again cannot help,
:class:`~durable_harness.errors.SecretUnavailableError` when it may).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .errors import SecretError, SecretUnavailableError

__all__ = ["DEFAULT_MAX_AGE", "ClientFactory", "read_secret", "read_secret_uncached", "set_client_factory"]

DEFAULT_MAX_AGE = 300
"""Seconds a secret's value is cached before it is read again."""

ClientFactory = Callable[[], Any]
"""Makes a ``secretsmanager`` client (boto3's, or one with its ``get_secret_value`` and errors)."""


def _boto3_client() -> Any:
    import boto3

    return boto3.client("secretsmanager")


_client_factory: ClientFactory = _boto3_client


def set_client_factory(factory: ClientFactory | None) -> None:
    """Install the composition root's client for :func:`read_secret_uncached` (a function's is the
    AWS adapters' shared one, a lite client in Lambda; None: boto3's, as the local kit has it)."""
    global _client_factory
    _client_factory = factory or _boto3_client


def read_secret(secret_id: str, *, max_age: int = DEFAULT_MAX_AGE) -> str:
    """The string value of the secret ``secret_id`` (an ARN or a name), cached for ``max_age`` s."""
    # Imported here: only deployments that name a secret pay for Powertools' and boto3's imports.
    from aws_lambda_powertools.utilities.parameters import get_secret

    try:
        value = get_secret(secret_id, max_age=max_age)
    except Exception as exc:
        # Powertools raises GetParameterError(str(error)) inside its ``except`` block: the botocore
        # error it replaces is the new exception's context.
        cause = exc.__cause__ or exc.__context__ or exc
        raise _read_failure(secret_id, cause if isinstance(cause, Exception) else exc) from exc
    return value.decode() if isinstance(value, bytes) else str(value)


def read_secret_uncached(secret_id: str) -> str:
    """The string value of ``secret_id`` read now, through the installed client (a function's is a
    lite one in Lambda, :func:`set_client_factory`): for a start-up check, which must not cost a
    function's cold start boto3's import. Raises the same errors as :func:`read_secret`; the value
    is not cached."""
    try:
        response = _client_factory().get_secret_value(SecretId=secret_id)
    except Exception as exc:
        raise _read_failure(secret_id, exc) from exc
    value = response.get("SecretString")
    if value is None:
        binary = response.get("SecretBinary", b"")
        value = binary.decode() if isinstance(binary, bytes) else str(binary)
    return str(value)


def _read_failure(secret_id: str, cause: Exception) -> SecretError | SecretUnavailableError:
    """The domain error of a failed read, classified like every other AWS request of the library."""
    from botocore.exceptions import ClientError

    from .aws_failures import error_code, is_transient

    code = (error_code(cause) if isinstance(cause, ClientError) else "") or type(cause).__name__
    if is_transient(cause):
        return SecretUnavailableError(secret_id, code)
    return SecretError(secret_id, code)
