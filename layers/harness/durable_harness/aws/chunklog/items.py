"""The chunk log's items in DynamoDB: keys, generations, and the encoding of one append's chunks.

Every key of a run's log starts with ``c#<gen>#``, where the *generation* names one incarnation of
the run id (see :mod:`.log`): ``<creation time, epoch ms, 13 digits>.<incarnation>``, or 13 zeros
for a log written without a run record. A later incarnation's keys sort after an earlier one's, so
the top of a run's log keys is the current incarnation's: appends at ``c#<gen>#<start, 13 digits>``,
then the segment index ``c#<gen>#~`` (the log's head, carrying ``format``: :data:`LOG_FORMAT`). This
module only knows how items look (the attributes are :mod:`..table`'s); the protocol is :mod:`.log`'s.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...errors import StorageError
from .._errors import check_format
from ..table import EXPIRES_AT, FORMAT, LOG_PREFIX, SK, Append, Index, item_key

LOG_FORMAT = 1
"""The version of this layout, in every segment index's ``format``: a later release that changes
the layout raises it, and reads (or migrates) a log by what it finds there."""
MAX_INDEX = 10**13
"""Chunk indexes must stay below this (13 digits in the sort key)."""
_WIDTH = 13
_INDEX = "~"  # sorts after every digit: the index is the last key of its generation
NO_TIME = "0" * _WIDTH
_COMPRESS_OVER = 900
"""Texts longer than this are stored zlib-compressed when that is smaller: a write is billed per
started KB of the item, and model output compresses 3-6 times (the JSON around each token repeats)."""


def generation(created: float | None, inc: str | None) -> str:
    """The generation of an incarnation created at ``created`` (epoch seconds; ``None``: unknown)."""
    stamp = NO_TIME if created is None else f"{int(created * 1000):0{_WIDTH}d}"
    return stamp if inc is None else f"{stamp}.{inc}"


def gen_inc(gen: str) -> str | None:
    """The incarnation token a generation names (``None``: a log of no known incarnation)."""
    _, dot, inc = gen.partition(".")
    return inc if dot else None


def chunk_key(gen: str, start: int) -> str:
    """The sort key of the item holding the append that starts at chunk ``start``."""
    if not 0 <= start < MAX_INDEX:
        raise ValueError(f"chunk index {start} must be in [0, {MAX_INDEX})")
    return f"{LOG_PREFIX}{gen}#{start:0{_WIDTH}d}"


def index_key(gen: str) -> str:
    """The sort key of a generation's segment index."""
    return f"{LOG_PREFIX}{gen}#{_INDEX}"


def fresh_log_item(run_id: str, gen: str, expires_at: int | None) -> dict[str, Any]:
    """The index item of an empty log of generation ``gen``, written with the run record that makes
    the incarnation (in one transaction): the new incarnation's log is empty from that moment."""
    item: dict[str, Any] = {
        **item_key(run_id, index_key(gen)), Index.SEALED: {"N": "0"}, FORMAT: {"N": str(LOG_FORMAT)}
    }  # fmt: skip
    if expires_at is not None:
        item[EXPIRES_AT] = {"N": str(expires_at)}
    return item


def append_item(
    run_id: str, gen: str, start: int, epoch: int, write_id: str, *, n: int = 0, data: dict[str, Any] | None = None,
    sent_ms: int, expires_at: int | None,
) -> dict[str, Any]:  # fmt: skip
    """The item of an append of ``n`` chunks at ``start`` (``data``: its ``d`` or ``k`` attribute),
    or of a marker (``n`` 0, no data)."""
    item: dict[str, Any] = {
        **item_key(run_id, chunk_key(gen, start)), Append.N: {"N": str(n)}, Append.EPOCH: {"N": str(epoch)},
        Append.WRITE_ID: {"S": write_id}, **(data or {}),
        # The key of the append after this one: the state machine's failure path without Lambda
        # (EndWithoutLambda) appends error and finish there, and ASL cannot format 13 digits.
        Append.NEXT: {"S": chunk_key(gen, start + n)},
        Append.SENT: {"N": str(sent_ms)},  # lets followers learn the flush cadence
    }  # fmt: skip
    if expires_at is not None:
        item[EXPIRES_AT] = {"N": str(expires_at)}
    return item


@dataclass(frozen=True)
class Encoded:
    """One append's chunks as stored: the attribute (``d``: text or zlib bytes) and its size."""

    raw: bytes
    """The chunks, one per line (what a spilled S3 object or a sealed segment holds)."""
    attribute: dict[str, Any]
    """The DynamoDB attribute value of ``d``: ``{"S": text}`` or ``{"B": compressed}``."""
    size: int


def encode_chunks(chunks: Sequence[str]) -> Encoded:
    """The stored form of ``chunks`` (at least one; each is compact JSON without a newline)."""
    raw = "".join(chunk + "\n" for chunk in chunks).encode("utf-8")
    attribute, size = packed_text(raw)
    return Encoded(raw, attribute, size)


def packed_text(raw: bytes) -> tuple[dict[str, Any], int]:
    """UTF-8 text as a DynamoDB attribute value, ``{"S": text}`` or ``{"B": zlib bytes}`` when it is
    over ``_COMPRESS_OVER`` and that is smaller (chunk data, checkpoint record bodies), and its size."""
    if len(raw) > _COMPRESS_OVER:
        packed = zlib.compress(raw, 6)
        if len(packed) < len(raw):
            return {"B": packed}, len(packed)
    return {"S": raw.decode("utf-8")}, len(raw)


def unpacked_text(attribute: dict[str, Any]) -> bytes:
    """The UTF-8 text a :func:`packed_text` attribute value holds."""
    return zlib.decompress(attribute["B"]) if "B" in attribute else attribute["S"].encode("utf-8")


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
    """One append as read back: where its chunks start, how many, who wrote them, and how to get them."""

    gen: str
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


@dataclass(frozen=True)
class IndexItem:
    """A generation's segment index: the sealed S3 segments, contiguous from chunk 0."""

    gen: str
    sealed: int = 0
    ends: tuple[int, ...] = ()

    def segments(self) -> list[tuple[int, int]]:
        """``(start, end)`` of every sealed segment, in order."""
        starts = (0, *self.ends[:-1])
        return list(zip(starts, self.ends, strict=True))


def decode_item(item: dict[str, Any], run_id: str) -> LogItem | IndexItem:
    """Decode a DynamoDB item of the chunk log (an append, a marker or a segment index)."""
    key = item[SK]["S"]
    gen, _, tail = key[len(LOG_PREFIX) :].rpartition("#")
    if tail == _INDEX:
        check_format(item, LOG_FORMAT, f"the chunk log of run {run_id!r}")
        ends = tuple(int(e["N"]) for e in item.get(Index.ENDS, {}).get("L", ()))
        return IndexItem(gen, int(item.get(Index.SEALED, {}).get("N", "0")), ends)
    start, n, epoch = int(tail), int(item[Append.N]["N"]), int(item[Append.EPOCH]["N"])
    write_id = item.get(Append.WRITE_ID, {}).get("S", "")
    at = int(item[Append.SENT]["N"]) / 1000 if Append.SENT in item else None
    data = item.get(Append.DATA)
    if n == 0 or data is None:
        s3_key = item.get(Append.SPILL_KEY, {}).get("S")
        if n > 0 and s3_key is None:
            raise StorageError(f"run {run_id!r}: chunk log item {key} holds neither chunks nor a pointer")
        return LogItem(gen, start, n, epoch, write_id, s3_key=s3_key, at=at)
    raw = unpacked_text(data)
    chunks = decode_chunks(raw, n, f"run {run_id!r} item {key}")
    return LogItem(gen, start, n, epoch, write_id, chunks=chunks, size=len(raw), at=at)
