"""Where the OpenAI and Anthropic providers take their API keys (provider_utils.ApiKey).

The key lives in a Secrets Manager secret (moto) named by ``<PROVIDER>_API_KEY_SECRET_ARN``, as the
template deploys it, and is read through Powertools when a call is made. The providers send their
real requests to the recorded streams of test_openai.py / test_anthropic.py (httpx.MockTransport).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import boto3
import httpx
import pytest
from aws_lambda_powertools.utilities.parameters import SecretsProvider
from aws_lambda_powertools.utilities.parameters.constants import DEFAULT_PROVIDERS
from botocore.config import Config
from durable_harness.errors import ModelError
from durable_harness.models.anthropic import AnthropicModel
from durable_harness.models.openai import OpenAIChatModel
from durable_harness.models.provider_utils import ApiKey
from moto import mock_aws

from tests.aws.conftest import Fault
from tests.models import test_anthropic, test_openai

KEY = "sk-from-secrets-manager-0123456789SECRET"
PROVIDERS = {
    # provider: (model class, env var, header, header value of KEY, recorded module)
    "openai": (OpenAIChatModel, "OPENAI_API_KEY", "authorization", f"Bearer {KEY}", test_openai),
    "anthropic": (AnthropicModel, "ANTHROPIC_API_KEY", "x-api-key", KEY, test_anthropic),
}


@pytest.fixture
def secrets(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Secrets Manager in moto; Powertools reads it through this client, with an empty cache."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    with mock_aws():
        client = boto3.client(
            "secretsmanager", region_name="us-east-1", config=Config(retries={"total_max_attempts": 1})
        )
        monkeypatch.setitem(DEFAULT_PROVIDERS, "secrets", SecretsProvider(boto3_client=client))
        yield client


def model_and_requests(provider: str) -> tuple[Any, list[httpx.Request]]:
    """A provider model on the default base URL (a key is required) replaying its recorded text stream."""
    cls, _, _, _, recorded = PROVIDERS[provider]
    handler, seen = recorded.recorded(recorded.TEXT_STREAM)
    model = cls("some-model", client=httpx.AsyncClient(transport=httpx.MockTransport(handler)))
    return model, seen


async def stream(model: Any) -> list[Any]:
    return [part async for part in model.stream(test_openai.hello())]


async def stream_error(model: Any) -> ModelError:
    with pytest.raises(ModelError) as raised:
        await stream(model)
    return raised.value


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_the_key_is_read_from_the_secret_when_the_call_is_made(
    provider: str, secrets: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _, env_var, header, value, _ = PROVIDERS[provider]
    model, seen = model_and_requests(provider)  # made before the deployment's variables are set
    arn = secrets.create_secret(Name=f"{provider}-key", SecretString=KEY + "\n")["ARN"]  # pasted with a newline
    monkeypatch.setenv(f"{env_var}_SECRET_ARN", arn)
    monkeypatch.setenv(env_var, "sk-plain-variable-loses")  # the secret, as deployed, comes first
    caplog.set_level(logging.DEBUG, logger="durable_harness")  # (botocore's own DEBUG dumps wire bodies)
    parts = await stream(model)
    assert parts[-1].type == "finish"
    assert seen[0].headers[header] == value
    assert KEY not in repr(model) + repr(model._api_key) + caplog.text


def test_a_rotated_key_is_picked_up_once_the_cached_one_expires(secrets: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    arn = secrets.create_secret(Name="rotating", SecretString="sk-first")["ARN"]
    monkeypatch.setenv("OPENAI_API_KEY_SECRET_ARN", arn)
    uncached = ApiKey("OpenAI", "OPENAI_API_KEY", parameter="OpenAIApiKeySecretArn", max_age=0)
    assert uncached.get() == "sk-first"
    secrets.put_secret_value(SecretId=arn, SecretString="sk-second")
    assert uncached.get() == "sk-second"  # its cache entry had expired: read again
    cached = ApiKey("OpenAI", "OPENAI_API_KEY", parameter="OpenAIApiKeySecretArn")  # max_age 300 s
    assert cached.get() == "sk-second"
    secrets.put_secret_value(SecretId=arn, SecretString="sk-third")
    assert cached.get() == "sk-second"  # within max_age: not read again


def test_a_key_given_to_the_model_wins(secrets: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY_SECRET_ARN", "arn:aws:secretsmanager:us-east-1:123456789012:secret:x-AbCdEf")
    assert ApiKey("OpenAI", "OPENAI_API_KEY", "sk-given", parameter="OpenAIApiKeySecretArn").get() == "sk-given"


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_secret_that_cannot_be_read_fails_the_call_before_any_request(
    provider: str, secrets: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, env_var, _, _, _ = PROVIDERS[provider]
    model, seen = model_and_requests(provider)
    missing = "arn:aws:secretsmanager:us-east-1:123456789012:secret:deleted-key-AbCdEf"
    monkeypatch.setenv(f"{env_var}_SECRET_ARN", missing)
    error = await stream_error(model)
    assert not error.retryable and seen == []
    assert f"{env_var}_SECRET_ARN" in str(error) and "ResourceNotFoundException" in str(error)
    assert "ApiKeySecretArn" in str(error)  # names the template parameter to fix
    assert missing not in str(error)  # the message reaches the chat client: no account id in it

    arn = secrets.create_secret(Name=f"{provider}-throttled", SecretString=KEY)["ARN"]
    monkeypatch.setenv(f"{env_var}_SECRET_ARN", arn)
    Fault(
        secrets,
        "GetSecretValue",
        400,
        b'{"__type":"ThrottlingException","message":"slow"}',
        "application/x-amz-json-1.1",
    )
    error = await stream_error(model)
    assert error.retryable and "ThrottlingException" in str(error) and seen == []


@pytest.mark.parametrize(
    ("value", "says"),
    [("   \n", "is empty"), ('{"OPENAI_API_KEY": "' + KEY + '"}', "holds JSON")],
)
async def test_a_secret_holding_no_plain_key_is_a_clear_error_that_never_quotes_it(
    value: str, says: str, secrets: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    arn = secrets.create_secret(Name="badly-stored", SecretString=value)["ARN"]
    monkeypatch.setenv("OPENAI_API_KEY_SECRET_ARN", arn)
    model, seen = model_and_requests("openai")
    error = await stream_error(model)
    assert says in str(error) and not error.retryable and seen == []
    assert KEY not in str(error) + caplog.text


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_without_any_key_the_error_says_every_way_to_give_one(provider: str, secrets: Any) -> None:
    _, env_var, _, _, _ = PROVIDERS[provider]
    model, seen = model_and_requests(provider)
    error = await stream_error(model)
    assert env_var in str(error) and f"{env_var}_SECRET_ARN" in str(error) and "api_key=" in str(error)
    assert seen == []


async def test_a_local_server_needs_no_key(secrets: Any) -> None:
    handler, seen = test_openai.recorded(test_openai.TEXT_STREAM)
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    await stream(OpenAIChatModel("llama3.2", base_url="http://127.0.0.1:11434/v1", client=client))
    assert "authorization" not in seen[0].headers
