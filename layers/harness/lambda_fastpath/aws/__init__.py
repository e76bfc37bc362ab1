"""``lambda_fastpath.aws``: the functions' own small AWS clients, without botocore's machinery.

botocore's import and client creation are most of a function's cold start that the harness can
cut (``bench/cold_start.py``); these clients speak exactly the operations the harness's adapters
call, with boto3's method names, arguments, response shapes and botocore's exception classes, so
an adapter takes one or a botocore client unchanged. They import ``http.client`` and
``botocore.exceptions`` only; credentials come from the environment (as Lambda sets them).

:func:`client` returns one, or None when a lite client cannot serve the request (no credentials
in the environment, a service without a lite client, a partition other than ``aws`` / ``aws-cn``):
the caller then makes a botocore client.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from importlib import import_module
from typing import Any

from ._client import LiteClient
from ._transport import credentials_from_env, endpoint_url

__all__ = ["LiteClient", "client"]

# boto3's service name -> (module, class, AWS_ENDPOINT_URL_<name>, endpoint prefix, signing name).
# The module is imported when its first client is made. A service not listed has no lite client.
_SERVICES: dict[str, tuple[str, str, str, str, str]] = {
    "dynamodb": (".dynamodb", "DynamoDBClient", "DYNAMODB", "dynamodb", "dynamodb"),
    "stepfunctions": (".jsonrpc", "StepFunctionsClient", "SFN", "states", "states"),
    "events": (".jsonrpc", "EventBridgeClient", "EVENTBRIDGE", "events", "events"),
    "secretsmanager": (".jsonrpc", "SecretsManagerClient", "SECRETS_MANAGER", "secretsmanager", "secretsmanager"),
    "s3": (".s3", "S3Client", "S3", "s3", "s3"),
    "bedrock-runtime": (".bedrock", "BedrockRuntimeClient", "BEDROCK_RUNTIME", "bedrock-runtime", "bedrock"),
    "bedrock-agentcore": (
        ".agentcore",
        "AgentCoreClient",
        "BEDROCK_AGENTCORE",
        "bedrock-agentcore",
        "bedrock-agentcore",
    ),
}


def client(
    service: str, *, region: str | None = None, env: Mapping[str, str] = os.environ, **settings: Any
) -> LiteClient | None:
    """A lite client for ``service`` (boto3's name: ``dynamodb``, ``stepfunctions``, ``events`` ...)
    in ``region`` (default ``AWS_REGION`` / ``AWS_DEFAULT_REGION``), or None when it cannot serve it.

    ``settings`` are :class:`LiteClient`'s ``connect_timeout``, ``read_timeout``, ``max_attempts``
    (default the harness's ``CLIENT_CONFIG``: 3 s, 10 s, 5 attempts)."""
    entry = _SERVICES.get(service)
    region = region or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    credentials = credentials_from_env(env)
    if entry is None or not region or credentials is None:
        return None
    module, cls, env_name, prefix, signing_name = entry
    url = endpoint_url(env_name, prefix, region, env)
    if url is None:
        return None
    factory = getattr(import_module(module, __name__), cls)
    made: LiteClient = factory(
        region=region, credentials=credentials, endpoint_url=url, signing_name=signing_name, **settings
    )
    return made
