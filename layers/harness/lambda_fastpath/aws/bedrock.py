"""Amazon Bedrock Runtime's ``converse_stream`` for the lite client, as botocore's ``bedrock-runtime`` does it.

The request (REST-JSON): ``POST /model/{modelId}/converse-stream``, the model id percent-encoded
with nothing kept but ``-._~`` (so ``:`` and the ``/`` of an ARN are escaped, as botocore renders a
URI label), a JSON body of the other arguments in the order given (``json.dumps`` with its default
separators, as botocore's serializer writes it; ``bytes`` base64-encoded, as botocore serializes
blobs), signed for ``bedrock``. The response: ``{"ResponseMetadata": ..., "stream": EventStream}``,
the stream yielding ``{eventType: payload}`` dicts parsed by the model's shapes
(:mod:`._converse_shapes`) as each message arrives. An exception message in the stream raises
:class:`botocore.exceptions.EventStreamError` with botocore's ``{"Error": {"Code", "Message"}}``;
an error before the stream raises the ``ClientError`` of the base client (REST-JSON error code from
``x-amzn-ErrorType``, else the body's ``code``, plus the modelled error's fields).
"""

from __future__ import annotations

import base64
import http.client
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol
from urllib.parse import quote

from botocore.exceptions import ConnectionClosedError, EventStreamError, ParamValidationError

from . import _converse_shapes
from ._client import CONNECT_TIMEOUT, MAX_ATTEMPTS, READ_TIMEOUT, LiteClient
from ._eventstream import IncompleteMessage, Message, read_messages
from ._transport import Credentials, Response

__all__ = [
    "ATTEMPT_TIMEOUT",
    "EVENT_TIMEOUT",
    "BedrockRuntimeClient",
    "EventStream",
    "ResponseParserError",
    "error_response",
    "model_path",
    "parse_event",
    "serialize_body",
]

_OPERATION = "ConverseStream"

ATTEMPT_TIMEOUT = 600.0
EVENT_TIMEOUT = 600.0
"""The deadlines of a ConverseStream call (the lite client's alone; botocore has none). The stream
lives as long as the model writes, so it has no overall deadline: ``ATTEMPT_TIMEOUT`` bounds the
request up to the response's head (and an error's whole body), then each event message has
``EVENT_TIMEOUT`` from when its read starts to its last byte. A model that thinks for minutes
between events is within it (it is the model adapter's read timeout, 600 s); an endpoint sending an event a byte
at a time is not, though each byte comes within the read timeout. Each message's size is capped
by the event-stream format (``_eventstream``), an error body by the default ``MAX_BODY``."""


class ResponseParserError(Exception):
    """An event botocore's parser would reject too (a union with more or fewer than one member)."""


class _Body(Protocol):
    def read(self, amt: int, /) -> bytes: ...

    def close(self) -> None: ...


class BedrockRuntimeClient(LiteClient):
    """The ``bedrock-runtime`` operations the harness calls (``converse_stream``), signed for ``bedrock``.

    The timeouts and attempts are :class:`LiteClient`'s; the one caller, the model adapter, gives its
    own (``CLIENT_SETTINGS`` of ``models/bedrock.py``: one attempt, a 600 s read timeout, through
    ``aws/clients.py``). The deadlines are :data:`ATTEMPT_TIMEOUT` (to the response's head) and
    :data:`EVENT_TIMEOUT` (each event).
    """

    _modeled_retryable = _converse_shapes.RETRYABLE_ERRORS

    def __init__(
        self,
        *,
        region: str,
        credentials: Credentials,
        endpoint_url: str,
        signing_name: str = "bedrock",
        connect_timeout: float = CONNECT_TIMEOUT,
        read_timeout: float = READ_TIMEOUT,
        max_attempts: int = MAX_ATTEMPTS,
        attempt_timeout: float = ATTEMPT_TIMEOUT,
        event_timeout: float = EVENT_TIMEOUT,
        max_body: int | None = None,
    ) -> None:
        """The settings are :class:`LiteClient`'s, plus ``event_timeout``: each event's deadline."""
        super().__init__(
            region=region,
            credentials=credentials,
            endpoint_url=endpoint_url,
            signing_name=signing_name,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            max_attempts=max_attempts,
            attempt_timeout=attempt_timeout,
            max_body=max_body,
        )
        self._event_timeout = event_timeout

    def converse_stream(self, **arguments: Any) -> dict[str, Any]:
        """Start a ConverseStream call: ``{"ResponseMetadata": ..., "stream": EventStream}``, as boto3 returns it.

        The arguments are boto3's (``modelId`` and the request's members); an unknown one is a
        ``TypeError`` before anything is sent.
        """
        unknown = sorted(set(arguments) - _converse_shapes.INPUT_MEMBERS)
        if unknown:
            raise TypeError(f"converse_stream() got unexpected keyword arguments: {', '.join(unknown)}")
        if "modelId" not in arguments:  # botocore's own validation error, word for word
            raise ParamValidationError(report='Missing required parameter in input: "modelId"')
        body_arguments = dict(arguments)
        path = model_path(body_arguments.pop("modelId"))
        headers = {"Content-Type": "application/json"}
        response = self._request(
            _OPERATION, "POST", path, headers=headers, body=serialize_body(body_arguments), stream=True
        )
        return {
            "ResponseMetadata": self._response_metadata(response),
            "stream": EventStream(
                response, self.endpoint_url, before_event=lambda: response.restart_deadline(self._event_timeout)
            ),
        }

    def _error_response(self, response: Response) -> dict[str, Any]:
        """REST-JSON errors, with the modelled error's fields (see :func:`error_response`)."""
        return error_response(response.status, response.headers, response.body)


class EventStream:
    """The events of a ConverseStream response, parsed as they arrive (botocore's ``EventStream``).

    Iterating yields one ``{eventType: payload}`` dict per event message (messages of an event type
    the model does not define are skipped, as botocore skips them); ``close()`` drops the
    connection. Iterating twice continues where the first iteration stopped.

    ``before_event`` is called as the read of each message starts (the client restarts the body's
    deadline there: each event has its own, the stream none).
    """

    def __init__(self, body: _Body, endpoint_url: str, *, before_event: Callable[[], None] | None = None) -> None:
        self._body = body
        self._endpoint_url = endpoint_url
        self._messages = read_messages(body.read)
        self._before_event = before_event

    def __iter__(self) -> Iterator[dict[str, Any]]:
        while True:
            if self._before_event is not None:
                self._before_event()
            try:
                message = next(self._messages)
            except StopIteration:
                return
            except IncompleteMessage as exc:  # the connection ended mid-frame: botocore's transport error
                raise ConnectionClosedError(endpoint_url=self._endpoint_url) from exc
            event = parse_event(message)
            if event:
                yield event

    def close(self) -> None:
        """Close the response (the connection is dropped unless the stream was read to its end)."""
        self._body.close()


def parse_event(message: Message) -> dict[str, Any]:
    """``{eventType: payload}`` of one message, ``{}`` for an unknown event type; exceptions raise.

    The payload keeps the members the model defines, with blobs decoded, exactly as botocore's
    ``EventStreamJSONParser`` gives them.
    """
    headers = message.headers
    if headers.get(":message-type") in ("error", "exception"):
        raise EventStreamError(_error_response(message), _OPERATION)
    event_type = headers.get(":event-type")
    shape = _converse_shapes.EVENTS.get(event_type) if isinstance(event_type, str) else None
    if shape is None:
        return {}
    assert isinstance(event_type, str)
    return {event_type: _parse(shape, _json(message.payload))}


def _error_response(message: Message) -> dict[str, Any]:
    """botocore's ``{"Error": {"Code", "Message"}}`` of an exception or error message."""
    headers = message.headers
    exception_type = headers.get(":exception-type")
    shape = _converse_shapes.EVENTS.get(exception_type) if isinstance(exception_type, str) else None
    if shape is not None:
        body = _parse(shape, _json(message.payload))
        return {"Error": {"Code": exception_type, "Message": body.get("Message", body.get("message", ""))}}
    return {"Error": {"Code": headers.get(":error-code", ""), "Message": headers.get(":error-message", "")}}


def error_response(status: int, headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
    """botocore's parsed REST-JSON error (``Error`` and the modelled error's fields, no metadata).

    The code is the ``x-amzn-ErrorType`` header's (``Code:namespace`` cut at the colon), else the
    body's ``code`` / ``__type``, else the status; a 5xx without a JSON body (a proxy's page) gets
    the status as its code and the status's phrase as its message, as botocore gives them.
    """
    stripped = body.strip()
    if status >= 500 and (not stripped or stripped.startswith(b"<html>")):
        return {"Error": {"Code": str(status), "Message": http.client.responses.get(status, "")}}
    parsed = _json(body)
    code: Any = parsed.get("__type", str(status))
    if "x-amzn-errortype" in headers:
        code = headers["x-amzn-errortype"]
    elif "code" in parsed or "Code" in parsed:
        code = parsed.get("code", parsed.get("Code", ""))
    if isinstance(code, str):
        code = code.split(":", 1)[0].rsplit("#", 1)[-1]
    response: dict[str, Any] = {"Error": {"Message": parsed.get("message", parsed.get("Message", "")), "Code": code}}
    modelled = _converse_shapes.ERRORS.get(code)
    for word in modelled.split() if modelled is not None else ():
        name, _, kind = word.partition(":")
        if parsed.get(name) is not None:
            response[name] = int(parsed[name]) if kind == "integer" else parsed[name]
    return response


def _json(payload: bytes) -> Any:
    if not payload:
        return {}
    text = payload.decode("utf-8")
    try:
        return json.loads(text)
    except ValueError:  # botocore keeps an unparsable body as the message
        return {"message": text}


_Shape = tuple[str, Any]


def _load_shapes(table: Mapping[str, str]) -> dict[str, _Shape]:
    """The compact table of :mod:`._converse_shapes` as ``{name: (kind, members | element | None)}``."""
    shapes: dict[str, _Shape] = {}
    for name, text in table.items():
        kind, *words = text.split()
        if kind in ("structure", "union"):
            members = dict(word.partition("=")[::2] for word in words)
            shapes[name] = (kind, {member: ref or None for member, ref in members.items()})
        else:
            shapes[name] = (kind, words[0] if words else None)
    return shapes


_SHAPES = _load_shapes(_converse_shapes.SHAPES)


def _parse(shape_name: str | None, value: Any) -> Any:
    """``value`` parsed as botocore's JSON parser parses the shape ``shape_name``."""
    if shape_name is None or value is None:  # strings, numbers, booleans, documents: kept as they are
        return value
    kind, detail = _SHAPES[shape_name]
    if kind == "blob":
        return base64.b64decode(value)
    if kind == "list":
        return [None if item is None else _parse(detail, item) for item in value]
    if kind == "map":
        return {key: _parse(detail, item) for key, item in value.items()}
    members: dict[str, str | None] = detail
    if kind == "union":
        present = [key for key, item in value.items() if key != "__type" and item is not None]
        if len(present) != 1:
            raise ResponseParserError(f"Invalid service response: {shape_name} must have one and only one member set.")
        if present[0] not in members:  # a member newer than the model: botocore's marker
            return {"SDK_UNKNOWN_MEMBER": {"name": next(iter(value))}}
    return {member: _parse(ref, value[member]) for member, ref in members.items() if value.get(member) is not None}


def serialize_body(arguments: Mapping[str, Any]) -> bytes:
    """The JSON body botocore writes for ``arguments`` (``bytes`` as base64, the order kept).

    Blobs are told apart by their type, not by the model: a blob given as ``str`` (which botocore
    would encode too) is sent as it is. The harness passes blobs as ``bytes`` only.
    """
    return json.dumps(_blobs_as_base64(arguments)).encode("utf-8") if arguments else b"{}"


def _blobs_as_base64(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).strip().decode("utf-8")
    if isinstance(value, Mapping):
        return {key: _blobs_as_base64(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_blobs_as_base64(item) for item in value]
    return value


def model_path(model_id: str) -> str:
    """The request path of ``model_id`` (an id, an inference profile or an ARN)."""
    return f"/model/{quote(str(model_id), safe='-._~')}/converse-stream"
