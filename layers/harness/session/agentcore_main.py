"""The entry point of the harness sessions' AgentCore runtime (direct code deployment).

AgentCore Runtime runs this file with its managed Python in each session's microVM. It starts the
session bridge (``durable_harness.server.bridge --agentcore``: the service contract on
``0.0.0.0:8080``, no secret, since IAM guards the invoke) over the harness program that
``session.json`` (written by ``build_session_zip.py``) names, in the ``program/`` folder. Extra
arguments go to the bridge before its ``--`` (the tests run it on a loopback port with them).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str]) -> int:
    """Run the bridge over the packaged program until the microVM ends."""
    config = json.loads((HERE / "session.json").read_text())
    sys.path.insert(0, str(HERE))  # the library and its dependencies are at the zip's root
    from durable_harness.server.bridge import main as bridge

    # "{python}" stands for this interpreter (the runtime's managed Python), e.g. a Python program.
    command = [sys.executable if part == "{python}" else part for part in config["command"]]
    options = ["--agentcore", "--cwd", str(HERE / "program"), "--grace-seconds", str(config.get("graceSeconds", 10))]
    for name in config.get("passEnv", []):  # variables of the microVM the program may read (none by default)
        options += ["--pass-env", name]
    return bridge([*options, *argv, "--", *command])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
