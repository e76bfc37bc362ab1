"""A slice's checkpoints as JSON, at the cost of what changed since the last one (issue 20).

A run's state holds its history several times over: the harness's turn (the built-in loop's
messages and step summaries), the runner's step marks and chunk times, and the stream translator's
tool calls. Serializing all of it at every step, and having the store parse and compare it, made a
step cost more the longer the run. :class:`StateEncoder` keeps, for one slice, the JSON of every
history item it has seen, as sealed parts (:func:`~durable_harness.sealed.seal`): an item
is serialized once, and a checkpoint's text and value (``StoredRun.value``) are assembled from
them, the store diffing the value by identity. The text is the one ``model_dump_json`` writes, up to
how numbers are spelled; the value is equal to it.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from itertools import islice
from typing import Any

from pydantic import BaseModel

from ..checkpoints.records import encode_into
from ..ports import StoredRun
from ..protocol.translate import ToolCallInfo, TranslatorState
from ..sealed import SealedDict, SealedList, dumps, leading, seal
from .state import RunState, checkpoint_of

__all__ = ["StateEncoder"]


class _Sealed:
    """The sealed JSON of a list the runner only appends to during a slice (``RunState.steps``,
    ``chunk_times``, ``slice_times``), item by item: each is serialized once."""

    def __init__(self, convert: Callable[[Any], Any]) -> None:
        self.convert = convert
        self.source: Sequence[Any] | None = None
        self.last: Any = None
        self.sealed: list[SealedDict | SealedList] = []
        self.texts: list[str] = []

    def encode_into(self, items: Sequence[Any], out: list[str]) -> list[Any]:
        """Append the JSON array of ``items`` to ``out``; its value."""
        kept = len(self.sealed)
        # Appended to since the last time (the same list, its last item where it was): the new items
        # only. Anything else (a list replaced) starts again.
        if items is not self.source or len(items) < kept or (kept and items[kept - 1] is not self.last):
            kept = 0
            del self.sealed[:], self.texts[:]
        for item in items[kept:]:
            sealed = seal(self.convert(item))
            self.sealed.append(sealed)
            self.texts.append(sealed.text)
        self.source, self.last = items, items[-1] if items else None
        out.extend(("[", ",".join(self.texts), "]"))
        return list(self.sealed)


class StateEncoder:
    """Encodes the checkpoints of one slice's :class:`RunState`, reusing the JSON of its history."""

    def __init__(self) -> None:
        """An encoder with nothing seen yet."""
        self._steps = _Sealed(_model_json)
        self._chunk_times = _Sealed(list)
        self._slice_times = _Sealed(list)
        self._tool_calls = _Entries()

    def checkpoint(self, state: RunState, previous: StoredRun | None = None) -> StoredRun:
        """:func:`~durable_harness.runner.state.checkpoint_of` ``state``, with its JSON value."""
        text, value = self.encode(state)
        return checkpoint_of(state, previous, text=text, value=value)

    def encode(self, state: RunState) -> tuple[str, dict[str, Any]]:
        """The JSON text of ``state`` and its value (sharing only sealed parts with anything else)."""
        out: list[str] = []
        stream = state.stream
        history: dict[str, Callable[[], Any]] = {
            "turn": lambda: encode_into(state.turn, out),
            "steps": lambda: self._steps.encode_into(state.steps, out),
            "chunk_times": lambda: self._chunk_times.encode_into(state.chunk_times, out),
            "slice_times": lambda: self._slice_times.encode_into(state.slice_times, out),
            "stream": lambda: _model(stream, out, {"translator": lambda: self._translator(stream.translator, out)}),
        }
        value = _model(state, out, history)
        return "".join(out), value

    def _translator(self, translator: TranslatorState, out: list[str]) -> dict[str, Any]:
        return _model(translator, out, {"tool_calls": lambda: self._calls(translator.tool_calls, out)})

    def _calls(self, calls: dict[str, ToolCallInfo], out: list[str]) -> dict[str, Any]:
        """The translator's tool calls (a call's info is replaced, never changed, as the stream goes)."""
        known = self._tool_calls
        same_keys = leading(map(operator.eq, known.keys, calls))
        kept = min(same_keys, leading(map(operator.is_, known.items, calls.values())))
        known.truncate(kept)
        for call_id, info in islice(calls.items(), kept, None):
            known.add(call_id, info, seal(_model_json(info)), f"{dumps(call_id)}:")
        out.extend(("{", ",".join(known.texts), "}"))
        return dict(zip(known.keys, known.sealed, strict=True))


class _Entries:
    """The sealed JSON of a map's entries, in order, by value object."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.items: list[Any] = []
        self.sealed: list[SealedDict | SealedList] = []
        self.texts: list[str] = []

    def truncate(self, n: int) -> None:
        """Forget every entry from the ``n``-th on."""
        del self.keys[n:], self.items[n:], self.sealed[n:], self.texts[n:]

    def add(self, key: str, item: Any, sealed: SealedDict | SealedList, prefix: str) -> None:
        """Note entry ``key`` (``item``, sealed), whose text is ``prefix`` and the sealed text."""
        self.keys.append(key)
        self.items.append(item)
        self.sealed.append(sealed)
        self.texts.append(prefix + sealed.text)


def _model_json(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(mode="json", by_alias=True)


def _model(model: BaseModel, out: list[str], special: dict[str, Callable[[], Any]]) -> dict[str, Any]:
    """Append the JSON of ``model`` (no aliases) to ``out``, its ``special`` fields by their own; its value."""
    rest = model.model_dump(mode="json", exclude=set(special))
    value = {}
    out.append("{")
    for i, name in enumerate(type(model).model_fields):
        out.append(f',"{name}":' if i else f'"{name}":')
        if name in special:
            value[name] = special[name]()
        else:
            value[name] = rest[name]
            out.append(dumps(rest[name]))
    out.append("}")
    return value
