"""Checkpoint records: a run's state kept as a small head plus append-only records (decision D14).

Every store (memory, SQLite, DynamoDB) keeps a run the same way:

* the **head**: status, fencing counters, principal, chat id, meta, the number of records
  (``seq``), and optionally an inline **base** state (a state of at most :data:`INLINE_BYTES`);
* **records** ``1..seq``, each either a ``full`` state or a ``delta`` against the state before it.
  A record is written once and never changed; a save appends one record and moves the head in one
  atomic write, conditional on the head's version (so a fenced writer writes neither).

A run's state is the base (or the last ``full`` record) with the later deltas applied. A delta
is a list of operations on the JSON value, computed by :func:`diff` from the state the writer
read and the one it saves:

* ``["s", path, value]`` sets a key of an object (or the root, for an empty path);
* ``["d", path]`` deletes a key of an object;
* ``["t", path, n, items]`` truncates the list at ``path`` to ``n`` items and appends ``items``.

Lists compare element by element, so history that only grows (messages, steps) costs a delta the
size of what was added, not of the history: no write grows with the length of the run. A state
that is not a JSON object or array, or whose delta would not be smaller, is written ``full``.

A writer that knows the JSON value of the state it saves hands it over with the text
(``StoredRun.value``), so the store diffs it without parsing the text. Its unchanged history can
be made of **sealed** parts (:func:`~durable_harness.sealed.seal`: a JSON object or array whose
compact text is known and which nobody changes again): :func:`encode` writes their text as it is,
and :func:`diff` passes over a part that is the same object in both states without looking inside.
A step's checkpoint then costs what the step added, not what the history holds (issue 20).

The state text a store returns is the text as saved when the state is a base or a ``full``
record, and otherwise the compact JSON of the value (``json.dumps(..., separators=(",", ":"),
ensure_ascii=False)``): equal in value to what was saved, and byte for byte the same for compact
JSON such as pydantic's ``model_dump_json()``.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import islice, repeat
from typing import Any, Literal

from ..errors import CorruptCheckpointError
from ..sealed import SealedDict, SealedList, dumps, leading

__all__ = [
    "INLINE_BYTES",
    "Folded",
    "Plan",
    "diff",
    "encode",
    "encode_into",
    "fold",
    "parse",
    "patch",
    "plan_create",
    "plan_save",
    "utf8_bytes",
]

INLINE_BYTES = 512
"""States up to this size (UTF-8 bytes) stay in the head while a run has no records: the approval
ledger's records, a run created from a short prompt. Small enough that a DynamoDB head stays within
one 1 KB write unit."""

Kind = Literal["full", "delta"]


class _Opaque:
    """The value of a state that is not a JSON object or array (kept as text, never diffed)."""

    __slots__ = ()


OPAQUE: Any = _Opaque()


@dataclass(frozen=True)
class Folded:
    """A run's state as a store knows it: its text and its parsed value (``OPAQUE`` if not JSON)."""

    text: str
    value: Any


@dataclass(frozen=True)
class Plan:
    """What one save writes: an inline base, or a record (or neither: only the head moves)."""

    inline: str | None = None
    """The new base to keep in the head (no record)."""
    record: tuple[Kind, str] | None = None
    """``(kind, body)`` of record ``seq + 1``."""
    drop_base: bool = False
    """The head's base is superseded by a ``full`` record: remove it."""


_SEALED = (SealedDict, SealedList)
_TEXT = operator.attrgetter("text")


def encode(value: Any, depth: int = 2) -> tuple[str, Any]:
    """The compact JSON text of ``value`` and a value equal to it that shares only sealed parts.

    The rest is a copy, so a store may keep the value while the caller goes on changing its own.
    Sealed parts are written as their text: objects are looked into down to ``depth`` levels, and an
    array whose last element is sealed (a history) element by element; anything else is serialized
    and parsed back as one piece, in C.
    """
    out: list[str] = []
    copy = encode_into(value, out, depth)
    return "".join(out), copy


def encode_into(value: Any, out: list[str], depth: int = 2) -> Any:
    """:func:`encode`, the text appended to ``out`` in pieces (joined once by the caller)."""
    if isinstance(value, _SEALED):
        out.append(value.text)
        return value
    if type(value) is dict and depth > 0:
        copy = {}
        out.append("{")
        for i, (key, item) in enumerate(value.items()):
            out.append(f",{dumps(key)}:" if i else f"{dumps(key)}:")
            copy[key] = encode_into(item, out, depth - 1)
        out.append("}")
        return copy
    if type(value) is list and value and isinstance(value[-1], _SEALED):
        if all(map(isinstance, value, repeat(_SEALED))):  # all sealed: joined without a Python loop
            out.extend(("[", ",".join(map(_TEXT, value)), "]"))
            return list(value)
        items = []
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            items.append(encode_into(item, out, depth - 1))
        out.append("]")
        return items
    text = dumps(value)
    out.append(text)
    return json.loads(text) if isinstance(value, dict | list) else value


def parse(text: str) -> Any:
    """The JSON value of a state text, or ``OPAQUE`` when it is not a JSON object or array."""
    try:
        value = json.loads(text)
    except ValueError:
        return OPAQUE
    return value if isinstance(value, dict | list) else OPAQUE


def _same(a: Any, b: Any) -> bool:
    # ``==`` is fast but treats 1, 1.0 and true as equal; the serialized texts tell them apart.
    return a is b or (a == b and _same_json(a, b))


def _same_json(a: Any, b: Any) -> bool:
    """For ``a == b``: whether their JSON is the same too. Parts that are the same objects (sealed
    history) are not serialized: lists from their first differing object on, objects key by key."""
    kind = _kind(a)
    if kind is list and _kind(b) is list:
        i = leading(map(operator.is_, a, b))
        return i == len(a) or dumps(a[i:]) == dumps(b[i:])
    if kind is dict and _kind(b) is dict:
        return all(a[key] is value or _same_json(a[key], value) for key, value in b.items())
    return dumps(a) == dumps(b)


def diff(old: Any, new: Any) -> list[Any]:
    """The operations that turn JSON value ``old`` into ``new`` (empty when they are the same)."""
    ops: list[Any] = []
    _diff(old, new, [], ops)
    return ops


def _kind(value: Any) -> type | None:
    """``dict`` or ``list`` for a JSON object or array (sealed or not), else None."""
    kind = type(value)
    return dict if kind is dict or kind is SealedDict else list if kind is list or kind is SealedList else None


def _diff(old: Any, new: Any, path: list[Any], ops: list[Any]) -> None:
    if old is new:
        return
    kind = _kind(old)
    if kind is dict and _kind(new) is dict:
        # Leading entries with the same keys and the same value objects (a map that grew) are skipped.
        same = min(leading(map(operator.eq, old, new)), leading(map(operator.is_, old.values(), new.values())))
        for key in islice(old, same, None):
            if key not in new:
                ops.append(["d", [*path, key]])
        for key, value in islice(new.items(), same, None):
            if key not in old:
                ops.append(["s", [*path, key], value])
            elif not _same(old[key], value):
                _diff(old[key], value, [*path, key], ops)
        return
    if kind is list and _kind(new) is list:
        p = _shared_prefix(old, new)
        if p == len(old) == len(new):
            return
        # The last element changed in place (a message that grew): patch it, then append the rest.
        if p == len(old) - 1 and p < len(new) and _kind(old[p]) is not None and _kind(old[p]) is _kind(new[p]):
            _diff(old[p], new[p], [*path, p], ops)
            p += 1
            if p == len(new):
                return
        ops.append(["t", path, p, new[p:]])
        return
    if not _same(old, new):
        ops.append(["s", path, new])


def _shared_prefix(old: list[Any], new: list[Any]) -> int:
    """How many leading elements ``old`` and ``new`` have the same (as :func:`_same` tells).

    The leading elements that are the same objects (a sealed history) are the same. After them, the
    elements are compared with ``==`` and the prefix found is then checked as one text each way: two
    C-level serializations per list instead of two per element (a history of a thousand messages is
    one list). Only when ``==`` was fooled (1, 1.0, true) is it walked element by element.
    """
    shared = min(len(old), len(new))
    same = leading(map(operator.is_, old, new))
    p = same
    while p < shared and old[p] == new[p]:
        p += 1
    if p == same or dumps(old[same:p]) == dumps(new[same:p]):
        return p
    q = same
    while q < p and _same(old[q], new[q]):
        q += 1
    return q


def patch(value: Any, ops: Iterable[Any]) -> Any:
    """Apply ``ops`` (from :func:`diff`) to ``value`` in place; returns the (possibly new) root."""
    try:
        for op in ops:
            kind, path = op[0], op[1]
            if kind == "s" and not path:
                value = op[2]
                continue
            if kind == "t":
                target = _walk(value, path)
                if type(target) is not list:
                    raise TypeError("not a list")
                del target[op[2] :]
                target.extend(op[3])
                continue
            parent = _walk(value, path[:-1])
            if kind == "s":
                parent[path[-1]] = op[2]
            elif kind == "d":
                del parent[path[-1]]
            else:
                raise ValueError(f"unknown operation {kind!r}")
    except (LookupError, TypeError, ValueError) as exc:
        raise CorruptCheckpointError(f"a checkpoint delta does not apply to its state: {exc}") from exc
    return value


def _walk(value: Any, path: list[Any]) -> Any:
    for key in path:
        value = value[key]
    return value


def fold(base: str | None, records: Iterable[tuple[str, str]]) -> Folded:
    """The state made of the head's ``base`` and its records ``(kind, body)``, in order."""
    last: list[tuple[str, str]] = []
    for kind, body in records:
        if kind == "full":
            last = [(kind, body)]
        elif kind == "delta":
            last.append((kind, body))
        else:
            raise CorruptCheckpointError(f"unknown checkpoint record kind {kind!r}")
    if last and last[0][0] == "full":
        base, last = last[0][1], last[1:]
    if base is None:
        raise CorruptCheckpointError("a checkpoint has deltas but no state they apply to")
    if not last:
        return Folded(base, parse(base))
    value = parse(base)
    if value is OPAQUE:
        raise CorruptCheckpointError("a checkpoint delta follows a state that is not JSON")
    for _, body in last:
        value = patch(value, _ops(body))
    return Folded(dumps(value), value)


def _ops(body: str) -> list[Any]:
    try:
        ops = json.loads(body)
    except ValueError as exc:
        raise CorruptCheckpointError(f"a checkpoint delta is not JSON: {exc}") from exc
    if not isinstance(ops, list):
        raise CorruptCheckpointError("a checkpoint delta is not a list of operations")
    return ops


def utf8_bytes(text: str) -> int:
    """The size of ``text`` in UTF-8 (a lone surrogate counts as its three bytes)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def plan_create(text: str) -> Plan:
    """How a new run's first state is stored: inline when small, else as record 1 (``full``)."""
    if utf8_bytes(text) <= INLINE_BYTES:
        return Plan(inline=text)
    return Plan(record=("full", text))


def plan_save(current: Folded, new_text: str, *, seq: int, base_bytes: int, value: Any = None) -> tuple[Plan, Folded]:
    """What saving ``new_text`` over the ``current`` state writes, and the state it leaves.

    ``seq`` is the head's record count, ``base_bytes`` the size of its inline base (0 for none):
    a ``full`` record supersedes the base, which the head then drops. ``value``: the JSON value of
    ``new_text`` when the writer has it (``StoredRun.value``; never changed afterwards), else None
    and the text is parsed.
    """
    new = Folded(new_text, value if isinstance(value, dict | list) else parse(new_text))
    if seq == 0 and utf8_bytes(new_text) <= INLINE_BYTES:
        return Plan(inline=new_text), new
    if current.value is not OPAQUE and new.value is not OPAQUE:
        ops = diff(current.value, new.value)
        if not ops:
            return Plan(), new
        body = dumps(ops)
        if utf8_bytes(body) < utf8_bytes(new_text):
            return Plan(record=("delta", body)), new
    return Plan(record=("full", new_text), drop_base=base_bytes > 0), new
