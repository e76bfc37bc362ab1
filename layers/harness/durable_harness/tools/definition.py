"""Tools: input schema from a pydantic model or an explicit JSON schema; sync or async execute.

>>> class Weather(BaseModel):
...     city: str
>>> @tool
... def get_weather(input: Weather) -> dict:
...     '''Current weather for a city.'''
...     return {"city": input.city, "tempC": 21}

A tool without ``execute`` is a client-side tool: the turn ends when the model calls it, and its
output arrives with the next turn's messages. ``needs_approval`` (a bool, or a function of the
input and the :class:`ToolContext`, sync or async) pauses the turn for the user's signed approval.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, get_type_hints, overload

from pydantic import BaseModel, ValidationError

from ..errors import AgentConfigError, ToolError
from ..messages import ModelMessage
from ..models.base import ToolDefinition
from .durable import DurableCall
from .pool import run_in_tool_thread
from .schema import schema_errors, to_json_value, with_defaults

ToolFunction = Callable[..., Any] | Callable[..., Awaitable[Any]]
NeedsApproval = bool | Callable[[Any, "ToolContext"], "bool | Awaitable[bool]"]
"""``needs_approval``: a bool, or a function (sync or async) of the validated input and the context."""


@dataclass(frozen=True)
class ToolContext:
    """What a tool (and a ``needs_approval`` function) may know about the call it serves.

    In a durable run a tool also gets the durable primitives (decision D16;
    :mod:`durable_harness.tools.durable`, which states the replay rule): :meth:`step`,
    :meth:`wait_for_event`, :meth:`sleep` and :meth:`event_url`. An async tool awaits them; a
    sync tool (it runs on the tool pool, off the event loop) calls them without ``await``: there
    they block its thread and return the value itself.
    """

    tool_call_id: str
    tool_name: str
    messages: Sequence[ModelMessage]
    runtime_context: Any = None
    tool_context: Any = None
    durable: DurableCall | None = field(default=None, repr=False, compare=False)
    """The call's journal (None where the primitives cannot work: in ``needs_approval``)."""

    def _journal(self, what: str) -> DurableCall:
        if self.durable is None:
            raise ToolError(f"ctx.{what} is only available while the tool executes.")
        return self.durable

    def step(self, name: str, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` (sync or async) once and record its JSON result; when the tool runs again
        (after a wait, a slice end or a crash) the recorded result is returned instead.

        Awaitable on the event loop (an async tool); in a sync tool the result itself."""
        durable = self._journal("step")
        return durable.step_sync(name, fn) if durable.in_thread() else durable.step(name, fn)

    def wait_for_event(self, name: str, timeout_seconds: float | None = None) -> Any:
        """The JSON payload of the run's event ``name``: at once if it arrived, else the run parks
        (status ``awaiting_event``, nothing running) until it does; raises
        :class:`~durable_harness.waits.WaitTimeout` once ``timeout_seconds`` passed without it.

        Awaitable on the event loop (an async tool); in a sync tool the payload itself."""
        durable = self._journal("wait_for_event")
        if durable.in_thread():
            return durable.wait_for_event_sync(name, timeout_seconds)
        return durable.wait_for_event(name, timeout_seconds)

    def sleep(self, seconds: float) -> Any:
        """A durable timer: the run parks (zero compute) for ``seconds``, across days if need be.

        Awaitable on the event loop (an async tool); in a sync tool it returns when over (None)."""
        durable = self._journal("sleep")
        return durable.sleep_sync(seconds) if durable.in_thread() else durable.sleep(seconds)

    def event_url(self, name: str, timeout_seconds: float | None = None) -> str:
        """A URL accepting the event ``name`` as a POST of JSON, authorised by a signed token bound
        to this run, this call and the name; it expires with the wait (``timeout_seconds``)."""
        return self._journal("event_url").event_url(name, timeout_seconds)


@dataclass
class Tool:
    """A tool the model may call.

    ``input_model`` (pydantic) validates the input and gives the JSON schema the model sees;
    otherwise ``input_schema`` is sent as is, its defaults are filled in and the input is checked for
    its common keywords. ``execute`` takes the validated input (and, if it accepts a second
    argument, the :class:`ToolContext`); sync functions run on the tool thread pool (:mod:`.pool`,
    ``TOOL_THREADS``). ``timeout`` bounds one execution, in seconds.
    ``context_model`` validates this tool's entry of the agent's ``tools_context``.
    ``retries``: how often a failing ``ctx.step`` is tried again before its error is final (and
    recorded: a replay raises it without running the step again).
    """

    name: str
    execute: ToolFunction | None = None
    description: str = ""
    input_model: type[BaseModel] | None = None
    input_schema: dict[str, Any] = field(default_factory=dict)
    needs_approval: NeedsApproval = False
    timeout: float | None = None
    context_model: type[BaseModel] | None = None
    retries: int = 0

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "a").replace("-", "a").isalnum():
            raise AgentConfigError(f"tool name {self.name!r} must be letters, digits, '_' or '-'")
        if self.input_model is not None and not self.input_schema:
            self.input_schema = self.input_model.model_json_schema()
        if not self.input_schema:
            self.input_schema = {"type": "object", "properties": {}}
        self._takes_context = self.execute is not None and _positional_count(self.execute) >= 2

    @property
    def client_side(self) -> bool:
        """True for a tool the client executes (no ``execute`` here)."""
        return self.execute is None

    def definition(self) -> ToolDefinition:
        """What the model is told about this tool."""
        return ToolDefinition(name=self.name, description=self.description, input_schema=self.input_schema)

    def validate(self, raw_input: Any) -> Any:
        """The tool's input, parsed and validated; raises :class:`ToolError` saying what is wrong."""
        if self.input_model is None:
            value = with_defaults(raw_input, self.input_schema)  # seed 000: the tool gets the defaulted value
            mismatches = schema_errors(value, self.input_schema)
            if mismatches:
                raise ToolError(f"Invalid input for tool {self.name}: {'; '.join(mismatches)}")
            return value
        try:
            return self.input_model.model_validate(raw_input)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'input'}: {err['msg']}" for err in exc.errors()
            )
            raise ToolError(f"Invalid input for tool {self.name}: {problems}") from exc

    async def approval_needed(self, validated_input: Any, context: ToolContext) -> bool:
        """Whether this call must wait for the user's approval (an async ``needs_approval`` is awaited)."""
        if callable(self.needs_approval):
            decision = self.needs_approval(validated_input, context)
            if inspect.isawaitable(decision):
                decision = await decision
            return bool(decision)
        return self.needs_approval

    async def run(self, validated_input: Any, context: ToolContext) -> Any:
        """Execute the tool (within its timeout) and return its JSON-ready output."""
        if self.execute is None:
            raise ToolError(f"tool {self.name} is executed by the client")
        args = (validated_input, context) if self._takes_context else (validated_input,)
        if inspect.iscoroutinefunction(self.execute):
            work: Awaitable[Any] = self.execute(*args)
        else:
            work = run_in_tool_thread(self.execute, *args)  # the tool pool: never the storage threads
        try:
            result = await asyncio.wait_for(work, self.timeout) if self.timeout else await work
        except TimeoutError:
            raise ToolError(f"Tool {self.name} timed out after {self.timeout:g} s") from None
        if inspect.isawaitable(result):
            result = await result
        return to_json_value(result)


def _positional_count(function: Callable[..., Any]) -> int:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return 1
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(1 for p in parameters if p.kind in kinds)


def accepts_positional(function: Callable[..., Any], count: int) -> bool:
    """True when ``function`` can be called with ``count`` positional arguments (``*args`` included)."""
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return False
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters):
        return True
    return _positional_count(function) >= count


@overload
def tool(function: ToolFunction, /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    needs_approval: NeedsApproval = False,
    timeout: float | None = None,
    retries: int = 0,
) -> Callable[[ToolFunction], Tool]: ...


def tool(
    function: ToolFunction | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    needs_approval: NeedsApproval = False,
    timeout: float | None = None,
    retries: int = 0,
) -> Tool | Callable[[ToolFunction], Tool]:
    """Make a :class:`Tool` of a function whose first argument is annotated with a pydantic model.

    The name comes from the function, the description from its docstring. A second argument, if
    any, receives the :class:`ToolContext`. Usable as ``@tool`` or ``@tool(needs_approval=True)``.
    """

    def build(fn: ToolFunction) -> Tool:
        hints = get_type_hints(fn)
        params = [p for p in inspect.signature(fn).parameters.values() if p.name != "self"]
        model = hints.get(params[0].name) if params else None
        if model is not None and not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise AgentConfigError(f"tool {fn.__name__}: its first argument must be annotated with a pydantic model")
        return Tool(
            name=name or fn.__name__,
            execute=fn if params else (lambda _input, _fn=fn: _fn()),
            description=description if description is not None else inspect.cleandoc(fn.__doc__ or ""),
            input_model=model,
            needs_approval=needs_approval,
            timeout=timeout,
            retries=retries,
        )

    return build(function) if function is not None else build
