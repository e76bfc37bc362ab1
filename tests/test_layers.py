"""The package's import layers (pyproject.toml's import-linter contracts, run by ``make lint``):
the tree as it is keeps them, and a copy of it with an inward-pointing import, or a cycle between
two packages, breaks them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "layers" / "harness" / "durable_harness"
FASTPATH = ROOT / "layers" / "harness" / "lambda_fastpath"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint(source: Path) -> subprocess.CompletedProcess[str]:
    """lint-imports with the repository's contracts, on the package found under ``source``."""
    env = {**os.environ, "PYTHONPATH": str(source)}  # before the editable install on sys.path
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", str(ROOT / "pyproject.toml")],
        cwd=source, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def copy_with(tmp_path: Path, module: str, line: str, package: Path = PACKAGE) -> Path:
    """A copy of ``package`` (the harness, or the Lambda fast path) whose ``module`` (a path under it)
    ends with ``line``; the other package is found where it is."""
    shutil.copytree(package, tmp_path / package.name, ignore=shutil.ignore_patterns("__pycache__", "static"))
    target = tmp_path / package.name / module
    target.write_text(target.read_text() + f"\n{line}\n")
    return tmp_path


@pytest.fixture(autouse=True)
def _needs_lint_imports() -> None:
    assert LINT_IMPORTS.exists(), "import-linter is in the dev extra: make setup installs it"


def test_the_package_keeps_its_layers() -> None:
    done = lint(PACKAGE.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Contracts: 4 kept, 0 broken." in done.stdout


def test_an_import_that_points_outward_breaks_the_layers(tmp_path: Path) -> None:
    done = lint(copy_with(tmp_path, "errors.py", "from .runner import state as _state  # noqa: E402"))
    assert done.returncode != 0
    assert "durable_harness.errors is not allowed to import durable_harness.runner" in done.stdout


def test_a_cycle_between_two_packages_breaks_the_acyclic_contract(tmp_path: Path) -> None:
    # storage and telemetry share a layer (neither imports the other): one import each way is a cycle.
    source = copy_with(tmp_path, "storage/health.py", "from ..telemetry import base as _base  # noqa: E402")
    target = source / "durable_harness" / "telemetry" / "metrics.py"
    target.write_text(target.read_text() + "\nfrom ..storage import health as _health  # noqa: E402\n")
    done = lint(source)
    assert done.returncode != 0
    assert "No cycles are allowed in durable_harness." in done.stdout


@pytest.mark.parametrize(
    ("module", "line", "importer", "imported"),
    [
        ("models/bedrock.py", "from ..aws.clients import make_client", "models", "aws"),
        ("secretsmanager.py", "from .aws.runtime import client_for", "secretsmanager", "aws"),
        ("secretsmanager.py", "from .aws._errors import translate", "secretsmanager", "aws"),
        ("telemetry/base.py", "from ..aws.tracing import tracing_enabled as _on", "telemetry", "aws"),
        ("harness/bridge/app.py", "from ...server import bridge as _bridge", "harness", "server"),
    ],
    ids=[
        "bedrock-clients",
        "secrets-runtime",
        "secrets-errors",
        "telemetry-tracing",
        "bridge-server",
    ],
)
def test_the_core_reaching_into_the_aws_adapters_or_the_server_breaks_the_layers(
    tmp_path: Path, module: str, line: str, importer: str, imported: str
) -> None:
    """The imports the contracts once excepted (the core into the AWS clients and their tracing; into
    the lite client and the h11 server, now ``lambda_fastpath``, below): the core now gets those
    through its composition roots, and none is excepted."""
    done = lint(copy_with(tmp_path, module, f"{line}  # noqa: E402"))
    assert done.returncode != 0
    assert f"durable_harness.{importer} is not allowed to import durable_harness.{imported}" in done.stdout


@pytest.mark.parametrize(
    ("module", "line", "importer", "imported"),
    [
        ("models/bedrock.py", "from lambda_fastpath.aws import bedrock as _lite", "models.bedrock", "aws.bedrock"),
        ("harness/bridge/transport.py", "from lambda_fastpath import aws as _lite", "harness.bridge.transport", "aws"),
        ("harness/bridge/app.py", "from lambda_fastpath import httpd as _httpd", "harness.bridge.app", "httpd"),
        ("server/local.py", "from lambda_fastpath import botocore_session as _b", "server.local", "botocore_session"),
    ],
    ids=["bedrock-lite", "bridge-lite", "bridge-httpd", "local-kit-botocore"],
)
def test_the_core_or_the_local_kit_importing_the_fast_path_breaks_its_edge(
    tmp_path: Path, module: str, line: str, importer: str, imported: str
) -> None:
    """The Lambda fast path (``lambda_fastpath``: the lite AWS client, the h11 server, the shared
    botocore session) is imported by the AWS adapters, the functions and the bridge's process only."""
    done = lint(copy_with(tmp_path, module, f"{line}  # noqa: E402"))
    assert done.returncode != 0
    assert "Illegal imports of protected package lambda_fastpath" in done.stdout
    assert f"durable_harness.{importer} -> lambda_fastpath.{imported}" in done.stdout


def test_the_fast_path_importing_the_harness_breaks_its_standalone_contract(tmp_path: Path) -> None:
    done = lint(copy_with(tmp_path, "aws/_sigv4.py", "import durable_harness.errors  # noqa: E402", FASTPATH))
    assert done.returncode != 0
    assert "lambda_fastpath is not allowed to import durable_harness:" in done.stdout
    assert "lambda_fastpath.aws._sigv4 -> durable_harness.errors" in done.stdout
