"""The lite DynamoDB client: the five operations the harness's adapters call, as boto3 has them.

Binary attribute values (``B``, ``BS``) are bytes in requests and responses, as botocore gives
them; everything else is the JSON as DynamoDB sends it, which is what botocore returns for these
operations too. Each response's CRC32 (``x-amz-crc32``) is checked, and a mismatch retried like a
dropped connection (botocore's ``RetryDDBChecksumError``); a body still corrupt after the last
attempt raises botocore's ``ChecksumError``.
"""

from __future__ import annotations

import base64
import zlib
from typing import Any, ClassVar

from botocore.exceptions import ChecksumError

from ._client import Response
from .jsonrpc import JsonClient

__all__ = ["DynamoDBClient"]

_GET_ITEM = frozenset(
    {"TableName", "Key", "AttributesToGet", "ConsistentRead", "ReturnConsumedCapacity", "ProjectionExpression",
     "ExpressionAttributeNames"}
)  # fmt: skip
_WRITE_COMMON = frozenset(
    {"TableName", "Expected", "ReturnValues", "ReturnConsumedCapacity", "ReturnItemCollectionMetrics",
     "ConditionalOperator", "ConditionExpression", "ExpressionAttributeNames", "ExpressionAttributeValues",
     "ReturnValuesOnConditionCheckFailure"}
)  # fmt: skip
_PUT_ITEM = _WRITE_COMMON | {"Item"}
_UPDATE_ITEM = _WRITE_COMMON | {"Key", "AttributeUpdates", "UpdateExpression"}
_QUERY = frozenset(
    {"TableName", "IndexName", "Select", "AttributesToGet", "Limit", "ConsistentRead", "KeyConditions",
     "QueryFilter", "ConditionalOperator", "ScanIndexForward", "ExclusiveStartKey", "ReturnConsumedCapacity",
     "ProjectionExpression", "FilterExpression", "KeyConditionExpression", "ExpressionAttributeNames",
     "ExpressionAttributeValues"}
)  # fmt: skip
_TRANSACT_WRITE_ITEMS = frozenset(
    {"TransactItems", "ReturnConsumedCapacity", "ReturnItemCollectionMetrics", "ClientRequestToken"}
)


class DynamoDBClient(JsonClient):
    """``get_item``, ``put_item``, ``query``, ``update_item`` and ``transact_write_items``, with boto3's
    keyword arguments and response dicts; errors as botocore raises them (``ClientError`` with the
    failed condition's ``Item``, a cancelled transaction's ``CancellationReasons``)."""

    _target_prefix = "DynamoDB_20120810"
    _backoff_scale = 0.025  # botocore's non-throttling base for DynamoDB
    _modeled_retryable: ClassVar[frozenset[str]] = frozenset({"ReplicatedWriteConflictException"})
    # A cancelled transaction may return each of its 100 items (400 KB at most) with its reason.
    _body_limits: ClassVar[dict[str, int]] = {"TransactWriteItems": 128 * 1024 * 1024}

    def get_item(self, **kwargs: Any) -> dict[str, Any]:
        """``GetItem``: ``{"Item": ...}`` when the item exists, else no ``Item`` key."""
        return self._call("GetItem", _GET_ITEM, kwargs)

    def put_item(self, **kwargs: Any) -> dict[str, Any]:
        """``PutItem``: ``{}`` unless ``ReturnValues`` / consumed capacity were asked for."""
        return self._call("PutItem", _PUT_ITEM, kwargs)

    def update_item(self, **kwargs: Any) -> dict[str, Any]:
        """``UpdateItem``: ``{"Attributes": ...}`` per ``ReturnValues``."""
        return self._call("UpdateItem", _UPDATE_ITEM, kwargs)

    def query(self, **kwargs: Any) -> dict[str, Any]:
        """``Query``: ``{"Items", "Count", "ScannedCount", "LastEvaluatedKey"?}``."""
        return self._call("Query", _QUERY, kwargs)

    def transact_write_items(self, **kwargs: Any) -> dict[str, Any]:
        """``TransactWriteItems``; a ``ClientRequestToken`` is made when none is given, as botocore
        does (its idempotency token), so that a retried attempt is not applied twice."""
        if "ClientRequestToken" not in kwargs:
            import uuid

            kwargs["ClientRequestToken"] = str(uuid.uuid4())
        return self._call("TransactWriteItems", _TRANSACT_WRITE_ITEMS, kwargs)

    def _parse(self, body: dict[str, Any]) -> dict[str, Any]:
        decoded: dict[str, Any] = _decode(body)
        return decoded

    def _response_ok(self, response: Response) -> bool:
        expected = response.headers.get("x-amz-crc32")
        return expected is None or (zlib.crc32(response.body) & 0xFFFFFFFF) == _int(expected)

    def _response_failed(self, response: Response) -> None:
        raise ChecksumError(
            checksum_type="crc32",
            expected_checksum=response.headers.get("x-amz-crc32"),
            actual_checksum=zlib.crc32(response.body) & 0xFFFFFFFF,
        )


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return -1


def _decode(value: Any) -> Any:
    """``value`` with every binary attribute value (``{"B": str}``, ``{"BS": [str]}``) decoded to bytes."""
    if isinstance(value, dict):
        if len(value) == 1:
            ((key, inner),) = value.items()
            if key == "B" and isinstance(inner, str):
                return {"B": base64.b64decode(inner)}
            if key == "BS" and isinstance(inner, list) and all(isinstance(v, str) for v in inner):
                return {"BS": [base64.b64decode(v) for v in inner]}
        return {key: _decode(inner) for key, inner in value.items()}
    if isinstance(value, list):
        return [_decode(item) for item in value]
    return value
