"""Turning botocore failures into the library's domain errors, in one place for every AWS adapter.

The rule the runner relies on: anything that may succeed when the slice runs again (throttling,
5xx, timeouts, dropped connections) becomes :class:`~durable_harness.errors.StorageError`, which
is retryable; anything that will fail the same way again (access denied, a missing table, a bad
parameter) becomes :class:`AwsRequestError`, which is fatal. Conditional-write failures are not
handled here: each adapter turns them into fencing errors itself, because only it knows what the
condition meant.

botocore has already retried retryable errors (``retries.mode="standard"``) by the time an
adapter sees them, so a ``StorageError`` from here means the client gave up, not one bad request.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from ..aws_failures import RETRYABLE_CODES, error_code, http_status, is_transient
from ..errors import FatalError, FormatVersionError, HarnessError, StorageError
from .table import FORMAT

__all__ = [
    "RETRYABLE_CODES",
    "AwsRequestError",
    "aws_errors",
    "check_format",
    "error_code",
    "error_item",
    "has_code",
    "http_status",
    "object_body",
    "translate",
]


class AwsRequestError(FatalError):
    """An AWS request failed in a way a retry cannot fix (permissions, configuration, bad input).

    ``code`` is the AWS error code (e.g. ``AccessDeniedException``) when there is one.
    """

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


def error_item(exc: ClientError) -> dict[str, Any] | None:
    """The item DynamoDB returned with a failed condition (``ReturnValuesOnConditionCheckFailure``).

    ``None`` when the item did not exist, which is how "missing" is told apart from "stale".
    """
    item = exc.response.get("Item")
    return item if isinstance(item, dict) and item else None


def has_code(exc: Exception, *codes: str) -> bool:
    """Whether ``exc`` is an AWS error response with one of ``codes``."""
    return isinstance(exc, ClientError) and error_code(exc) in codes


def translate(exc: Exception, what: str) -> HarnessError:
    """The domain error for a botocore failure during ``what`` (a short description)."""
    if isinstance(exc, HarnessError):
        return exc
    if isinstance(exc, ClientError):
        code, status = error_code(exc), http_status(exc)
        message = exc.response.get("Error", {}).get("Message", "") or str(exc)
        detail = f"{what}: {code or status}: {message}"
        return StorageError(detail) if is_transient(exc) else AwsRequestError(detail, code=code or None)
    # Timeouts and dropped connections may work next time; missing credentials, parameter
    # validation and the like are a deployment or code problem (``aws_failures.is_transient``).
    return StorageError(f"{what}: {exc}") if is_transient(exc) else AwsRequestError(f"{what}: {exc}")


@contextmanager
def aws_errors(what: str) -> Iterator[None]:
    """Re-raise botocore failures inside the block as domain errors (see :func:`translate`)."""
    try:
        yield
    except (ClientError, BotoCoreError) as exc:
        raise translate(exc, what) from exc


def object_body(s3_client: Any, bucket: str, key: str, what: str) -> bytes | None:
    """The body of S3 object ``key``, ``None`` when it does not exist (the caller knows what that
    means); other failures as :func:`translate` says."""
    try:
        return bytes(s3_client.get_object(Bucket=bucket, Key=key)["Body"].read())
    except (ClientError, BotoCoreError) as exc:
        if has_code(exc, "NoSuchKey", "404"):
            return None
        raise translate(exc, what) from exc


def check_format(item: dict[str, Any], expected: int, what: str) -> None:
    """Refuse an item whose ``format`` attribute (the storage format version it was written in,
    set when it is created) is not ``expected``: its attributes may mean something else."""
    found = item.get(FORMAT, {}).get("N")
    if found != str(expected):
        remedy = "Serve it with that release, or delete the run (its items expire after RunTtlDays)."
        raise FormatVersionError(what, found, expected, remedy)
