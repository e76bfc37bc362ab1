"""``lambda_fastpath``: what the harness's Lambda functions load instead of botocore's clients and uvicorn.

Three parts, each usable alone, none importing anything of ``durable_harness`` (an import-linter
contract in pyproject.toml keeps it so; the harness's AWS adapters and composition roots use them,
the core and the local kit never import them):

* :mod:`lambda_fastpath.aws`: a small AWS client (SigV4, keep-alive ``http.client`` transport,
  botocore's standard-mode retries and exception classes) for the operations the harness calls on
  DynamoDB, S3, Step Functions, EventBridge, Secrets Manager, Bedrock's ``ConverseStream`` and
  AgentCore's ``InvokeAgentRuntime``, with boto3's method names, arguments and results;
* :mod:`lambda_fastpath.httpd`: the HTTP/1.1 server on h11 the chat function runs behind the Lambda
  Web Adapter (and the session bridge's process serves with);
* :mod:`lambda_fastpath.botocore_session`: botocore clients, where botocore is still needed, from
  one shared session that reads the layer's trimmed endpoint data.

Why: botocore's import and client creation, uvicorn's import and botocore's full endpoint data are
most of what a function's cold start could cut. The lite client saves about 250 ms of CPU per cold
start (the template's ``LiteClients`` figure; ``bench/cold_start.py`` measures a build side by side
with an older one: docs/architecture.md, sections 8 and 10), the server about 25 ms of the chat
function's load, the trimmed endpoint data about 10 ms.

Why it can be trusted: the tests (``tests/lambda_fastpath``) hold it against botocore itself:
signatures byte for byte against botocore's signers, requests and answers against boto3 clients on
the same moto server, retries, errors and event streams against botocore's parsers. In a deployed
stack ``LiteClients=false`` (``AWS_LITE_CLIENTS=0``) goes back to botocore's clients.
"""

__version__ = "0.1.0"
"""The version of the distribution that ships this package (durable-harness's, which ``durable_harness``
writes too; ``tests/lambda_fastpath/test_package.py`` holds them equal): the lite clients'
``User-Agent`` says it. Written here, not read from the package metadata, which costs a cold start."""

__all__ = ["__version__"]
