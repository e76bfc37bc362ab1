"""Which AWS failures a retry may fix: the one rule every AWS request of the library is classified by.

It holds no adapter and imports only ``botocore.exceptions``, so that both the AWS adapters
(``aws/_errors.py``, which turns failures into the domain's errors) and the core's own reader of
AWS (``secretsmanager.py``, which the local kit uses too) classify alike.
"""

from __future__ import annotations

from botocore.exceptions import BotoCoreError, ClientError, ConnectionError, HTTPClientError, IncompleteReadError

__all__ = ["RETRYABLE_CODES", "error_code", "http_status", "is_transient"]

# Codes that mean "too fast" or "try again later" across DynamoDB, S3, Step Functions and
# EventBridge. botocore's standard retry mode knows most of them; the extra ones are service
# specific (Step Functions' running-execution quota, S3's 409 race between conditional writes).
RETRYABLE_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
        "TransactionInProgressException",
        "TransactionConflictException",
        "LimitExceededException",
        "SlowDown",
        "BandwidthLimitExceeded",
        "ServiceUnavailable",
        "InternalError",
        "InternalServerError",
        "InternalFailure",
        "InternalException",
        "RequestTimeout",
        "RequestTimeoutException",
        "PriorRequestNotComplete",
        "ConditionalRequestConflict",
        "ExecutionLimitExceeded",
    }
)
"""AWS error codes a retry may fix (``aws/_errors.py`` turns them into the retryable ``StorageError``)."""


def error_code(exc: ClientError) -> str:
    """The AWS error code of a ``ClientError`` (``""`` when the response has none)."""
    return str(exc.response.get("Error", {}).get("Code", ""))


def http_status(exc: ClientError) -> int:
    """The HTTP status of a ``ClientError`` (0 when unknown)."""
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)


def is_transient(exc: Exception) -> bool:
    """Whether the failed request may succeed when made again: throttling, a 5xx or 429, a timeout,
    a refused or dropped connection, a truncated body, or an error that is not botocore's. Missing
    credentials, a bad parameter, access denied and the like are not."""
    if isinstance(exc, ClientError):
        status = http_status(exc)
        return error_code(exc) in RETRYABLE_CODES or status >= 500 or status == 429
    if isinstance(exc, ConnectionError | HTTPClientError | IncompleteReadError):
        return True
    return not isinstance(exc, BotoCoreError)
