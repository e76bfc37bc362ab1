"""The :class:`~durable_harness.errors.ModelError` of a failed Bedrock call (boto3's or the lite
client's: both raise botocore's exceptions), for :mod:`.bedrock`.

A refused call's message is replaced with what to do (:func:`~.bedrock_access.access_advice`): it
can name the account and the role, which the client must not see.
"""

from __future__ import annotations

from ..errors import ModelError
from .bedrock_access import access_advice
from .provider_utils import is_retryable_status, retry_after_seconds

__all__ = ["RETRYABLE_CODES", "model_error"]

RETRYABLE_CODES = frozenset(
    {
        "throttlingexception",
        "serviceunavailableexception",
        "internalserverexception",
        "modelstreamerrorexception",
        "modeltimeoutexception",
        "modelnotreadyexception",
    }
)
"""Bedrock's error codes (lower case) that a later try may not get."""


def model_error(exc: Exception) -> ModelError:
    """The :class:`ModelError` of a boto3 / botocore failure."""
    from botocore.exceptions import ClientError, ConnectionError, HTTPClientError

    if isinstance(exc, ClientError):
        error = exc.response.get("Error") or {}
        code = str(error.get("Code") or "Unknown")
        message = str(error.get("Message") or "")
        metadata = exc.response.get("ResponseMetadata") or {}
        status = metadata.get("HTTPStatusCode")
        status = status if isinstance(status, int) and status >= 400 else None
        retryable = code.lower() in RETRYABLE_CODES or (status is not None and is_retryable_status(status))
        headers = metadata.get("HTTPHeaders") or {}
        # A refused call's message may name the account and role: the client gets what to do instead.
        message = access_advice(code, message) or message
        return ModelError(
            f"Bedrock {code}: {message}".rstrip(": "),
            retryable=retryable,
            status_code=status,
            retry_after=retry_after_seconds(headers) if headers else None,
        )
    if isinstance(exc, ConnectionError | HTTPClientError) or _is_urllib3_error(exc):
        return ModelError(f"Bedrock request failed: {exc}", retryable=True)
    return ModelError(f"Bedrock request failed: {type(exc).__name__}: {exc}")


def _is_urllib3_error(exc: Exception) -> bool:
    try:
        from urllib3.exceptions import HTTPError
    except ImportError:  # pragma: no cover - urllib3 comes with botocore
        return False
    return isinstance(exc, HTTPError)
