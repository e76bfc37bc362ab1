"""Serve the deployed chat app over real HTTP, with the whole stack in moto, in one process.

    python tests/deploy/serve_stack.py --port P [--token T] [--agent module:attr] [--slice-seconds S]

Inside this process: ``mock_aws`` with the template "deployed" into it (:class:`~tests.deploy.stack.MotoStack`:
DynamoDB, S3, the real ``statemachine/run.asl.json`` run by moto's Step Functions interpreter, the
real slice and finalizer handlers invoked in-process), the chat function's environment exactly as
the template gives it (token auth with the SHA-256 of ``--token``, or ``AuthMode none`` without
one), and ``functions/chat/app.py``'s ``app`` served on ``127.0.0.1:P`` by the function's own server
(:mod:`lambda_fastpath.httpd`, which ``functions/chat/serve.py`` runs behind the Lambda Web
Adapter). The Node tests (``tests/node/test/aws.test.js``) drive it
with the real AI SDK client.

Defaults: the library's default agent (``my_agent``, ``ModelId=demo``: "What is the weather in
Paris?" takes a tool step and a text step) and ``SliceSeconds=0`` (one step per slice, so every
run goes through several slices of the state machine).

Prints ``serve_stack: ready on http://127.0.0.1:P`` once listening (``--port 0``: the port it
bound). On SIGTERM (or SIGINT) it stops serving, stops running executions, holds every AWS call
the functions and the state machine made against the template's IAM policies, prints
``serve_stack: iam ok`` (or the calls denied, exit status 3) and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import hashlib
import os
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script: make ``tests.deploy`` (and test agents) importable
    sys.path.insert(0, str(ROOT))


def _aws_environment() -> None:
    """Fake credentials and a region (mock_aws sets keys too); no real AWS account is ever reached."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_ENDPOINT_URL"):
        os.environ.pop(name, None)
    os.environ["AWS_ACCESS_KEY_ID"] = "testing"
    os.environ["AWS_SECRET_ACCESS_KEY"] = "testing"
    os.environ["AWS_DEFAULT_REGION"] = "us-east-1"
    os.environ["POWERTOOLS_TRACE_DISABLED"] = "true"  # no X-Ray daemon here


def parameters(args: argparse.Namespace) -> dict[str, str]:
    """The template parameters of the stack this server deploys."""
    overrides = {
        "ModelId": args.model_id,
        "SliceSeconds": str(args.slice_seconds),
        "Agent": args.agent,
    }
    if args.token:
        overrides["AuthMode"] = "token"
        overrides["AuthTokenHashes"] = f"{args.token_name}:{hashlib.sha256(args.token.encode()).hexdigest()}"
    else:
        overrides["AuthMode"] = "none"
    return overrides


def main(argv: list[str] | None = None) -> int:
    """Deploy, serve until SIGTERM / SIGINT, check IAM; the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--token", default="", help="bearer token accepted (AuthMode token); none: AuthMode none")
    parser.add_argument("--token-name", default="tester", help="the principal name of --token")
    parser.add_argument("--agent", default="", help="template parameter Agent (empty: my_agent:build_agent)")
    parser.add_argument("--model-id", default="demo", help="template parameter ModelId")
    parser.add_argument("--slice-seconds", default="0", help="template parameter SliceSeconds")
    parser.add_argument("--log-level", default="warning", help="accepted, unused: the server logs only problems")
    args = parser.parse_args(argv)

    _aws_environment()
    stopping: list[int] = []

    def on_signal(sig: int, frame: FrameType | None) -> None:
        # Before the server starts: just note it.
        stopping.append(sig)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    from lambda_fastpath import httpd

    from tests.deploy.chat import load_chat_app
    from tests.deploy.iam import ACTOR
    from tests.deploy.stack import MotoStack

    async def serve(app: Any) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)

        def ready(address: tuple[str, int]) -> None:
            print(f"serve_stack: ready on http://{args.host}:{address[1]}", flush=True)  # --port 0: the one bound

        # Open SSE streams get 2 s, then are cut: they must not hold the shutdown.
        await httpd.serve(app, args.host, args.port, stop=stop, ready=ready, shutdown_grace=2)

    stack = MotoStack(parameters(args))
    with stack.deployed():
        chat = stack.functions["ChatFunction"]
        # The chat function's process environment, as the template sets it (Globals + its own).
        # Slice and finalizer invocations overlay theirs while they run (MotoStack's invoke patch).
        os.environ.update(chat.env)
        app = load_chat_app()
        print(
            f"serve_stack: stack {stack.stack_name} in moto; chat env AUTH_MODE={chat.env.get('AUTH_MODE')} "
            f"AGENT={chat.env.get('AGENT', '(default)')} MODEL_ID={chat.env['MODEL_ID']} "
            f"SLICE_SECONDS={stack.functions['SliceFunction'].env['SLICE_SECONDS']}",
            flush=True,
        )
        if stopping:
            return 0
        # The app's AWS calls are the chat function's (recorded for the IAM check).
        context = contextvars.copy_context()
        context.run(ACTOR.set, "ChatFunction")
        context.run(asyncio.run, serve(app))
        print("serve_stack: stopping", flush=True)
    try:
        stack.check_iam()
    except AssertionError as exc:
        print(f"serve_stack: iam denied: {exc}", file=sys.stderr, flush=True)
        return 3
    print(f"serve_stack: iam ok ({len(stack.calls)} calls checked)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
