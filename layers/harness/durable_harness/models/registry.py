"""Model specs: ``"demo"``, ``"openai:<model>"``, ``"anthropic:<model>"``, ``"bedrock:<model-id>"``.

:func:`resolve_model` turns a spec into a :class:`LanguageModel`; a provider's module is imported
only when a spec names it, so an agent on the demo model never imports ``boto3``.
"""

from __future__ import annotations

from typing import Any

from .base import LanguageModel

ACCEPTED_FORMS = (
    '"demo"',
    '"openai:<model>" (e.g. "openai:gpt-4o-mini"; OPENAI_API_KEY or OPENAI_API_KEY_SECRET_ARN, OPENAI_BASE_URL)',
    '"anthropic:<model>" (e.g. "anthropic:claude-sonnet-4-5"; ANTHROPIC_API_KEY or ANTHROPIC_API_KEY_SECRET_ARN)',
    '"bedrock:<model-id>" (e.g. "bedrock:us.anthropic.claude-sonnet-4-5-20250929-v1:0"; AWS credentials and region)',
)


def resolve_model(spec: str | LanguageModel, **options: Any) -> LanguageModel:
    """The model a spec names; a :class:`LanguageModel` is returned as is.

    ``options`` go to the provider's constructor (``api_key=``, ``base_url=``, ``client=``, ...).
    Raises :class:`ValueError` for a spec of no accepted form, and :class:`ImportError` when the
    provider's library is not installed.
    """
    if not isinstance(spec, str):
        if isinstance(spec, LanguageModel):
            return spec
        raise ValueError(_message(repr(spec)))
    if spec == "demo":
        from .demo import DemoModel

        return DemoModel(**options)
    provider, sep, name = spec.partition(":")
    if not sep or not name.strip():
        raise ValueError(_message(repr(spec)))
    if provider == "openai":
        from .openai import OpenAIChatModel

        return OpenAIChatModel(name, **options)
    if provider == "anthropic":
        from .anthropic import AnthropicModel

        return AnthropicModel(name, **options)
    if provider == "bedrock":
        try:
            from .bedrock import BedrockConverseModel
        except ImportError as exc:  # boto3 is an install-time dependency, but may be trimmed away
            raise ImportError(f"the bedrock provider needs boto3 (pip install boto3): {exc}") from exc
        return BedrockConverseModel(name, **options)
    raise ValueError(_message(repr(spec)))


def _message(got: str) -> str:
    return f"unknown model spec {got}; use one of: " + ", ".join(ACCEPTED_FORMS)
