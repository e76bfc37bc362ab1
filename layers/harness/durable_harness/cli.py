"""Command line: ``durable-harness serve`` runs the chat app locally with embedded storage;
``durable-harness chat`` talks to a server in the terminal; ``durable-harness runs show|follow|cancel``
inspects and controls runs; ``durable-harness check URL`` runs what a user tries first against a
deployed stack (:mod:`.check`)."""

from __future__ import annotations

import json
import logging
import os
import secrets
import sys
from typing import TYPE_CHECKING, Any

from . import __version__
from .approvals import DEFAULT_SECRET_ENV
from .loader import load_agent
from .settings import DEFAULT_AGENT

if TYPE_CHECKING:  # imported by the commands only
    import argparse

__all__ = ["DEFAULT_AGENT", "load_agent", "main"]  # load_agent: durable_harness.loader's, named here too


def _local_approval_secret(data_dir: str) -> None:
    """Sign approvals locally too: a secret kept in the data folder (mode 0600), stable across restarts."""
    if os.environ.get(DEFAULT_SECRET_ENV):
        return
    from .storage._private import make_private_dirs

    path = make_private_dirs(data_dir) / "approval-secret"
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(32))
    os.environ[DEFAULT_SECRET_ENV] = path.read_text().strip()


def _serve(args: argparse.Namespace) -> None:
    import dataclasses

    import uvicorn

    from .errors import AgentConfigError, HarnessError, SettingsError
    from .hardening import deny_proc_reads
    from .server.local import local_kit
    from .settings import Settings
    from .tools.pool import tool_threads

    deny_proc_reads()  # harness programs and tools' subprocesses cannot read our environment or memory
    try:
        tool_threads()  # a bad TOOL_THREADS fails here, not at the first tool call
        settings = Settings.from_env()
    except (AgentConfigError, SettingsError) as exc:
        raise SystemExit(str(exc)) from None
    # The command's options win over the settings they default to.
    settings = dataclasses.replace(
        settings,
        agent=args.agent or settings.agent,
        slice_seconds=settings.slice_seconds if args.slice_seconds is None else args.slice_seconds,
    )
    data_dir = args.data_dir or settings.data_dir or ".data"
    extra = {"delay": args.demo_delay} if settings.agent == DEFAULT_AGENT else {}
    _local_approval_secret(data_dir)
    try:
        kit = local_kit(settings, data_dir=data_dir, **extra)  # the local mode's root (server/local.py)
    except HarnessError as exc:  # a bad AUTH_* setting, or an approval secret too short or unreadable
        raise SystemExit(str(exc)) from None
    url = f"http://{args.host}:{args.port}"
    kit.runner.public_url = kit.runner.public_url or url  # the base of the event URLs tools hand out
    print(f"durable-harness: chat app on {url}  (data in {data_dir}, agent {settings.agent})", flush=True)
    question = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "What is the weather in Paris?"}]}
    print(f"  try: curl -N {url}/api/chat -d '{json.dumps({'messages': [question]})}'", flush=True)
    uvicorn.run(kit.app, host=args.host, port=args.port, log_level=args.log_level, lifespan="on")


def _client_options() -> argparse.ArgumentParser:
    """``--url`` and ``--token``, shared by the client commands."""
    import argparse

    from .client import DEFAULT_URL

    # The server `durable-harness serve` (or `make dev`) runs with the same PORT, unless CHAT_URL says.
    port = os.environ.get("PORT", "").strip()
    local = f"http://127.0.0.1:{port}" if port else DEFAULT_URL
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument(
        "--url", default=os.environ.get("CHAT_URL") or local,
        help=f"the chat server (env CHAT_URL; default http://127.0.0.1:$PORT, or {DEFAULT_URL})",
    )  # fmt: skip
    options.add_argument("--token", default=os.environ.get("CHAT_TOKEN") or None, help="bearer token (env CHAT_TOKEN)")
    return options


def _client_command(args: argparse.Namespace) -> int:
    from .client import terminal

    for stream in (sys.stdout, sys.stderr):  # never a UnicodeEncodeError for "⚙" on a narrow locale
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="replace")
    term = terminal.Terminal(stdin=sys.stdin, stdout=sys.stdout, stderr=sys.stderr, environ=os.environ)
    return terminal.run_command(args, term)


def _check_parser(sub: Any) -> None:
    """The ``check`` command's arguments (see :mod:`.check`)."""
    from .check import DEFAULT_CANCEL_PROMPT, DEFAULT_PROMPT

    check = sub.add_parser(
        "check", help="check a deployed (or local) server: a turn, resumes, the run API, approval, cancel",
        description="Run what a user tries first against URL, print each step's result and timings, and exit "
        "non-zero with the reason at the first failure.",
    )  # fmt: skip
    check.add_argument("url", help="the chat server, e.g. the stack's ChatUrl output")
    check.add_argument("--token", default=os.environ.get("CHAT_TOKEN") or None, help="bearer token (env CHAT_TOKEN)")
    check.add_argument("--prompt", default=DEFAULT_PROMPT, help=f"the first turn (default {DEFAULT_PROMPT!r})")
    check.add_argument(
        "--approval-prompt", default=None,
        help="a turn that makes the agent ask for a tool approval (e.g. 'Save a note: hello'); without it the "
        "approval step runs only when the first turn asks for one",
    )  # fmt: skip
    check.add_argument(
        "--cancel-prompt", default=DEFAULT_CANCEL_PROMPT,
        help=f"a turn long enough to cancel after its first chunk (default {DEFAULT_CANCEL_PROMPT!r})",
    )  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``durable-harness`` command."""
    import argparse

    parser = argparse.ArgumentParser(prog="durable-harness", description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve the chat app with embedded storage")
    serve.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
    serve.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    # Defaults from the settings (durable_harness.settings): DATA_DIR (else .data), AGENT, SLICE_SECONDS.
    serve.add_argument("--data-dir", default=None, help="the data folder (env DATA_DIR; default .data)")
    serve.add_argument("--agent", default=None, help="module:attribute (env AGENT): the agent, and its runs' identity")
    serve.add_argument("--slice-seconds", type=float, default=None, help="one slice's budget (env SLICE_SECONDS)")
    serve.add_argument("--demo-delay", type=float, default=float(os.environ.get("DEMO_DELAY", "0.03")))
    serve.add_argument("--log-level", default=os.environ.get("LOG_LEVEL", "info"))
    client = _client_options()
    sub.add_parser(
        "chat", parents=[client], help="chat with a server in the terminal",
        description="Chat in the terminal: the reply streams as it arrives, tool calls show one line each, "
        "approvals are asked inline, and a dropped connection resumes where it stopped. Ctrl-D quits.",
    )  # fmt: skip
    runs = sub.add_parser("runs", help="inspect and control runs", description="Inspect and control runs.")
    runs_sub = runs.add_subparsers(dest="runs_command", required=True)
    show = runs_sub.add_parser("show", parents=[client], help="a run's status, usage and pending approvals")
    show.add_argument("run", help="the run id (wrun_...)")
    show.add_argument("--json", action="store_true", help="print the run API's JSON")
    follow = runs_sub.add_parser("follow", parents=[client], help="print a run's stream until it finishes")
    follow.add_argument("run", help="the run id (wrun_...)")
    follow.add_argument(
        "--from", dest="start_index", type=int, default=0, metavar="N",
        help="start at chunk N (negative: N chunks before the end; default 0)",
    )  # fmt: skip
    follow.add_argument("--json", action="store_true", help="print the chunks as JSON lines")
    cancel = runs_sub.add_parser("cancel", parents=[client], help="stop a live run")
    cancel.add_argument("run", help="the run id (wrun_...)")
    _check_parser(sub)
    args = parser.parse_args(argv)
    if args.command == "serve":
        logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
        _serve(args)
        return
    if args.command == "check":
        from .check import run_check

        raise SystemExit(run_check(args, sys.stdout, sys.stderr))
    status = _client_command(args)
    if status:
        raise SystemExit(status)


if __name__ == "__main__":
    main(sys.argv[1:])
