"""Entry point of the chat function: the ASGI app (served by serve.py, behind the Lambda Web Adapter).

Deployed (``RUNS_TABLE`` set by the template) it serves the AWS runtime: run records in DynamoDB,
the chunk log in S3, runs driven by the Step Functions state machine. A chat POST runs the new
run's first slice in this function and streams it from the commit signal, handing the run over to
the state machine at its end (decision D14, ``durable_harness.server.inline``;
``INLINE_FIRST_SLICE=0`` leaves every slice to the slice function). CORS is answered by the
Function URL (its ``Cors`` settings), so the app adds no CORS headers of its own there.

Locally (no ``RUNS_TABLE``) it serves the local kit: embedded storage in ``DATA_DIR``, the agent
named by ``AGENT``, in-process slices.
"""

from __future__ import annotations

from durable_harness.hardening import deny_proc_reads
from durable_harness.server.app import ChatApp
from durable_harness.settings import Settings

deny_proc_reads()  # the programs and subprocesses we start cannot read our environment or memory


def build_app(settings: Settings) -> ChatApp:
    """The chat app of ``settings``: the AWS runtime when ``RUNS_TABLE`` is set, else the local kit."""
    if not settings.deployed:
        from durable_harness.server.local import local_kit  # SQLite and files: not loaded when deployed

        return local_kit(settings).app
    from durable_harness.functions.chat import chat_app

    return chat_app(settings)


app = build_app(Settings.from_env())
