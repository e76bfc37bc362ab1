"""Language models behind one streaming interface (:class:`~.base.LanguageModel`).

``resolve_model("demo" | "bedrock:<id>" | "openai:<model>" | "anthropic:<model>")`` picks one;
provider modules are imported only when named.
"""

from .base import LanguageModel, ModelRequest, ToolDefinition
from .registry import resolve_model

__all__ = ["LanguageModel", "ModelRequest", "ToolDefinition", "resolve_model"]
