"""``python -m durable_harness.server.bridge``: run one session's bridge.

The bridge (:mod:`durable_harness.harness.bridge`) is an ASGI app; this is the process that serves
it over the deployed chat function's HTTP server (:mod:`lambda_fastpath.httpd`), so it sits with the
server, not the harness.

Locally (what :func:`~durable_harness.harness.bridge.client.find_or_start` runs, detached)::

    python -m durable_harness.server.bridge --session SESSION --data DIR --config-stdin -- PROGRAM ARGS...

reads one JSON line from stdin (``{"secret": "...", "env": {...}}``: the session's secret and the
program's explicit variables, kept off the command line), listens on an ephemeral loopback port,
registers in ``DIR/bridges/``, prints one line ``{"ready": true, "port": ..., "pid": ...}`` and
closes its stdout. In AgentCore Runtime (``--agentcore``): ``0.0.0.0:8080``, no secret (IAM guards
the invoke), no registry, no idle timeout of its own (the runtime's lifecycle settings apply).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from lambda_fastpath import httpd

from ..harness.bridge.app import DEFAULT_GRACE_SECONDS, DEFAULT_IDLE_SECONDS, KEEPALIVE_SECONDS, Bridge, BridgeConfig


async def serve_bridge(
    config: BridgeConfig,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    ready: Callable[[Bridge], None] | None = None,
    signals: bool = False,
) -> None:
    """Serve one bridge until it ends (destroy, idle timeout, or SIGTERM/SIGINT with ``signals``);
    ``ready`` is called once it listens and has registered."""
    bridge = Bridge(config)
    loop = asyncio.get_running_loop()
    if signals:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, lambda: loop.create_task(bridge.shutdown("signal")))

    def listening(address: tuple[str, int]) -> None:
        bridge.listening(address)
        if ready is not None:
            ready(bridge)

    await httpd.serve(bridge, host, port, stop=bridge.stopped, ready=listening)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m durable_harness.server.bridge", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--session", help="the session id (required with --data)")
    parser.add_argument("--data", type=Path, help="the data folder to register in (local)")
    parser.add_argument("--host", help="address to listen on (default 127.0.0.1; --agentcore: 0.0.0.0)")
    parser.add_argument("--port", type=int, help="port (default 0: an ephemeral one; --agentcore: 8080)")
    parser.add_argument("--cwd", help="the program's working folder")
    parser.add_argument(
        "--pass-env",
        action="append",
        default=[],
        metavar="NAME",
        help="pass this variable of the bridge's environment to the program (repeatable)",
    )
    parser.add_argument(
        "--idle-seconds",
        type=float,
        default=None,
        help=f"end after this long with no client, turn or command (default {DEFAULT_IDLE_SECONDS:g}; 0: never)",
    )
    parser.add_argument(
        "--grace-seconds",
        type=float,
        default=DEFAULT_GRACE_SECONDS,
        help="how long the program has to exit after destroy before it is killed",
    )
    parser.add_argument("--keepalive-seconds", type=float, default=KEEPALIVE_SECONDS, help=argparse.SUPPRESS)
    parser.add_argument(
        "--config-stdin", action="store_true", help='read {"secret": ..., "env": {...}} as one JSON line from stdin'
    )
    parser.add_argument("--agentcore", action="store_true", help="run as an AgentCore Runtime (see above)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the program and its arguments")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the arguments and run the bridge until it ends."""
    parser = _parser()
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the program's command after --")
    if args.data is not None and not args.session:
        parser.error("--data needs --session")
    secret, env = None, {}
    if args.config_stdin:
        try:
            config_line = json.loads(sys.stdin.readline())
            secret, env = config_line.get("secret"), dict(config_line.get("env") or {})
        except (ValueError, AttributeError, TypeError):
            parser.error('--config-stdin: stdin must start with one JSON line {"secret": ..., "env": {...}}')
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)  # the launcher has closed its end; fd 0 stays taken (not reused by accident)
        os.close(devnull)
    if not secret and not args.agentcore:
        parser.error("a local bridge needs a secret (--config-stdin); only --agentcore runs without one")
    idle = args.idle_seconds if args.idle_seconds is not None else (None if args.agentcore else DEFAULT_IDLE_SECONDS)
    config = BridgeConfig(
        command=command, session_id=args.session, data_dir=args.data, secret=secret or None, cwd=args.cwd,
        env=env, pass_env=tuple(args.pass_env), idle_seconds=idle or None, grace_seconds=args.grace_seconds,
        keepalive_seconds=args.keepalive_seconds,
    )  # fmt: skip
    host = args.host or ("0.0.0.0" if args.agentcore else "127.0.0.1")  # AgentCore's contract
    port = args.port if args.port is not None else (8080 if args.agentcore else 0)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    def ready(bridge: Bridge) -> None:
        assert bridge.address is not None
        print(json.dumps({"ready": True, "port": bridge.address[1], "pid": os.getpid()}), flush=True)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # nobody reads our stdout any more: never block on it
        os.close(devnull)

    asyncio.run(serve_bridge(config, host, port, ready=ready, signals=True))
    return 0


__all__ = ["main", "serve_bridge"]

if __name__ == "__main__":
    sys.exit(main())
