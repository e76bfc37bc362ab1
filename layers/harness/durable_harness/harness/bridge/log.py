"""The numbered lines of one boot of the program, appended to a file on the bridge's disk.

Each record is one line of the file: the attach frame of that program line, ready to send
(``{"frame":"line","seq":N,"line":<the program's JSON>}``, or ``"invalid"`` with the reason for a
line that is not UTF-8 JSON). Only the byte offsets of the records stay in memory (8 bytes a line),
so a long session does not grow the bridge, and a reattach from any cursor reads the file.

**fsync policy: none.** Records are written to the file (the OS page cache) as they are read from
the program, one ``write`` per batch, and are read back from it at once; they are not fsynced. The
log only has to outlive the bridge's *clients* (a slice that ends, a server that restarts), which it
does. A crash of the machine ends the bridge and the program with it: that is a new boot, whose
log starts empty, and the runner resumes from its checkpoint (the boot id rule), so an fsync
would protect nothing that could still be read.
"""

from __future__ import annotations

import json
import os
from array import array
from pathlib import Path

MAX_LINE_BYTES = 8 * 1024 * 1024
"""The longest program line kept (a longer one is recorded as invalid): under AgentCore's 10 MB
limit on a streamed chunk, with room for the frame."""

READ_BATCH_BYTES = 1024 * 1024
"""At most this much is read from the log per batch, so a reattach from 0 streams as it reads."""


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def encode_record(seq: int, raw: bytes) -> bytes:
    """The frame of one program line (``raw`` without its line break)."""
    head = b'{"frame":"line","seq":%d,' % seq
    if len(raw) > MAX_LINE_BYTES:
        return head + b'"invalid":"the line is longer than %d bytes"}' % MAX_LINE_BYTES
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return head + b'"invalid":"it is not UTF-8"}'
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:
        reason = f"it is not JSON ({getattr(exc, 'msg', str(exc))})"
        return head + b'"invalid":' + json.dumps(reason).encode() + b"}"
    body = raw.strip()
    if b"\r" in body:  # a CR (JSON whitespace) would end an SSE line: re-encode
        body = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
    # Valid JSON text embeds as it is: no re-encoding of what the program wrote.
    return head + b'"line":' + body + b"}"


class LineLog:
    """Append-only numbered records of one boot (``seq`` 0, 1, 2, ...), in one file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
        self._offsets = array("Q", [0])  # record i spans offsets[i] .. offsets[i + 1]

    @property
    def count(self) -> int:
        """How many lines the log holds (the next line's seq)."""
        return len(self._offsets) - 1

    def append(self, lines: list[bytes]) -> None:
        """Number and write program lines (without their line breaks), in one write."""
        records: list[bytes] = []
        first, offset = self.count, self._offsets[-1]
        for i, raw in enumerate(lines):
            record = encode_record(first + i, raw) + b"\n"
            records.append(record)
            offset += len(record)
            self._offsets.append(offset)
        data = b"".join(records)
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    def read(self, start: int) -> tuple[list[bytes], int]:
        """The records from seq ``start`` on (at most :data:`READ_BATCH_BYTES`, at least one), and
        the seq after the last one returned."""
        if start >= self.count:
            return [], start
        stop = start + 1
        begin = self._offsets[start]
        while stop < self.count and self._offsets[stop + 1] - begin <= READ_BATCH_BYTES:
            stop += 1
        data = os.pread(self._fd, self._offsets[stop] - begin, begin)
        return data.split(b"\n")[:-1], stop

    def close(self, *, remove: bool = False) -> None:
        """Close the file (and delete it: a boot's log is of no use once another boot started)."""
        os.close(self._fd)
        if remove:
            self.path.unlink(missing_ok=True)


__all__ = ["MAX_LINE_BYTES", "LineLog", "encode_record"]
