"""The base of every JSON wire model: camelCase on the wire, optional fields omitted, never null.

The AI SDK rejects ``null`` for optional fields, yet requires some ``unknown`` fields (``input``,
``output``, ``data``, ``error``) to be present even when their value is ``null``. A field that is
optional here has the default ``None`` and is dropped from the JSON when it is ``None``; a
required field is always written, ``None`` included.
"""

import json
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, model_serializer
from pydantic.alias_generators import to_camel
from pydantic_core.core_schema import SerializerFunctionWrapHandler

JSONValue = Any
"""Any JSON value (the AI SDK's ``JSONValue`` / ``unknown``)."""

ProviderMetadata = dict[str, dict[str, Any]]
"""``Record<string, Record<string, JSONValue>>``: outer key is the provider (or harness) id."""


RARE = ConfigDict(defer_build=True)
"""The ``model_config`` of a chunk or part type that a turn which goes well never sends (errors,
approvals, sources, files, data, ...): its validator and serializer are built when it is first
used, not when the module is imported, which every cold start of every function would pay for.
The types of every turn (text, reasoning, tool calls, steps) are built at import, where a Lambda
function's init phase has more CPU than its first request."""


class WireModel(BaseModel):
    """A pydantic model with the AI SDK's JSON conventions."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        frozen=False,
        ser_json_inf_nan="constants",
    )

    _omit_if_none: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        cls._omit_if_none = frozenset(
            (field.alias or name)
            for name, field in cls.model_fields.items()
            if not field.is_required() and field.default is None
        )

    @model_serializer(mode="wrap")
    def _drop_absent_optionals(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        omit = type(self)._omit_if_none
        if omit:
            for key in [k for k, v in data.items() if v is None and k in omit]:
                del data[key]
        return data

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of this model (camelCase keys, absent optionals omitted)."""
        return self.model_dump(mode="json", by_alias=True)

    def to_json(self) -> str:
        """Compact JSON, byte-identical to JavaScript's ``JSON.stringify`` for the same object."""
        return json.dumps(self.to_dict(), separators=(",", ":"), ensure_ascii=False)


def compact_json(value: Any) -> str:
    """``JSON.stringify``-compatible compact JSON of a plain value."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
