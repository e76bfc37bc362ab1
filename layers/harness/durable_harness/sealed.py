"""Sealed JSON: an object or array whose compact text is known and that is never changed again.

A run's history (the loop's messages, the runner's step marks) is serialized once, sealed, and then
shared by every checkpoint that holds it: :func:`durable_harness.checkpoints.records.encode` writes a
sealed part as its text, and the store's diff passes over a part that is the same object in the
state it holds and the one saved (issue 20). Below the agent, the runner and the stores, which all
use it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

__all__ = ["SealedDict", "SealedList", "dumps", "leading", "seal"]


def dumps(value: Any) -> str:
    """Compact JSON, as pydantic writes it (no spaces, non-ASCII kept)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class SealedDict(dict[str, Any]):
    """A JSON object whose compact text is ``text``; it is never changed once made (see :func:`seal`)."""

    __slots__ = ("text",)
    text: str


class SealedList(list[Any]):
    """A JSON array whose compact text is ``text``; it is never changed once made (see :func:`seal`)."""

    __slots__ = ("text",)
    text: str


def seal(value: dict[str, Any] | list[Any], text: str | None = None) -> SealedDict | SealedList:
    """``value`` (a JSON object or array) sealed with its compact text (``text`` if known).

    The sealed copy is shallow: the caller hands ``value``'s contents over and changes none of them
    again, as every state that holds the part shares it (a store keeps the last one).
    """
    sealed: SealedDict | SealedList = SealedDict(value) if isinstance(value, dict) else SealedList(value)
    sealed.text = dumps(value) if text is None else text
    return sealed


def leading(flags: Iterable[bool]) -> int:
    """How many of ``flags`` are true before the first false one (counted in C, not in a Python loop)."""
    found = list(flags)
    try:
        return found.index(False)
    except ValueError:
        return len(found)
