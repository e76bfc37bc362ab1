"""Output kinds, like the AI SDK's ``Output``: text, object, array and choice.

An agent's ``output`` decides what the model is asked for (``response_format``, a JSON schema sent
with every model call) and how the last step's text becomes the run's result::

    Agent(..., output=Output.object(Answer))            # a pydantic model; the same as output=Answer
    Agent(..., output=Output.array(Item))                # a list of Item (sent as {"elements": [...]})
    Agent(..., output=Output.choice(["yes", "no"]))      # one of the options (sent as {"result": ...})
    Agent(..., output=Output.text())                     # the final text itself

The wire shapes (``elements``, ``result``) are the AI SDK's, so a prompt or a provider setting
that works with ``Output.array`` / ``Output.choice`` there works here. An answer that does not
parse raises :class:`~durable_harness.errors.OutputError` (the run fails with a clear message). Only
a last step that called no tools is parsed (seed 003): a turn that ends on a tool step (a stop
condition, the token budget, a client-side tool, an approval) has no output, and does not fail.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from .errors import AgentConfigError, OutputError

_DRAFT_07 = "http://json-schema.org/draft-07/schema#"


class Output:
    """An output specification; build one with :meth:`text`, :meth:`object`, :meth:`array`, :meth:`choice`."""

    name: str = "text"

    def response_format(self) -> dict[str, Any] | None:
        """The JSON schema the model is asked to answer with (None: plain text)."""
        return None

    def parse(self, text: str) -> Any:
        """The run's output (JSON-ready) from the final step's text; :class:`OutputError` if it does not fit."""
        return text

    @staticmethod
    def text() -> Output:
        """The final text, as it is."""
        return Output()

    @staticmethod
    def object(model: type[BaseModel]) -> Output:
        """A JSON object validated by a pydantic model (the output is its JSON dump)."""
        return ObjectOutput(model)

    @staticmethod
    def array(element: Any) -> Output:
        """A list whose items each validate as ``element`` (a pydantic model or any type pydantic knows)."""
        return ArrayOutput(element)

    @staticmethod
    def choice(options: Sequence[str]) -> Output:
        """One of ``options``."""
        return ChoiceOutput(options)


def as_output(value: Output | type[BaseModel] | None) -> Output | None:
    """The agent's ``output`` option as an :class:`Output` (a pydantic model means :meth:`Output.object`)."""
    if value is None or isinstance(value, Output):
        return value
    if isinstance(value, type) and issubclass(value, BaseModel):
        return ObjectOutput(value)
    raise AgentConfigError(f"output must be an Output (Output.object(...), ...) or a pydantic model, not {value!r}")


def _load(text: str, what: str) -> Any:
    try:
        return json.loads(text.strip())
    except ValueError as exc:
        raise OutputError(f"The model's final answer is not valid {what} output: it is not JSON ({exc}).") from exc


def _problems(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in err['loc']) or 'value'}: {err['msg']}" for err in exc.errors())


class ObjectOutput(Output):
    """:meth:`Output.object`."""

    name = "object"

    def __init__(self, model: type[BaseModel]) -> None:
        self.model = model

    def response_format(self) -> dict[str, Any]:
        """The model's JSON schema."""
        return self.model.model_json_schema()

    def parse(self, text: str) -> Any:
        """The validated object, as JSON."""
        try:
            return self.model.model_validate_json(text.strip()).model_dump(mode="json")
        except ValidationError as exc:
            raise OutputError(f"The model's final answer is not valid {self.model.__name__} output: {exc}") from exc


class ArrayOutput(Output):
    """:meth:`Output.array`: the model answers ``{"elements": [...]}``; the output is the list."""

    name = "array"

    def __init__(self, element: Any) -> None:
        self.element = element
        self.adapter: TypeAdapter[Any] = TypeAdapter(element)
        self.label = getattr(element, "__name__", str(element))

    def response_format(self) -> dict[str, Any]:
        """``{"elements": {"type": "array", "items": <element schema>}}``, definitions hoisted."""
        items = dict(self.adapter.json_schema())
        defs = items.pop("$defs", None)
        items.pop("$schema", None)
        schema: dict[str, Any] = {"$schema": _DRAFT_07}
        if defs is not None:
            schema["$defs"] = defs
        schema.update(
            type="object",
            properties={"elements": {"type": "array", "items": items}},
            required=["elements"],
            additionalProperties=False,
        )
        return schema

    def parse(self, text: str) -> Any:
        """The validated elements, as JSON."""
        value = _load(text, f"array-of-{self.label}")
        if not isinstance(value, dict) or not isinstance(value.get("elements"), list):
            raise OutputError(
                f"The model's final answer is not valid array-of-{self.label} output: "
                'it must be an object with an "elements" array.'
            )
        out = []
        for i, element in enumerate(value["elements"]):
            try:
                out.append(self.adapter.dump_python(self.adapter.validate_python(element), mode="json"))
            except ValidationError as exc:
                raise OutputError(
                    f"The model's final answer is not valid array-of-{self.label} output: "
                    f"elements[{i}]: {_problems(exc)}"
                ) from exc
        return out


class ChoiceOutput(Output):
    """:meth:`Output.choice`: the model answers ``{"result": "<option>"}``; the output is the option."""

    name = "choice"

    def __init__(self, options: Sequence[str]) -> None:
        if isinstance(options, str) or not options or not all(isinstance(o, str) for o in options):
            raise AgentConfigError("Output.choice needs a non-empty list of strings")
        self.options = list(options)

    def response_format(self) -> dict[str, Any]:
        """``{"result": {"type": "string", "enum": options}}``."""
        return {
            "$schema": _DRAFT_07,
            "type": "object",
            "properties": {"result": {"type": "string", "enum": list(self.options)}},
            "required": ["result"],
            "additionalProperties": False,
        }

    def parse(self, text: str) -> Any:
        """The chosen option."""
        value = _load(text, "choice")
        result = value.get("result") if isinstance(value, dict) else None
        if not isinstance(result, str) or result not in self.options:
            raise OutputError(
                f'The model\'s final answer is not a valid choice: expected {{"result": one of {self.options}}}.'
            )
        return result
