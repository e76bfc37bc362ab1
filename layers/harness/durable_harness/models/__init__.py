"""Language models behind one streaming interface (:class:`~.base.LanguageModel`).

``resolve_model("demo" | "bedrock:<id>" | "openai:<model>" | "anthropic:<model>")`` picks one;
provider modules are imported only when named.

For tests of your own tools, offline and without credentials: :class:`ScriptedModel` plays back one
scripted step per model call (:func:`tool_calls_step` calls the tools you name with the input you
give, :func:`text_step` answers), and :class:`FunctionModel` asks a function of the request what to
stream (see "Test your tools without a model" in docs/agents.md).
"""

from .base import LanguageModel, ModelRequest, ToolDefinition
from .registry import resolve_model
from .scripted import FunctionModel, ScriptedModel, text_step, tool_calls_step

__all__ = [
    "FunctionModel",
    "LanguageModel",
    "ModelRequest",
    "ScriptedModel",
    "ToolDefinition",
    "resolve_model",
    "text_step",
    "tool_calls_step",
]
