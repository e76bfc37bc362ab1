"""The chunk log's items in DynamoDB: sort keys, and the encoding of one append's chunks.

One append is one item ``pk=<run_id>, sk="c#<start>"`` (``start`` zero-padded to 13 digits, so
that the items of a run sort by index). See :mod:`.chunklog` for the protocol; this module only
knows how an item looks.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import StorageError

__all__ = ["FIRST_KEY", "LAST_KEY", "MAX_INDEX", "Encoded", "LogItem", "decode_chunks", "encode_chunks", "sort_key"]

MAX_INDEX = 10**13
"""Chunk indexes must stay below this (13 digits in the sort key)."""
_WIDTH = 13
_PREFIX = "c#"
FIRST_KEY = _PREFIX + "0" * _WIDTH
LAST_KEY = _PREFIX + "9" * _WIDTH
_COMPRESS_OVER = 900
"""Texts longer than this are stored zlib-compressed when that is smaller: a write is billed per
started KB of the item, and model output compresses 3-6 times (the JSON around each token repeats)."""


def sort_key(start: int) -> str:
    """The sort key of the item holding the append that starts at chunk ``start``."""
    if not 0 <= start < MAX_INDEX:
        raise ValueError(f"chunk index {start} must be in [0, {MAX_INDEX})")
    return f"{_PREFIX}{start:0{_WIDTH}d}"


@dataclass(frozen=True)
class Encoded:
    """One append's chunks as stored: the attribute (``d``: text or zlib bytes) and its size."""

    raw: bytes
    """The chunks, one per line (what a spilled S3 object holds)."""
    attribute: dict[str, Any]
    """The DynamoDB attribute value of ``d``: ``{"S": text}`` or ``{"B": compressed}``."""
    size: int


def encode_chunks(chunks: Sequence[str]) -> Encoded:
    """The stored form of ``chunks`` (at least one; each is compact JSON without a newline)."""
    raw = "".join(chunk + "\n" for chunk in chunks).encode("utf-8")
    if len(raw) > _COMPRESS_OVER:
        packed = zlib.compress(raw, 6)
        if len(packed) < len(raw):
            return Encoded(raw, {"B": packed}, len(packed))
    return Encoded(raw, {"S": raw.decode("utf-8")}, len(raw))


def decode_chunks(raw: bytes, n: int, where: str) -> tuple[str, ...]:
    """The ``n`` chunks of a stored text (``where`` names it in the error if it is damaged)."""
    if not raw.endswith(b"\n"):
        raise StorageError(f"corrupt chunk log data in {where}")
    # Split on "\n" only: str.splitlines would also split on U+2028 inside a JSON string.
    chunks = tuple(raw[:-1].decode("utf-8").split("\n"))
    if len(chunks) != n:
        raise StorageError(f"corrupt chunk log data in {where}: {len(chunks)} chunks, expected {n}")
    return chunks


@dataclass(frozen=True)
class LogItem:
    """One item as read back: where its chunks start, how many, who wrote them, and how to get them."""

    start: int
    n: int
    epoch: int
    write_id: str
    chunks: tuple[str, ...] | None = None
    """The chunks when the item holds them (``None`` for a marker or a spilled append)."""
    s3_key: str | None = None
    """Where a spilled append's chunks are (an S3 object of ``n`` lines)."""
    size: int = 0
    at: float | None = None
    """When the writer sent the item (epoch seconds, its clock): readers learn the flush cadence."""

    @property
    def end(self) -> int:
        """The index after this item's last chunk (its start for a marker)."""
        return self.start + self.n

    @classmethod
    def of(cls, item: dict[str, Any], run_id: str) -> LogItem:
        """Decode a DynamoDB item of the chunk log."""
        key = item["sk"]["S"]
        start, n, epoch = int(key[len(_PREFIX) :]), int(item["n"]["N"]), int(item["e"]["N"])
        write_id = item.get("w", {}).get("S", "")
        at = int(item["t"]["N"]) / 1000 if "t" in item else None
        data = item.get("d")
        if n == 0 or data is None:
            s3_key = item.get("k", {}).get("S")
            if n > 0 and s3_key is None:
                raise StorageError(f"run {run_id!r}: chunk log item {key} holds neither chunks nor a pointer")
            return cls(start, n, epoch, write_id, s3_key=s3_key, at=at)
        raw = zlib.decompress(data["B"]) if "B" in data else data["S"].encode("utf-8")
        chunks = decode_chunks(raw, n, f"run {run_id!r} item {key}")
        return cls(start, n, epoch, write_id, chunks=chunks, size=len(raw), at=at)
