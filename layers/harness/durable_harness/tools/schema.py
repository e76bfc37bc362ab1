"""Validation of tool input against an explicit JSON schema (the common keywords).

Tools usually take a pydantic model; a tool given a plain JSON schema is checked here for the
keywords models actually produce mistakes against: ``type``, ``properties``, ``required``,
``additionalProperties: false``, ``enum``, ``const``, ``items``, string and number bounds, and
``anyOf`` / ``oneOf``. Unknown keywords are ignored (accepted), never guessed at.

Before it is checked, the input gets the schema's defaults (:func:`with_defaults`), as seed 000's
``ValidateSerializableToolInput`` does: the defaulted value is what the tool receives, as a
pydantic tool receives its model's defaults.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from pydantic import BaseModel

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


def _is_type(value: Any, name: str) -> bool:
    if name in ("integer", "number") and isinstance(value, bool):
        return False
    if name == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _TYPES.get(name, (object,)))


def schema_errors(value: Any, schema: dict[str, Any], path: str = "input") -> list[str]:
    """Every way ``value`` breaks ``schema``, as ``"path: problem"`` strings (empty when valid)."""
    errors: list[str] = []
    kind = schema.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        if not any(_is_type(value, k) for k in kinds):
            return [f"{path}: expected {' or '.join(kinds)}, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: must be one of {schema['enum']}")
    if "const" in schema and value != schema["const"]:
        errors.append(f"{path}: must be {schema['const']!r}")
    for key in ("anyOf", "oneOf"):
        if key in schema and all(schema_errors(value, option, path) for option in schema[key]):
            errors.append(f"{path}: matches none of the allowed shapes")
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        errors += [f"{path}.{name}: required" for name in schema.get("required", []) if name not in value]
        for name, item in value.items():
            if name in properties:
                errors += schema_errors(item, properties[name], f"{path}.{name}")
            elif schema.get("additionalProperties") is False:
                errors.append(f"{path}.{name}: not allowed")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            errors += schema_errors(item, schema["items"], f"{path}[{i}]")
    elif isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            errors.append(f"{path}: shorter than {schema['minLength']} characters")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(f"{path}: longer than {schema['maxLength']} characters")
    elif isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{path}: less than {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{path}: greater than {schema['maximum']}")
    return errors


def with_defaults(value: Any, schema: dict[str, Any]) -> Any:
    """``value`` with the schema's ``default`` of every property it lacks, at every depth.

    An object gets each missing property that declares a ``default`` (a copy of it; a property
    present, even as ``null``, is kept), so a required property with a default is no longer missing
    and one without stays missing for :func:`schema_errors` to report. Present and defaulted
    properties get their own defaults in turn, and so does each item of an array under ``items``.
    ``value`` itself is not changed (the model's call keeps its own input). As in ``ajv``'s
    ``useDefaults``, the branches of ``anyOf`` / ``oneOf`` add nothing: which one applies is not
    known before validation.
    """
    if isinstance(value, dict):
        properties = schema.get("properties")
        if not isinstance(properties, dict):
            return dict(value)
        out = dict(value)
        for name, sub in properties.items():
            if name not in out and isinstance(sub, dict) and "default" in sub:
                out[name] = copy.deepcopy(sub["default"])
        for name, item in out.items():
            sub = properties.get(name)
            if isinstance(sub, dict):
                out[name] = with_defaults(item, sub)
        return out
    items = schema.get("items")
    if isinstance(value, list) and isinstance(items, dict):
        return [with_defaults(item, items) for item in value]
    return value


def to_json_value(value: Any) -> Any:
    """A JSON-compatible copy of a tool's output (pydantic models dumped, tuples as lists)."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return json.loads(json.dumps(value, default=_default))


def _default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    raise TypeError(f"tool output of type {type(value).__name__} is not JSON-serializable")
