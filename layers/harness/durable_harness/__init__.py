"""durable_harness: a durable AI-agent harness for AWS serverless.

Agent turns run as time-sliced executions, checkpointed and streamed through a chunk log, and
served to the Vercel AI SDK client (``useChat`` + ``WorkflowChatTransport``) unchanged.

Define an agent with :class:`Agent` (the tool-loop agent) and :func:`tool`.
"""

from .agent.control import CallOptions, Timeouts, has_tool_call, step_count_is
from .agent.loop import DEFAULT_MAX_STEPS, ToolLoopAgent
from .agent.results import TurnResult
from .approvals import ApprovalSecret
from .output import Output
from .tools import Tool, ToolContext, tool
from .waits import WaitTimeout

Agent = ToolLoopAgent
"""The agent class (an alias of :class:`ToolLoopAgent`)."""

__version__ = "0.1.0"
"""The library's version (the package metadata's, which pyproject.toml reads from here; also in the layer)."""

__all__ = [
    "DEFAULT_MAX_STEPS",
    "Agent",
    "ApprovalSecret",
    "CallOptions",
    "Output",
    "Timeouts",
    "Tool",
    "ToolContext",
    "ToolLoopAgent",
    "TurnResult",
    "WaitTimeout",
    "has_tool_call",
    "step_count_is",
    "tool",
]
