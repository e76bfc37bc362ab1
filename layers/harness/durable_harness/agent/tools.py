"""Server-executed tools whose input schema comes from a pydantic model.

>>> class Weather(BaseModel):
...     city: str
>>> @tool
... def get_weather(input: Weather) -> dict:
...     '''Current weather for a city.'''
...     return {"city": input.city, "tempC": 21}
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, get_type_hints

from pydantic import BaseModel, ValidationError

from ..errors import AgentConfigError, ToolError
from ..models.base import ToolDefinition

ToolFunction = Callable[[Any], Any] | Callable[[Any], Awaitable[Any]]


@dataclass
class Tool:
    """A tool the model may call.

    ``input_model`` (a pydantic model) validates the input and gives the JSON schema the model
    sees; without one, ``input_schema`` is sent as is and the input is passed through as parsed
    JSON. ``execute`` may be sync (run in a worker thread) or async; its return value must be
    JSON-serializable (a pydantic model is dumped to JSON).
    """

    name: str
    execute: ToolFunction
    description: str = ""
    input_model: type[BaseModel] | None = None
    input_schema: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "a").replace("-", "a").isalnum():
            raise AgentConfigError(f"tool name {self.name!r} must be letters, digits, '_' or '-'")
        if self.input_model is not None and not self.input_schema:
            self.input_schema = self.input_model.model_json_schema()
        if not self.input_schema:
            self.input_schema = {"type": "object", "properties": {}}

    def definition(self) -> ToolDefinition:
        """What the model is told about this tool."""
        return ToolDefinition(name=self.name, description=self.description, input_schema=self.input_schema)

    def validate(self, raw_input: Any) -> Any:
        """The tool's input, parsed and validated; raises :class:`ToolError` saying what is wrong."""
        if self.input_model is None:
            return raw_input
        try:
            return self.input_model.model_validate(raw_input)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'input'}: {err['msg']}" for err in exc.errors()
            )
            raise ToolError(f"Invalid input for tool {self.name}: {problems}") from exc

    async def run(self, validated_input: Any) -> Any:
        """Execute the tool and return its JSON-ready output."""
        if inspect.iscoroutinefunction(self.execute):
            result = await self.execute(validated_input)
        else:
            result = await asyncio.to_thread(self.execute, validated_input)
            if inspect.isawaitable(result):
                result = await result
        return to_json_value(result)


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


def tool(function: ToolFunction | None = None, *, name: str | None = None, description: str | None = None) -> Any:
    """Make a :class:`Tool` of a function taking one pydantic-model argument.

    The input model comes from the argument's annotation, the name from the function, the
    description from its docstring. Usable as ``@tool`` or ``@tool(name=..., description=...)``.
    """

    def build(fn: ToolFunction) -> Tool:
        hints = get_type_hints(fn)
        params = [p for p in inspect.signature(fn).parameters.values() if p.name != "self"]
        model = hints.get(params[0].name) if params else None
        if model is not None and not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise AgentConfigError(f"tool {fn.__name__}: its argument must be annotated with a pydantic model")
        return Tool(
            name=name or fn.__name__,
            execute=fn if params else (lambda _input, _fn=fn: _fn()),
            description=description if description is not None else inspect.cleandoc(fn.__doc__ or ""),
            input_model=model,
        )

    return build(function) if function is not None else build
