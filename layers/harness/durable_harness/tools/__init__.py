"""Tools, for the built-in agent and for the host tools of any other harness.

- :mod:`.definition`: :class:`Tool`, its :class:`ToolContext` and the :func:`tool` decorator;
- :mod:`.durable`: a tool's durable steps and waits (the journal a replayed call reads);
- :mod:`.schema`: input validation against an explicit JSON schema, and a tool's JSON output;
- :mod:`.pool`: the thread pool that runs synchronous tools.

They sit below both the agent (:mod:`durable_harness.agent`) and the harness adapters
(:mod:`durable_harness.harness`), which both run them.
"""

from .definition import Tool, ToolContext, tool

__all__ = ["Tool", "ToolContext", "tool"]
