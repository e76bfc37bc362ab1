"""The lite event-stream decoder against botocore's own (``botocore.eventstream.EventStreamBuffer``).

The frames come from the test encoder (:mod:`tests.lambda_fastpath.aws.frames`) and from the recorded Bedrock
streams of ``tests/models/test_bedrock.py``; each is decoded by botocore and by the lite decoder,
read in pieces of every awkward size, and the two must agree: headers (every type), payloads, and
for corrupt input the same error class name and message.
"""

from __future__ import annotations

import binascii
import io
import struct
from collections.abc import Callable

import pytest
from botocore import eventstream as botocore_eventstream
from lambda_fastpath.aws import _eventstream as lite
from lambda_fastpath.aws._eventstream import HeaderValue

from tests.lambda_fastpath.aws import frames
from tests.lambda_fastpath.aws.frames import event, exception, frame
from tests.models.test_bedrock import REASONING_STREAM, TEXT_STREAM, TEXT_THEN, TOOLS_STREAM

EVERY_TYPE: list[frames.Header] = [
    ("yes", frames.BOOL_TRUE, None),
    ("no", frames.BOOL_FALSE, None),
    ("byte", frames.BYTE, -7),
    ("short", frames.SHORT, -32768),
    ("int", frames.INTEGER, 2_147_483_647),
    ("long", frames.LONG, -(2**63)),
    ("bytes", frames.BYTE_ARRAY, b"\x00\xff raw"),
    ("empty", frames.BYTE_ARRAY, b""),
    ("text", frames.STRING, "héllo ✓"),
    ("when", frames.TIMESTAMP, 1_735_689_600_123),
    ("id", frames.UUID, bytes(range(16))),
    (":event-type", frames.STRING, "contentBlockDelta"),
]
STREAMS = {
    "every header type": frame(EVERY_TYPE, b'{"x":1}') + frame([], b"") + frame(EVERY_TYPE[:2], b"\x00" * 70_000),
    "text": TEXT_STREAM,
    "reasoning": REASONING_STREAM,
    "tools": TOOLS_STREAM,
    "exception": TEXT_THEN + exception("throttlingException", {"message": "Too many tokens"}),
}


def reader(data: bytes, most: int) -> Callable[[int], bytes]:
    """``read(n)`` over ``data`` that returns at most ``most`` bytes at a time (like a socket)."""
    source = io.BytesIO(data)
    return lambda n: source.read(min(n, most))


def botocore_messages(data: bytes) -> list[tuple[dict[str, HeaderValue], bytes]]:
    buffer = botocore_eventstream.EventStreamBuffer()
    buffer.add_data(data)
    return [(m.headers, m.payload) for m in buffer]


def lite_messages(data: bytes, most: int = 1 << 30) -> list[tuple[dict[str, HeaderValue], bytes]]:
    return [(m.headers, m.payload) for m in lite.read_messages(reader(data, most))]


def test_the_encoder_writes_what_botocore_decodes() -> None:
    [(headers, payload)] = botocore_messages(frame(EVERY_TYPE, b"payload"))
    assert headers == {name: (kind == frames.BOOL_TRUE if value is None else value) for name, kind, value in EVERY_TYPE}
    assert payload == b"payload"


@pytest.mark.parametrize("name", list(STREAMS))
@pytest.mark.parametrize("most", [1, 5, 12, 13, 64, 1 << 30])
def test_decodes_what_botocore_decodes(name: str, most: int) -> None:
    data = STREAMS[name]
    expected = botocore_messages(data)
    assert len(expected) >= 2
    assert lite_messages(data, most) == expected


def test_a_message_is_yielded_without_reading_past_it() -> None:
    # An HTTP response's read(n) blocks until n bytes came: reading ahead would hold back a
    # message whose bytes have all arrived while the model thinks about the next one.
    first = event("messageStart", {"role": "assistant"})
    source = io.BytesIO(first + event("messageStop", {"stopReason": "end_turn"}))
    messages = lite.read_messages(source.read)
    assert next(messages).headers[":event-type"] == "messageStart"
    assert source.tell() == len(first)


def test_an_empty_stream_has_no_messages() -> None:
    assert lite_messages(b"") == []


def botocore_error(data: bytes) -> Exception:
    with pytest.raises(botocore_eventstream.ParserError) as info:
        botocore_messages(data)
    return info.value


def lite_error(data: bytes) -> lite.ParserError:
    with pytest.raises(lite.ParserError) as info:
        lite_messages(data, most=7)
    return info.value


def corrupt(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]


GOOD = event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "Hello"}})


@pytest.mark.parametrize(
    ("case", "data"),
    [
        ("prelude length", corrupt(GOOD, 3)),
        ("prelude crc", corrupt(GOOD, 9)),
        ("header byte", corrupt(GOOD, 20)),
        ("payload byte", corrupt(GOOD, len(GOOD) - 10)),
        ("message crc", corrupt(GOOD, len(GOOD) - 1)),
        ("duplicate header", frame([("a", frames.STRING, "1"), ("a", frames.STRING, "2")], b"")),
    ],
)
def test_corrupt_frames_fail_as_botocore_does(case: str, data: bytes) -> None:
    expected, got = botocore_error(GOOD + data), lite_error(GOOD + data)
    assert (type(got).__name__, str(got)) == (type(expected).__name__, str(expected))


def test_lengths_over_the_limits_fail_before_anything_is_read() -> None:
    def prelude(total: int, headers: int) -> bytes:
        head = struct.pack(">II", total, headers)
        return head + struct.pack(">I", binascii.crc32(head))

    for data in (prelude(200 * 1024, 129 * 1024), prelude(25 * 1024 * 1024, 0)):
        expected, got = botocore_error(data + b"\x00" * 16), lite_error(data)  # nothing after the prelude
        assert (type(got).__name__, str(got)) == (type(expected).__name__, str(expected))
    with pytest.raises(lite.ParserError, match="too short"):
        lite_messages(prelude(20, 10))


def test_a_stream_cut_inside_a_message_is_an_error() -> None:
    data = GOOD + GOOD
    for cut in (len(GOOD) + 5, len(GOOD) + 12, len(data) - 1):
        with pytest.raises(lite.IncompleteMessage, match=f"{cut - len(GOOD)} bytes into it"):
            lite_messages(data[:cut], most=3)


def test_an_undefined_header_type_is_an_error() -> None:
    with pytest.raises(lite.InvalidHeaderType, match="unknown type 10"):
        lite_messages(frame([("odd", 10, None)], b""))
    cut = frames.encode_header("s", frames.STRING, "abc")[:-1]  # a string value one byte short
    with pytest.raises(lite.InvalidHeaderType):
        lite.decode_headers(cut)
