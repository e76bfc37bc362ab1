"""Model specs resolve to providers; providers' modules are imported only when named.

No provider is called here (no account or network is available); the specs only construct
models, and a recorded stream is not needed.
"""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest
from durable_harness.models.anthropic import AnthropicModel
from durable_harness.models.base import LanguageModel
from durable_harness.models.bedrock import BedrockConverseModel
from durable_harness.models.demo import DemoModel
from durable_harness.models.openai import OpenAIChatModel
from durable_harness.models.registry import resolve_model
from durable_harness.models.scripted import ScriptedModel, text_step


def test_demo() -> None:
    model = resolve_model("demo", delay=0)
    assert isinstance(model, DemoModel) and model.delay == 0 and model.model_id == "demo"


def test_openai_with_options() -> None:
    client = httpx.AsyncClient()
    model = resolve_model("openai:gpt-4o-mini", api_key="sk-x", base_url="http://localhost:1234/v1", client=client)
    assert isinstance(model, OpenAIChatModel) and isinstance(model, LanguageModel)
    assert model.model == "gpt-4o-mini" and model.base_url == "http://localhost:1234/v1"
    assert model.model_id == "openai:gpt-4o-mini"


def test_anthropic() -> None:
    model = resolve_model("anthropic:claude-sonnet-4-5", api_key="k", max_tokens=1000)
    assert isinstance(model, AnthropicModel) and model.max_tokens == 1000
    assert model.model_id == "anthropic:claude-sonnet-4-5"


def test_bedrock_model_ids_keep_their_colons() -> None:
    model = resolve_model("bedrock:us.anthropic.claude-sonnet-4-5-20250929-v1:0", client=object())
    assert isinstance(model, BedrockConverseModel)
    assert model.bedrock_model_id == "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
    assert resolve_model(model.model_id, client=object()).model_id == model.model_id


def test_a_model_object_is_returned_as_is() -> None:
    model = ScriptedModel([text_step("hi")])
    assert resolve_model(model) is model


@pytest.mark.parametrize("spec", ["gpt-4o", "openai:", "mistral:large", "Demo", "", "bedrock:  "])
def test_unknown_specs_list_the_accepted_forms(spec: str) -> None:
    with pytest.raises(ValueError) as info:
        resolve_model(spec)
    message = str(info.value)
    assert repr(spec) in message
    for form in ('"demo"', '"openai:<model>"', '"anthropic:<model>"', '"bedrock:<model-id>"'):
        assert form in message


def test_a_non_model_object_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown model spec"):
        resolve_model(42)  # type: ignore[arg-type]


def test_resolving_the_demo_model_imports_no_provider() -> None:
    code = (
        "import sys\n"
        "from durable_harness.models.registry import resolve_model\n"
        "resolve_model('demo')\n"
        "loaded = [m for m in ('boto3', 'durable_harness.models.bedrock', 'durable_harness.models.openai',"
        " 'durable_harness.models.anthropic') if m in sys.modules]\n"
        "print(','.join(loaded))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""
