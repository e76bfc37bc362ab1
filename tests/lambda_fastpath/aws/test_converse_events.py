"""The lite ConverseStream event parsing against botocore's, on the same messages (no HTTP here).

botocore's own ``EventStream`` (with the ``bedrock-runtime`` model's output shape and its
``EventStreamJSONParser``) and the lite :class:`~lambda_fastpath.aws.bedrock.EventStream` read
the same bytes; the events, and the errors of exception messages, must be equal. The shape table
the lite parser uses is regenerated here from the installed botocore's model: equal to it for the
botocore it was generated from, compatible with a newer one.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator
from typing import Any

import botocore
import botocore.session
import pytest
from botocore.eventstream import EventStream as BotocoreEventStream
from botocore.exceptions import ConnectionClosedError, EventStreamError
from botocore.parsers import EventStreamJSONParser
from lambda_fastpath.aws import _converse_shapes
from lambda_fastpath.aws.bedrock import EventStream, ResponseParserError

from tests.lambda_fastpath.aws.frames import event, exception, frame
from tests.models.test_bedrock import REASONING_STREAM, START, TEXT_STREAM, TOOLS_STREAM

SERVICE_MODEL = botocore.session.get_session().get_service_model("bedrock-runtime")
STREAM_SHAPE = SERVICE_MODEL.operation_model("ConverseStream").output_shape.members["stream"]


def generated_shapes() -> tuple[dict[str, str], frozenset[str], dict[str, str]]:
    """(events, exceptions, shapes) of ConverseStream's output, from botocore's model, in the
    compact form of :mod:`lambda_fastpath.aws._converse_shapes`."""
    shapes: dict[str, str] = {}

    def ref(shape: Any) -> str | None:
        kind = shape.type_name
        if kind == "blob":
            shapes[shape.name] = "blob"
        elif kind == "structure" and not shape.is_document_type:
            if shape.name not in shapes:
                shapes[shape.name] = "pending"  # recursion guard
                words = []
                for name, member in shape.members.items():
                    assert member.serialization.get("name", name) == name  # the table has no wire names
                    target = ref(member)
                    words.append(name if target is None else f"{name}={target}")
                shapes[shape.name] = " ".join(["union" if shape.is_tagged_union else "structure", *words])
        elif kind in ("list", "map"):
            if kind == "map":
                assert shape.key.type_name == "string"
            element = ref(shape.member if kind == "list" else shape.value)
            if element is None:  # a list or map of plain values parses to itself
                return None
            shapes[shape.name] = f"{kind} {element}"
        else:
            assert kind in ("string", "integer", "long", "boolean", "double", "float", "structure"), kind
            return None
        return str(shape.name)

    events: dict[str, str] = {}
    for name, member in STREAM_SHAPE.members.items():
        assert not any(
            m.serialization.get("eventheader") or m.serialization.get("eventpayload") for m in member.members.values()
        )
        events[name] = str(ref(member))
    exceptions = frozenset(name for name, member in STREAM_SHAPE.members.items() if member.metadata.get("exception"))
    return events, exceptions, shapes


def generated_errors() -> tuple[dict[str, str], frozenset[str]]:
    """(errors, retryable errors) of the service, in the form of ``_converse_shapes``."""
    errors: dict[str, str] = {}
    for shape in SERVICE_MODEL.error_shapes:
        words = []
        for name, member in shape.members.items():
            assert member.type_name in ("string", "integer") and not member.serialization, (shape.name, name)
            words.append(name if member.type_name == "string" else f"{name}:{member.type_name}")
        errors[shape.error_code] = " ".join(words)
    return errors, frozenset(s.error_code for s in SERVICE_MODEL.error_shapes if s.metadata.get("retryable"))


def test_the_shape_table_is_botocores_model() -> None:
    events, exceptions, shapes = generated_shapes()
    errors, retryable = generated_errors()
    operation = SERVICE_MODEL.operation_model("ConverseStream")
    assert operation.input_shape.required_members == ["modelId"]
    assert operation.http == {"method": "POST", "requestUri": "/model/{modelId}/converse-stream", "responseCode": 200}
    regenerate = "regenerate lambda_fastpath/aws/_converse_shapes.py from: " + json.dumps(shapes)
    if botocore.__version__ == _converse_shapes.BOTOCORE_VERSION:  # the botocore it was generated from
        assert (events, exceptions) == (_converse_shapes.EVENTS, _converse_shapes.EXCEPTIONS)
        assert shapes == _converse_shapes.SHAPES, regenerate
        assert (errors, retryable) == (_converse_shapes.ERRORS, _converse_shapes.RETRYABLE_ERRORS)
        assert set(operation.input_shape.members) == _converse_shapes.INPUT_MEMBERS
        return
    # A newer botocore (the layer and CI install the newest): the table may lag behind its model (a
    # member added since is dropped by the lite parser, as an older botocore would), but every name it
    # has must still mean the same thing there.
    assert _converse_shapes.EVENTS.items() <= events.items() and exceptions >= _converse_shapes.EXCEPTIONS
    for name, entry in _converse_shapes.SHAPES.items():
        assert name in shapes, regenerate
        kind, *members = entry.split()
        theirs_kind, *theirs = shapes[name].split()
        assert kind == theirs_kind and set(members) <= set(theirs), (name, regenerate)
    for code, fields in _converse_shapes.ERRORS.items():
        assert set(fields.split()) <= set(errors.get(code, "").split()), code
    assert set(operation.input_shape.members) >= _converse_shapes.INPUT_MEMBERS


class Chunks:
    """A raw body for botocore's EventStream (``stream()``) and the lite one (``read(n)``)."""

    def __init__(self, data: bytes, piece: int = 29) -> None:
        self.data, self.piece = data, piece
        self.reader = io.BytesIO(data)
        self.closed = False

    def stream(self) -> Iterator[bytes]:
        for i in range(0, len(self.data), self.piece):
            yield self.data[i : i + self.piece]

    def read(self, amt: int) -> bytes:
        return self.reader.read(min(amt, self.piece))

    def close(self) -> None:
        self.closed = True


def drain(stream: Any) -> tuple[list[dict[str, Any]], Exception | None]:
    events: list[dict[str, Any]] = []
    try:
        for item in stream:
            events.append(item)
    except Exception as exc:  # the error is compared, whatever it is
        return events, exc
    return events, None


def both(
    data: bytes,
) -> tuple[tuple[list[dict[str, Any]], Exception | None], tuple[list[dict[str, Any]], Exception | None]]:
    theirs = drain(BotocoreEventStream(Chunks(data), STREAM_SHAPE, EventStreamJSONParser(), "ConverseStream"))
    ours = drain(EventStream(Chunks(data), "https://bedrock-runtime.us-east-1.amazonaws.com"))
    return theirs, ours


def error_of(exc: Exception | None) -> tuple[str, str, Any] | None:
    if exc is None:
        return None
    return type(exc).__name__, str(exc), getattr(exc, "response", None)


DELTA = "contentBlockDelta"
SYNTHETIC = b"".join(
    [
        START,
        event("futureEvent", {"anything": 1}),  # an event type the model does not know: skipped
        event("messageStart", {"role": "assistant", "unknownMember": {"x": 1}, "p": None}),
        event(DELTA, {"contentBlockIndex": 0, "delta": {"futureDelta": {"x": 1}}}),
        event(
            DELTA,
            {"contentBlockIndex": 0, "delta": {"image": {"source": {"bytes": base64.b64encode(b"\x89PNG").decode()}}}},
        ),
        event(DELTA, {"contentBlockIndex": 1, "delta": {"toolResult": [{"json": {"a": [1, None]}}, {"text": "t"}]}}),
        event(
            DELTA,
            {
                "contentBlockIndex": 2,
                "delta": {
                    "citation": {
                        "title": "Doc",
                        "sourceContent": [{"text": "quoted", "extra": 1}],
                        "location": {"documentChar": {"documentIndex": 0, "start": 3, "end": 9}},
                    }
                },
            },
        ),
        event(
            "contentBlockStart",
            {"contentBlockIndex": 3, "start": {"toolResult": {"toolUseId": "t1", "status": "success"}}},
        ),
        event("messageStop", {"stopReason": "end_turn", "additionalModelResponseFields": {"k": {"nested": [1, 2.5]}}}),
        event(
            "metadata",
            {
                "usage": {
                    "inputTokens": 1,
                    "outputTokens": 2,
                    "totalTokens": 3,
                    "cacheDetails": [{"ttl": "5m", "inputTokens": 1}],
                },
                "metrics": {"latencyMs": 12},
                "trace": {
                    "guardrail": {
                        "modelOutput": ["a"],
                        "inputAssessment": {
                            "g1": {"topicPolicy": {"topics": [{"name": "n", "detected": True, "z": 0}]}}
                        },
                        "outputAssessments": {
                            "g1": [{"wordPolicy": {"customWords": [{"match": "m", "action": "BLOCKED"}]}}]
                        },
                    },
                    "promptRouter": {"invokedModelId": "m"},
                },
                "serviceTier": {"type": "default"},
            },
        ),
        frame({":event-type": "messageStop", ":message-type": "event"}, b"not json"),
        frame({":event-type": "contentBlockStop", ":message-type": "event"}, b""),
    ]
)


@pytest.mark.parametrize("name", ["text", "reasoning", "tools", "synthetic"])
def test_events_are_botocores(name: str) -> None:
    data = {"text": TEXT_STREAM, "reasoning": REASONING_STREAM, "tools": TOOLS_STREAM, "synthetic": SYNTHETIC}[name]
    (theirs, their_error), (ours, our_error) = both(data)
    assert their_error is None and our_error is None
    assert ours == theirs
    assert len(ours) >= 6
    assert all("p" not in next(iter(e.values())) for e in ours)  # Bedrock's padding is dropped


@pytest.mark.parametrize(
    "failure",
    [
        exception("throttlingException", {"message": "Too many tokens, please wait."}),
        exception("modelStreamErrorException", {"message": "boom", "originalStatusCode": 500, "originalMessage": "x"}),
        exception("validationException", {"Message": "capitalised"}),
        exception("internalServerException", {}),
        frame({":exception-type": "serviceUnavailableException", ":message-type": "exception"}, b"<html>"),
        exception("accessDeniedException", {"message": "not in the model"}),
        frame({":message-type": "error", ":error-code": "InternalFailure", ":error-message": "try again"}, b""),
        frame({":message-type": "exception", ":exception-type": "messageStart"}, b'{"role": "user"}'),
    ],
)
def test_exception_messages_raise_botocores_error(failure: bytes) -> None:
    (theirs, their_error), (ours, our_error) = both(TEXT_STREAM[: len(START)] + failure + TEXT_STREAM)
    assert isinstance(their_error, EventStreamError) and isinstance(our_error, EventStreamError)
    assert ours == theirs and len(ours) == 1
    assert error_of(our_error) == error_of(their_error)


def test_a_union_with_two_members_is_rejected_as_botocore_rejects_it() -> None:
    bad = event(DELTA, {"contentBlockIndex": 0, "delta": {"text": "a", "toolUse": {"input": "{}"}}})
    (_, their_error), (_, our_error) = both(bad)
    assert isinstance(our_error, ResponseParserError)
    assert str(our_error) == str(their_error)


def test_a_stream_cut_mid_message_is_a_closed_connection() -> None:
    data = TEXT_STREAM[: len(START) + 20]
    events, error = drain(EventStream(Chunks(data), "https://bedrock-runtime.us-east-1.amazonaws.com"))
    assert len(events) == 1
    assert isinstance(error, ConnectionClosedError)
    assert "https://bedrock-runtime.us-east-1.amazonaws.com" in str(error)


def test_close_closes_the_body_and_iteration_continues_where_it_stopped() -> None:
    body = Chunks(TEXT_STREAM)
    stream = EventStream(body, "https://bedrock-runtime.us-east-1.amazonaws.com")
    first = next(iter(stream))
    rest = list(stream)
    assert "messageStart" in first and "messageStart" not in rest[0] and "metadata" in rest[-1]
    stream.close()
    assert body.closed
