"""A decoder of ``application/vnd.amazon.eventstream``, the framing of Bedrock's streaming responses.

Each message (AWS "event stream encoding"):

* a 12-byte prelude: total length (uint32), headers length (uint32), CRC32 of those 8 bytes;
* the headers: each a name (uint8 length + UTF-8), a type byte and a value of that type;
* the payload;
* a CRC32 of everything before it (the running CRC continues from the prelude's).

Messages are read from a stream's ``read(n)`` exactly as far as the next message reaches (the
prelude, then the rest), never further: an HTTP response's ``read(n)`` blocks until ``n`` bytes
came, so reading ahead would hold back a message that has fully arrived. The prelude's CRC is
checked before its lengths are trusted, so a corrupt length never makes the reader wait for (or
allocate) bytes that will not come.

Header values are what botocore's ``EventStreamHeaderParser`` gives: ``bool`` for both boolean
types, ``int`` for byte/short/integer/long and timestamps (milliseconds since the epoch),
``bytes`` for byte arrays and UUIDs (16 raw bytes), ``str`` for strings. Errors carry botocore's
class names and messages (``ChecksumMismatch``, ``DuplicateHeader``, ``InvalidHeadersLength``,
``InvalidPayloadLength``), without importing ``botocore.eventstream``.
"""

from __future__ import annotations

import binascii
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass

__all__ = [
    "ChecksumMismatch",
    "DuplicateHeader",
    "HeaderValue",
    "IncompleteMessage",
    "InvalidHeaderType",
    "InvalidHeadersLength",
    "InvalidPayloadLength",
    "Message",
    "ParserError",
    "decode_headers",
    "read_messages",
]

PRELUDE_LENGTH = 12
MAX_HEADERS_LENGTH = 128 * 1024  # botocore's limits (and the format's)
MAX_PAYLOAD_LENGTH = 24 * 1024 * 1024

HeaderValue = bool | int | bytes | str

_PRELUDE = struct.Struct(">III")
_UINT16 = struct.Struct(">H")
_UINT32 = struct.Struct(">I")
_FIXED: dict[int, struct.Struct] = {
    2: struct.Struct(">b"),  # byte
    3: struct.Struct(">h"),  # short
    4: struct.Struct(">i"),  # integer
    5: struct.Struct(">q"),  # long
    8: struct.Struct(">q"),  # timestamp: milliseconds since the epoch, kept as int (as botocore does)
}


class ParserError(Exception):
    """A malformed event stream (the base of every decoding error here)."""


class ChecksumMismatch(ParserError):
    """A prelude or message CRC32 that does not match its bytes: the stream is corrupt."""

    def __init__(self, expected: int, calculated: int) -> None:
        super().__init__(f"Checksum mismatch: expected 0x{expected:08x}, calculated 0x{calculated:08x}")


class DuplicateHeader(ParserError):
    """A header name that occurs twice in one message."""

    def __init__(self, header: str) -> None:
        super().__init__(f'Duplicate header present: "{header}"')


class InvalidHeadersLength(ParserError):
    """A headers section longer than the format allows."""

    def __init__(self, length: int) -> None:
        super().__init__(f"Header length of {length} exceeded the maximum of {MAX_HEADERS_LENGTH}")


class InvalidPayloadLength(ParserError):
    """A payload longer than the format allows."""

    def __init__(self, length: int) -> None:
        super().__init__(f"Payload length of {length} exceeded the maximum of {MAX_PAYLOAD_LENGTH}")


class InvalidHeaderType(ParserError):
    """A header whose type byte is none of the ten the format defines, or whose value is cut short."""


class IncompleteMessage(ParserError):
    """The stream ended inside a message (the connection was closed mid-frame)."""

    def __init__(self, received: int) -> None:
        super().__init__(f"Event stream ended inside a message, {received} bytes into it")


@dataclass(frozen=True, slots=True)
class Message:
    """One decoded event-stream message: its headers and its raw payload."""

    headers: dict[str, HeaderValue]
    payload: bytes


def read_messages(read: Callable[[int], bytes]) -> Iterator[Message]:
    """The messages of the stream ``read`` reads, each as soon as its last byte arrived.

    ``read(n)`` returns up to ``n`` bytes, ``b""`` at the end. The stream may end only between
    messages; ending inside one raises :class:`IncompleteMessage`.
    """
    while True:
        prelude = _read_exactly(read, PRELUDE_LENGTH, allow_eof=True)
        if not prelude:
            return
        total_length, headers_length, prelude_crc = _PRELUDE.unpack(prelude)
        _check(prelude_crc, binascii.crc32(prelude[:8]))
        if headers_length > MAX_HEADERS_LENGTH:
            raise InvalidHeadersLength(headers_length)
        payload_length = total_length - headers_length - PRELUDE_LENGTH - 4
        if payload_length > MAX_PAYLOAD_LENGTH:
            raise InvalidPayloadLength(payload_length)
        if payload_length < 0:  # lengths that cannot describe a message: never read by them
            raise ParserError(f"Message length of {total_length} is too short for {headers_length} bytes of headers")
        rest = _read_exactly(read, total_length - PRELUDE_LENGTH, allow_eof=False, done=PRELUDE_LENGTH)
        (message_crc,) = _UINT32.unpack_from(rest, len(rest) - 4)
        _check(message_crc, binascii.crc32(rest[:-4], binascii.crc32(prelude)))
        headers = decode_headers(rest[:headers_length])
        yield Message(headers, rest[headers_length:-4])


def decode_headers(data: bytes) -> dict[str, HeaderValue]:
    """The headers of one message's headers section (``data``), by name."""
    headers: dict[str, HeaderValue] = {}
    view = memoryview(data)
    end = len(data)
    at = 0
    try:
        while at < end:
            name_length = data[at]
            name = bytes(view[at + 1 : at + 1 + name_length]).decode("utf-8")
            at += 1 + name_length
            kind = data[at]
            at += 1
            value: HeaderValue
            if kind == 0 or kind == 1:
                value = kind == 0
            elif kind in _FIXED:
                fixed = _FIXED[kind]
                (value,) = fixed.unpack_from(data, at)
                at += fixed.size
            elif kind == 6 or kind == 7:
                (length,) = _UINT16.unpack_from(data, at)
                raw = bytes(view[at + 2 : at + 2 + length])
                if len(raw) != length:
                    raise InvalidHeaderType(f"header {name!r} is cut short")
                value = raw.decode("utf-8") if kind == 7 else raw
                at += 2 + length
            elif kind == 9:
                value = bytes(view[at : at + 16])
                if len(value) != 16:
                    raise InvalidHeaderType(f"header {name!r} is cut short")
                at += 16
            else:
                raise InvalidHeaderType(f"header {name!r} has unknown type {kind}")
            if name in headers:
                raise DuplicateHeader(name)
            headers[name] = value
    except (IndexError, struct.error) as exc:
        raise InvalidHeaderType(f"headers section cut short at byte {at} of {end}") from exc
    return headers


def _check(expected: int, calculated: int) -> None:
    if expected != calculated & 0xFFFFFFFF:
        raise ChecksumMismatch(expected, calculated & 0xFFFFFFFF)


def _read_exactly(read: Callable[[int], bytes], size: int, *, allow_eof: bool, done: int = 0) -> bytes:
    """``size`` bytes of ``read``; ``b""`` when it ends before the first one and ``allow_eof``."""
    pieces: list[bytes] = []
    got = 0
    while got < size:
        piece = read(size - got)
        if not piece:
            if got == 0 and allow_eof:
                return b""
            raise IncompleteMessage(done + got)
        if len(piece) == size:  # the usual case: an HTTP response's read(n) waits for all n bytes
            return piece
        pieces.append(piece)
        got += len(piece)
    return b"".join(pieces)
