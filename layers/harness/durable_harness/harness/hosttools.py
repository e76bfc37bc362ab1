"""Host tools of an external harness: tools defined in the agent file, run by the runner's side.

A harness program calls one with a ``tool-call`` that is not ``providerExecuted``; the call is
validated against the tool's schema, may need the user's approval (``needs_approval``), and runs
with the tool's timeout. A failure is a result the program can read (``isError``), never a crash.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import AgentConfigError, ToolError
from ..protocol import harness_parts as hp
from ..protocol.ui_chunks import ToolOutputErrorChunk, UIMessageChunk
from ..tools import Tool, ToolContext


@dataclass(frozen=True)
class HostCall:
    """A host tool call, parsed and validated (``error`` says why it cannot run)."""

    tool_call_id: str
    tool_name: str
    input: Any
    error: str | None = None
    needs_approval: bool = False

    def to_json(self) -> dict[str, Any]:
        """The call as recorded in the harness's checkpoint."""
        return {"toolCallId": self.tool_call_id, "toolName": self.tool_name, "input": self.input}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> HostCall:
        """A recorded call (paused for approval, so its input was valid)."""
        return cls(tool_call_id=data["toolCallId"], tool_name=data["toolName"], input=data.get("input"))


class HostTools:
    """The host tools of a harness, by name."""

    def __init__(self, tools: Sequence[Tool]) -> None:
        self.tools = {t.name: t for t in tools}
        if len(self.tools) != len(tools):
            raise AgentConfigError("two host tools have the same name")
        for tool in tools:
            if tool.client_side:
                raise AgentConfigError(f"host tool {tool.name!r} has no execute function")

    @property
    def names(self) -> set[str]:
        """The host tools' names."""
        return set(self.tools)

    async def prepare(self, part: hp.ToolCallPart) -> HostCall:
        """Parse and validate a call; decide whether it waits for approval."""
        tool = self.tools.get(part.tool_name)
        try:
            raw = json.loads(part.input) if part.input.strip() else {}
        except ValueError as exc:
            return HostCall(
                part.tool_call_id, part.tool_name, part.input, f"Invalid input for tool {part.tool_name}: {exc}"
            )
        if tool is None:
            available = ", ".join(sorted(self.tools)) or "none"
            error = f"Tool {part.tool_name} is not a host tool of this harness. Host tools: {available}."
            return HostCall(part.tool_call_id, part.tool_name, raw, error)
        try:
            validated = tool.validate(raw)
        except ToolError as exc:
            return HostCall(part.tool_call_id, part.tool_name, raw, str(exc))
        context = ToolContext(tool_call_id=part.tool_call_id, tool_name=part.tool_name, messages=())
        return HostCall(
            part.tool_call_id, part.tool_name, raw, needs_approval=await tool.approval_needed(validated, context)
        )

    async def run(self, call: HostCall) -> dict[str, Any]:
        """Run the call; its recorded result (``result``, ``isError``, ``shown``)."""
        result: Any
        if call.error is not None:
            result, is_error = call.error, True
        else:
            tool = self.tools[call.tool_name]
            context = ToolContext(tool_call_id=call.tool_call_id, tool_name=call.tool_name, messages=())
            try:
                result, is_error = await tool.run(tool.validate(call.input), context), False
            except ToolError as exc:
                result, is_error = str(exc), True
            except Exception as exc:  # a tool's failure is a result the program can react to
                result, is_error = (f"Error: {exc}" if str(exc) else f"Error: {type(exc).__name__}"), True
        return {**call.to_json(), "result": result, "isError": is_error, "shown": True}

    @staticmethod
    def event_of(result: dict[str, Any]) -> hp.ToolResultPart | UIMessageChunk:
        """What the client is shown of a recorded result."""
        if result.get("isError"):
            text = result["result"] if isinstance(result["result"], str) else json.dumps(result["result"])
            return ToolOutputErrorChunk(tool_call_id=result["toolCallId"], error_text=text)
        return hp.ToolResultPart(
            tool_call_id=result["toolCallId"], tool_name=result["toolName"], result=result["result"]
        )
