"""Lite clients of the AWS JSON protocol services: Step Functions, EventBridge and Secrets Manager,
and the base :class:`JsonClient` that DynamoDB's client builds on.

A JSON protocol call is a POST of the operation's parameters as a JSON object (member names as
boto3 spells them) with the operation in ``X-Amz-Target``; the response is the output shape as
JSON. botocore converts a few types on the way, and these clients do the same for what the
harness's adapters use: bytes are sent base64, datetimes as epoch seconds; Step Functions'
``*Date`` timestamps come back as timezone-aware datetimes.
"""

from __future__ import annotations

import base64
import calendar
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar

from ._client import LiteClient, Response, _json_or_empty

__all__ = ["EventBridgeClient", "JsonClient", "SecretsManagerClient", "StepFunctionsClient"]


class JsonClient(LiteClient):
    """The AWS JSON protocol (1.0 or 1.1) over :class:`LiteClient`: one POST per operation."""

    _target_prefix: ClassVar[str] = ""
    """``X-Amz-Target``'s prefix (``DynamoDB_20120810``): the target is ``<prefix>.<Operation>``."""
    _json_version: ClassVar[str] = "1.0"

    def _call(self, operation: str, members: frozenset[str], params: Mapping[str, Any]) -> dict[str, Any]:
        """Call ``operation`` with ``params`` (boto3's keyword arguments, which must be among
        ``members``): the parsed output with botocore's ``ResponseMetadata``."""
        unknown = set(params) - members
        if unknown:
            raise TypeError(f"{operation}: unexpected keyword argument(s) {', '.join(sorted(unknown))}")
        headers = {
            "content-type": f"application/x-amz-json-{self._json_version}",
            "x-amz-target": f"{self._target_prefix}.{operation}",
        }
        body = json.dumps(_to_wire(params), separators=(",", ":")).encode()
        response = self._request(operation, "POST", "/", headers=headers, body=body)
        parsed = self._parse(_json_or_empty(response.body))
        parsed["ResponseMetadata"] = self._response_metadata(response)
        return parsed

    def _parse(self, body: dict[str, Any]) -> dict[str, Any]:
        """The output of an operation from its JSON body (as it is, by default)."""
        return body

    def _error_response(self, response: Response) -> dict[str, Any]:
        error = super()._error_response(response)
        # botocore keeps a modeled error's members at the top level (its message; DynamoDB's failed
        # condition's Item, a cancelled transaction's CancellationReasons). Without the model, every
        # member of the body is kept: an unmodeled error gets keys botocore would leave out.
        body = _json_or_empty(response.body)
        body.pop("__type", None)
        error.update(self._parse(body))
        return error


def _to_wire(value: Any) -> Any:
    """``value`` as botocore's JSON serializer sends it: bytes base64, datetimes epoch seconds."""
    if isinstance(value, Mapping):
        return {key: _to_wire(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_to_wire(item) for item in value]
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode()
    if isinstance(value, datetime):
        return calendar.timegm(value.utctimetuple())
    return value


_SFN_OPERATIONS = {
    "start_execution": ("StartExecution", frozenset({"stateMachineArn", "name", "input", "traceHeader"})),
    "describe_execution": ("DescribeExecution", frozenset({"executionArn", "includedData"})),
    "stop_execution": ("StopExecution", frozenset({"executionArn", "error", "cause"})),
    "send_task_success": ("SendTaskSuccess", frozenset({"taskToken", "output"})),
    "send_task_failure": ("SendTaskFailure", frozenset({"taskToken", "error", "cause"})),
    "send_task_heartbeat": ("SendTaskHeartbeat", frozenset({"taskToken"})),
}


class StepFunctionsClient(JsonClient):
    """The Step Functions operations the harness uses, as boto3's ``stepfunctions`` client has them."""

    _target_prefix = "AWSStepFunctions"

    def start_execution(self, **kwargs: Any) -> dict[str, Any]:
        """``StartExecution``: ``{"executionArn", "startDate"}``."""
        return self._call(*_SFN_OPERATIONS["start_execution"], kwargs)

    def describe_execution(self, **kwargs: Any) -> dict[str, Any]:
        """``DescribeExecution``: the execution's ``status``, ``startDate`` ... as boto3 returns them."""
        return self._call(*_SFN_OPERATIONS["describe_execution"], kwargs)

    def stop_execution(self, **kwargs: Any) -> dict[str, Any]:
        """``StopExecution``: ``{"stopDate"}``."""
        return self._call(*_SFN_OPERATIONS["stop_execution"], kwargs)

    def send_task_success(self, **kwargs: Any) -> dict[str, Any]:
        """``SendTaskSuccess`` of a callback task."""
        return self._call(*_SFN_OPERATIONS["send_task_success"], kwargs)

    def send_task_failure(self, **kwargs: Any) -> dict[str, Any]:
        """``SendTaskFailure`` of a callback task."""
        return self._call(*_SFN_OPERATIONS["send_task_failure"], kwargs)

    def send_task_heartbeat(self, **kwargs: Any) -> dict[str, Any]:
        """``SendTaskHeartbeat`` of a callback task."""
        return self._call(*_SFN_OPERATIONS["send_task_heartbeat"], kwargs)

    def _parse(self, body: dict[str, Any]) -> dict[str, Any]:
        # The operations' timestamps (startDate, stopDate, redriveDate) are epoch seconds on the wire.
        for key, value in body.items():
            if key.endswith("Date") and isinstance(value, int | float):
                body[key] = datetime.fromtimestamp(value, UTC)
        return body


_PUT_EVENTS = frozenset({"Entries"})  # EndpointId (global endpoints, SigV4a) is botocore's alone


class EventBridgeClient(JsonClient):
    """EventBridge's ``PutEvents``, as boto3's ``events`` client has it."""

    _target_prefix = "AWSEvents"
    _json_version = "1.1"

    def put_events(self, **kwargs: Any) -> dict[str, Any]:
        """``PutEvents``: ``{"FailedEntryCount", "Entries": [{"EventId"} | {"ErrorCode", "ErrorMessage"}]}``."""
        return self._call("PutEvents", _PUT_EVENTS, kwargs)


_GET_SECRET_VALUE = frozenset({"SecretId", "VersionId", "VersionStage"})


class SecretsManagerClient(JsonClient):
    """Secrets Manager's ``GetSecretValue``, as boto3's ``secretsmanager`` client has it: the check
    of the approval secret at a function's start-up reads it without botocore's import."""

    _target_prefix = "secretsmanager"
    _json_version = "1.1"
    _body_limits: ClassVar[dict[str, int]] = {"GetSecretValue": 1024 * 1024}  # a secret is 64 KiB at most

    def get_secret_value(self, **kwargs: Any) -> dict[str, Any]:
        """``GetSecretValue``: ``SecretString`` or ``SecretBinary`` (bytes), ``ARN``, ``Name`` ..."""
        return self._call("GetSecretValue", _GET_SECRET_VALUE, kwargs)

    def _parse(self, body: dict[str, Any]) -> dict[str, Any]:
        # As botocore: a blob arrives base64, a timestamp as epoch seconds.
        if isinstance(body.get("SecretBinary"), str):
            body["SecretBinary"] = base64.b64decode(body["SecretBinary"])
        if isinstance(body.get("CreatedDate"), int | float):
            body["CreatedDate"] = datetime.fromtimestamp(body["CreatedDate"], UTC)
        return body
