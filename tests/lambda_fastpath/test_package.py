"""The Lambda fast path as a package of its own: it stands alone (nothing of ``durable_harness`` is
imported with it), the core and the local kit leave it unloaded, and it says the harness's version.

pyproject.toml's import-linter contracts hold the same statically (tests/test_layers.py); these run
the imports, in fresh interpreters, as a process does.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import durable_harness
import lambda_fastpath

ROOT = Path(__file__).resolve().parents[2]


def loaded(code: str, tmp_path: Path) -> list[str]:
    """The modules of ``prefix`` (the script's ``PREFIX``) loaded once ``code`` has run, in a fresh interpreter."""
    script = code + "\nprint(json.dumps(sorted(m for m in sys.modules if m == PREFIX or m.startswith(PREFIX + '.'))))\n"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x",
           "AWS_REGION": "eu-west-1"}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return list(json.loads(done.stdout.splitlines()[-1]))


def test_the_fast_path_loads_nothing_of_the_harness(tmp_path: Path) -> None:
    code = (
        "import json, sys\n"
        "PREFIX = 'durable_harness'\n"
        "import lambda_fastpath, lambda_fastpath.httpd, lambda_fastpath.botocore_session\n"
        "from lambda_fastpath import aws\n"
        "made = [aws.client(s) for s in ('dynamodb', 's3', 'stepfunctions', 'events', 'secretsmanager',\n"
        "                                'bedrock-runtime', 'bedrock-agentcore')]\n"
        "assert all(made), made\n"
        "made[0]._request  # a method of the client's base: loaded\n"
    )
    assert loaded(code, tmp_path) == []


def test_the_core_and_the_local_kit_leave_the_fast_path_unloaded(tmp_path: Path) -> None:
    code = (
        "import json, sys\n"
        "PREFIX = 'lambda_fastpath'\n"
        "import durable_harness, durable_harness.cli, durable_harness.client, durable_harness.runner\n"
        "import durable_harness.server, durable_harness.server.app, durable_harness.server.local\n"
        "import durable_harness.storage, durable_harness.harness, durable_harness.models.bedrock\n"
        "from durable_harness import Agent\n"
        "from durable_harness.server.local import build_local_kit\n"
        f"kit = build_local_kit(Agent(model='demo'), {str(tmp_path / 'data')!r}, static_dir=None)\n"
        "assert kit.app is not None\n"
    )
    assert loaded(code, tmp_path) == []


def test_the_lite_clients_say_the_harness_version() -> None:
    # One distribution ships both packages: the User-Agent's version is the harness's.
    assert lambda_fastpath.__version__ == durable_harness.__version__
