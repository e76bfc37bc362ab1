"""``make deploy``'s logic (scripts/deploy.py), without AWS: which python3.12 it builds with, guided
or not, and the commands it runs, through its ``--dry-run`` (nothing can be deployed here)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .cfn import ROOT

SCRIPT = ROOT / "scripts" / "deploy.py"


def fake(path: Path, body: str) -> Path:
    """An executable shell script at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def deploy(tmp_path: Path, config: str | None, *args: str, python312: str = "3.12") -> subprocess.CompletedProcess[str]:
    """The script run with a fake SAM CLI, a fake python3.12 (reporting ``python312`` as its
    version) alone on PATH, a HOME without pyenv, and ``config`` as samconfig.toml."""
    sam = fake(tmp_path / "sam-venv" / "sam", "exit 0")
    fake(tmp_path / "bin" / "python3.12", f"echo {python312}")
    samconfig = tmp_path / "samconfig.toml"
    if config is not None:
        samconfig.write_text(config)
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path / "home")}
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--sam", str(sam), "--config", str(samconfig), *args],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip


def lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line.removeprefix("deploy: ") for line in result.stdout.splitlines()]


def test_the_first_deploy_is_guided_and_builds_with_python312_on_path(tmp_path: Path) -> None:
    committed = (ROOT / "samconfig.toml").read_text()  # the repository's: no Region recorded yet
    result = deploy(tmp_path, committed, "--dry-run")
    assert result.returncode == 0, result.stderr
    out = lines(result)
    assert out[0].startswith(f"python3.12 {tmp_path / 'bin' / 'python3.12'}; first deploy: guided")
    build, run = out[1:]
    assert build.startswith(f"PATH={tmp_path / 'bin'}:$PATH {tmp_path / 'sam-venv' / 'sam'} build --config-file ")
    assert run.endswith(f"deploy --config-file {tmp_path / 'samconfig.toml'} --guided")


def test_a_recorded_region_deploys_without_questions(tmp_path: Path) -> None:
    saved = '[default.deploy.parameters]\nstack_name = "durable-harness"\nregion = "eu-west-1"\n'
    result = deploy(tmp_path, saved, "--dry-run")
    assert result.returncode == 0, result.stderr
    out = lines(result)
    assert "Region recorded in samconfig.toml: sam deploy" in out[0]
    assert out[2].endswith(f"deploy --config-file {tmp_path / 'samconfig.toml'}")
    assert "--guided" in lines(deploy(tmp_path, saved, "--dry-run", "--guided"))[2]


def test_no_samconfig_is_a_first_deploy(tmp_path: Path) -> None:
    assert lines(deploy(tmp_path, None, "--dry-run"))[2].endswith("--guided")


def test_without_python312_it_says_what_to_install(tmp_path: Path) -> None:
    result = deploy(tmp_path, None, "--dry-run", python312="3.11")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith("deploy: no python3.12 found") and "PYTHON312=" in result.stderr


def test_without_the_kits_sam_it_says_to_run_sam_setup(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHON312": sys.executable}
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run", "--sam", str(tmp_path / "none" / "sam")],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 1 and "make sam-setup" in result.stderr


@pytest.mark.parametrize("status", [0, 3])
def test_it_runs_build_then_deploy_and_stops_at_a_failure(tmp_path: Path, status: int) -> None:
    log = tmp_path / "calls"
    script = f'echo "$@ PATH=$PATH" >> {log}; [ "$1" = build ] && exit {status}; exit 0'
    sam = fake(tmp_path / "sam-venv" / "sam", script)
    fake(tmp_path / "bin" / "python3.12", "echo 3.12")
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--sam", str(sam), "--config", str(tmp_path / "samconfig.toml")],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == status, result.stderr
    calls = log.read_text().splitlines()
    assert calls[0].startswith("build ") and f"PATH={tmp_path / 'bin'}:" in calls[0]
    assert [c.split()[0] for c in calls] == (["build", "deploy"] if status == 0 else ["build"])
