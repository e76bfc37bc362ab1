"""An encoder of ``application/vnd.amazon.eventstream`` messages, for tests.

botocore ships an event-stream decoder but no encoder, so this writes the documented layout
(prelude with both lengths and its CRC32, typed headers, payload, message CRC32); the tests check
its output decodes with botocore's own ``EventStreamBuffer``. Headers are ``(name, type, value)``
triples of any of the ten types, or plain ``name: str`` pairs (type 7, string), as Bedrock sends.
"""

from __future__ import annotations

import binascii
import json
import struct
from typing import Any

BOOL_TRUE, BOOL_FALSE, BYTE, SHORT, INTEGER, LONG, BYTE_ARRAY, STRING, TIMESTAMP, UUID = range(10)
_FIXED = {BYTE: ">b", SHORT: ">h", INTEGER: ">i", LONG: ">q", TIMESTAMP: ">q"}

Header = tuple[str, int, Any]


def encode_header(name: str, kind: int, value: Any) -> bytes:
    """One header: name length, name, type byte, value."""
    raw = name.encode()
    head = bytes([len(raw)]) + raw + bytes([kind])
    if kind in (BOOL_TRUE, BOOL_FALSE):
        return head
    if kind in _FIXED:
        return head + struct.pack(_FIXED[kind], value)
    if kind in (BYTE_ARRAY, STRING):
        data = value.encode() if kind == STRING else bytes(value)
        return head + struct.pack(">H", len(data)) + data
    if kind == UUID:
        assert len(value) == 16
        return head + bytes(value)
    return head  # an undefined type byte, for decoders' error paths


def frame(headers: dict[str, str] | list[Header], payload: bytes) -> bytes:
    """One event-stream message: prelude (total length, headers length, CRC), headers, payload, CRC."""
    triples = [(n, STRING, v) for n, v in headers.items()] if isinstance(headers, dict) else headers
    encoded = b"".join(encode_header(*triple) for triple in triples)
    prelude = struct.pack(">II", 12 + len(encoded) + len(payload) + 4, len(encoded))
    prelude += struct.pack(">I", binascii.crc32(prelude))
    message = prelude + encoded + payload
    return message + struct.pack(">I", binascii.crc32(message))


def event(name: str, body: dict[str, Any]) -> bytes:
    """A Bedrock event message (JSON payload)."""
    headers = {":event-type": name, ":content-type": "application/json", ":message-type": "event"}
    return frame(headers, json.dumps(body, separators=(",", ":")).encode())


def exception(name: str, body: dict[str, Any]) -> bytes:
    """A Bedrock exception message (JSON payload)."""
    headers = {":exception-type": name, ":content-type": "application/json", ":message-type": "exception"}
    return frame(headers, json.dumps(body, separators=(",", ":")).encode())
