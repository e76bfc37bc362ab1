"""Loop control and call options: stop conditions, timeouts, retry delays, hook signatures."""

import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import computed_field

from ..messages import ModelMessage
from ..wire import WireModel
from .state import StepSummary

StopCondition = Callable[[Sequence[StepSummary]], bool]
"""Called after every step with the steps so far; True ends the turn."""


def step_count_is(count: int) -> StopCondition:
    """Stop once ``count`` steps have run."""

    def condition(steps: Sequence[StepSummary]) -> bool:
        return len(steps) >= count

    condition.__name__ = f"step_count_is({count})"
    return condition


def has_tool_call(*names: str) -> StopCondition:
    """Stop after a step in which the model called one of these tools."""

    def condition(steps: Sequence[StepSummary]) -> bool:
        return bool(steps) and any(name in steps[-1].tool_calls for name in names)

    condition.__name__ = f"has_tool_call({', '.join(names)})"
    return condition


@dataclass(frozen=True)
class Timeouts:
    """Time limits in seconds (None = none): the whole run, one model call, its first chunk,
    and the gap between two chunks."""

    total: float | None = None
    step: float | None = None
    first_chunk: float | None = None
    chunk: float | None = None


def retry_delay(
    attempt: int, retry_after: float | None, *, initial: float = 2.0, factor: float = 2.0, cap: float = 60.0
) -> float:
    """Seconds to wait before retry number ``attempt`` (0-based), like the AI SDK.

    Exponential (2 s, 4 s, 8 s, ... at most ``cap``), unless the provider asked for a delay
    (``retry-after-ms`` / ``Retry-After``) shorter than a minute, which is then honoured.
    """
    if retry_after is not None and 0 <= retry_after < 60 and math.isfinite(retry_after):
        return retry_after
    return min(cap, initial * factor**attempt)


class TokenUsage(WireModel):
    """Token usage (of a step, or of the whole run); JSON ``{inputTokens, outputTokens, totalTokens}``."""

    input_tokens: int = 0
    output_tokens: int = 0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total_tokens(self) -> int:
        """Input and output tokens together."""
        return self.input_tokens + self.output_tokens


@dataclass
class CallOptions:
    """What ``prepare_call`` (once per run) and ``prepare_step`` (before each model call) may change.

    ``model`` is a model spec string (``"bedrock:..."``, ``"openai:..."``, ``"demo"``) so that
    the choice survives a checkpoint. ``prepare_step`` may also replace the ``messages`` sent
    for that one call. A ``runtime_context`` returned by either replaces the one tools see, from
    then on (it is checkpointed, so it must be JSON-serializable). ``call_options`` is the run's
    validated call options (an instance of the agent's ``call_options`` model, or None); it is
    read-only here.
    """

    step_number: int
    messages: list[ModelMessage]
    instructions: str | None
    model: str | None = None
    tool_choice: Any = "auto"
    active_tools: list[str] | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    steps: Sequence[StepSummary] = ()
    runtime_context: Any = None
    call_options: Any = None


PrepareHook = Callable[[CallOptions], "Awaitable[CallOptions | None] | CallOptions | None"]
Callback = Callable[..., "Awaitable[None] | None"]
RepairToolCall = Callable[..., "Any | Awaitable[Any]"]
"""``repair(tool_call_id, tool_name, input_text, error, tools)`` returns ``(tool_name, input_text)``
to retry validation with, or None to give up."""
