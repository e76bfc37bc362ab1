"""The package as a library: the wheel built from this tree and installed into a fresh virtual
environment (``pip install <wheel>`` and ``pip install '<wheel>[pydantic-ai]'``, as ``pip install .``
and ``pip install '.[pydantic-ai]'`` would), with pip's cache (no index needed once it is warm).

The wheel is built from a copy of the tree (setuptools writes build/ and *.egg-info/ beside the
sources). When the chat page is not built (``make web``), the copy gets two stand-in page files, so
the package-data rules are checked either way.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from durable_harness import __version__

pytestmark = pytest.mark.packaging

ROOT = Path(__file__).resolve().parents[2]
TEST_ONLY = {"pytest", "pytest-asyncio", "moto", "hypothesis", "ruff", "mypy", "opentelemetry-sdk"}
"""Distributions of the test and dev extras that the plain install (``make dev``) must not bring."""
AWS_ONLY = {"boto3", "botocore", "aws-lambda-powertools"}
EXTRAS = {"aws", "pydantic-ai", "otel", "test", "dev"}


def _run(*args: str | Path, cwd: Path, timeout: float = 600) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{args}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of a copy of this tree."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "botocore-data")
    shutil.copytree(ROOT / "layers" / "harness", src / "layers" / "harness", ignore=ignore)
    static = src / "layers" / "harness" / "durable_harness" / "server" / "static"
    if not (static / "index.html").exists():
        (static / "assets").mkdir(parents=True, exist_ok=True)
        (static / "index.html").write_text("<!doctype html>\n")
        (static / "assets" / "app-0.js").write_text("\n")
    out = tmp_path_factory.mktemp("dist")
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-w", out, src, cwd=src)
    [built] = out.glob("durable_harness-*.whl")
    return built


def test_the_wheel_holds_the_library_only_typed_and_licensed(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    dist_info = f"durable_harness-{__version__}.dist-info"
    assert wheel.name.startswith(f"durable_harness-{__version__}-py3-none-any")
    assert {n.split("/")[0] for n in names} == {"durable_harness", "lambda_fastpath", dist_info}, "the packages only"
    assert "durable_harness/py.typed" in names and "lambda_fastpath/py.typed" in names
    assert "lambda_fastpath/aws/_sigv4.py" in names and "lambda_fastpath/httpd.py" in names  # the Lambda fast path
    assert "durable_harness/server/static/index.html" in names
    assert any(n.startswith("durable_harness/server/static/assets/") for n in names)
    assert "durable_harness/harness/pydantic_ai/__init__.py" in names
    assert not [n for n in names if n.endswith("my_agent.py") or "/tests/" in n or n.endswith(".pyc")]
    assert f"{dist_info}/licenses/LICENSE" in names
    license_text = zipfile.ZipFile(wheel).read(f"{dist_info}/licenses/LICENSE").decode()
    assert license_text == (ROOT / "LICENSE").read_text() and "Apache License" in license_text
    meta = Parser().parsestr(zipfile.ZipFile(wheel).read(f"{dist_info}/METADATA").decode())
    assert meta["Version"] == __version__
    assert meta["License-Expression"] == "Apache-2.0"
    assert set(meta.get_all("Provides-Extra")) == EXTRAS
    assert "Typing :: Typed" in meta.get_all("Classifier")
    assert meta["Author"] or meta["Author-email"]
    base = [r for r in meta.get_all("Requires-Dist") if "extra ==" not in r]
    assert not [r for r in base if r.split("[")[0].split(">")[0].split("<")[0].strip() in TEST_ONLY | AWS_ONLY]


def test_a_fresh_venv_installs_the_wheel_and_its_pydantic_ai_extra(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    py = venv / "bin" / "python"
    pip = (py, "-m", "pip", "install", "--disable-pip-version-check", "--quiet", "--no-compile")  # no .pyc: faster
    _run(*pip, wheel, cwd=tmp_path)
    installed = {d["name"].lower() for d in json.loads(_run(py, "-m", "pip", "list", "--format=json", cwd=tmp_path))}
    assert "durable-harness" in installed
    assert not installed & (TEST_ONLY | AWS_ONLY), "the plain install (`make dev`'s) brings only what serving needs"
    # -I: neither the working folder nor PYTHONPATH on sys.path, so this is the installed copy.
    turn = (
        "import asyncio, durable_harness, durable_harness.server.local, durable_harness.client\n"
        "from durable_harness import Agent\n"
        "from durable_harness.models import ScriptedModel, text_step\n"
        "assert durable_harness.__file__.startswith(sys.prefix), durable_harness.__file__\n"
        "print(durable_harness.__version__, asyncio.run(Agent(model='demo').generate('Hello')).finish_reason)\n"
    )
    assert _run(py, "-I", "-c", "import sys\n" + turn, cwd=tmp_path).split() == [__version__, "stop"]
    # No agent file in the wheel: the CLI says what to write, and then finds it in the working folder.
    no_agent = subprocess.run([venv / "bin" / "durable-harness", "serve", "--port", "0"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
    assert no_agent.returncode != 0 and "Traceback" not in no_agent.stderr
    assert "write your own my_agent.py with a build_agent() in the working folder" in no_agent.stderr
    agent_file = "from durable_harness import Agent\n\ndef build_agent():\n    return Agent(model='demo')\n"
    (tmp_path / "my_agent.py").write_text(agent_file)
    loaded = "from durable_harness.cli import DEFAULT_AGENT as A, load_agent; print(type(load_agent(A)).__name__)"
    assert _run(py, "-I", "-c", loaded, cwd=tmp_path).strip() == "ToolLoopAgent"

    _run(*pip, f"{wheel}[pydantic-ai]", cwd=tmp_path)
    adapter = "import durable_harness.harness.pydantic_ai as m; print(m.PydanticAIHarness.__name__)"
    assert _run(py, "-I", "-c", adapter, cwd=tmp_path).strip() == "PydanticAIHarness"


def test_make_dev_installs_the_package_without_extras(tmp_path: Path) -> None:
    # What `make dev` runs to set up (dry run, forced): the plain editable install, pip's progress on.
    plan = _run("make", "-n", "-B", f"VENV={tmp_path / 'v'}", str(tmp_path / "v" / ".installed-serve"), cwd=ROOT)
    installs = [line for line in plan.splitlines() if " pip install " in line and "--upgrade pip" not in line]
    assert installs == [f"{tmp_path / 'v'}/bin/python -m pip install --progress-bar on -e '.'"]
    [dev] = re.findall(r"^dev:(.*)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert "serve-setup" in dev.split() and "setup" not in dev.split()
