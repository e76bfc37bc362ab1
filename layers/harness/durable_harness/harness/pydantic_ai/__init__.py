"""``PydanticAIHarness``: a Pydantic AI ``Agent`` run durably (``pip install 'durable-harness[pydantic-ai]'``).

One model request plus its tool calls is a step. The model's response streams as it is produced
(text, reasoning and tool-call input, token by token; :mod:`.parts`). The agent's message history
is the checkpoint (:mod:`.steps`): at the end of every step (a slice point), once the step's model
response is complete, and after every tool result. A step redone after a crash (``replay_step``)
shows again what the client had seen of it and runs only the tools that had no recorded result.
Tools declared with ``requires_approval=True`` are Pydantic AI's deferred tools: their calls
become signed approval requests and the turn pauses; the verified answers come back as
``DeferredToolResults`` (a missing or invalid answer is a denial). A tool that raises
``CallDeferred`` parks the run until its event (or timeout) comes (:mod:`.deferred`). Structured output
(``output_type``) becomes the run's result. Earlier turns reach the agent with their tool calls
and results (:mod:`.history`).

The agent's own tools run inside the harness (they are ``providerExecuted`` for the client).
"""

from __future__ import annotations

from .adapter import PydanticAIHarness

__all__ = ["PydanticAIHarness"]
