"""The session zip of the AgentCore runtime (layers/harness/build_session_zip.py): its layout and
modes, and its entry point serving a session through the emulated ``InvokeAgentRuntime`` route.

moto has no AgentCore data plane: :mod:`.agentcore_emulator` stands in for the service, and each
of its "microVMs" runs the zip's own ``agentcore_main.py`` (extracted, as AgentCore unpacks it) as
a real subprocess. The dependencies are not installed into the zip here (an empty requirements
file: pip would need PyPI); the entry point then finds them in the test's interpreter.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import stat
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest
from durable_harness.aws.agentcore import AgentCoreConnection
from lambda_fastpath.aws import _client

from tests.harness.bridge_support import FINISH, collect, delta

from .agentcore_emulator import LOOPBACK, agentcore_emulator

ROOT = Path(__file__).resolve().parents[2]
RUNTIME_ARN = "arn:aws:bedrock-agentcore:us-east-1:123456789012:runtime/harness_sessions_0123abcd-Xy12345678"


def _load() -> ModuleType:
    harness = str(ROOT / "layers" / "harness")
    sys.path.insert(0, harness)  # the script imports build_layer from its own folder
    try:
        spec = importlib.util.spec_from_file_location("build_session_zip", Path(harness) / "build_session_zip.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(harness)


build_session_zip = _load()


@pytest.fixture
def session_zip(tmp_path: Path) -> Path:
    """A zip of the bridge tests' program, built by the script (no dependencies installed)."""
    program = tmp_path / "program"
    program.mkdir()
    shutil.copy2(ROOT / "tests" / "harness" / "bridge_program.py", program / "bridge_program.py")
    (program / "bridge_program.py").chmod(0o755)
    (tmp_path / "empty.txt").write_text("# nothing: the test's interpreter has them\n")
    out = tmp_path / "session.zip"
    build_session_zip.main([str(out), "--program", str(program), "--command", '["{python}", "bridge_program.py"]',
                            "--requirements", str(tmp_path / "empty.txt"), "--grace-seconds", "3"])  # fmt: skip
    return out


def test_the_zip_holds_the_entry_point_the_library_and_the_program_with_its_modes(session_zip: Path) -> None:
    with zipfile.ZipFile(session_zip) as archive:
        names = set(archive.namelist())
        assert {"agentcore_main.py", "session.json", "program/bridge_program.py"} <= names
        assert "durable_harness/server/bridge.py" in names and "durable_harness/harness/bridge/app.py" in names
        assert "lambda_fastpath/httpd.py" in names  # the bridge's process serves with it
        assert not any("__pycache__" in name for name in names)
        assert json.loads(archive.read("session.json")) == {"command": ["{python}", "bridge_program.py"],
                                                            "graceSeconds": 3.0, "passEnv": []}  # fmt: skip
        mode = archive.getinfo("program/bridge_program.py").external_attr >> 16
        assert stat.S_IMODE(mode) == 0o755 and stat.S_ISREG(mode)
    # The same content gives the same zip (so that its S3 key, from its digest, changes only with it).
    again = session_zip.with_name("again.zip")
    build_session_zip.write_zip(_extract(session_zip, session_zip.with_name("unzipped")), again)
    assert again.read_bytes() == session_zip.read_bytes()


def test_a_bad_command_is_refused_with_what_to_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_session_zip.main([str(tmp_path / "z.zip"), "--program", str(tmp_path), "--command", "python prog.py"])
    assert "--command must be a JSON list of strings" in capsys.readouterr().err


def _extract(archive_path: Path, folder: Path) -> Path:
    """The zip extracted as AgentCore unpacks it: its POSIX modes kept (``extractall`` drops them)."""
    with zipfile.ZipFile(archive_path) as archive:
        for info in archive.infolist():
            Path(archive.extract(info, folder)).chmod(stat.S_IMODE(info.external_attr >> 16))
    return folder


@pytest.fixture
def unpacked(session_zip: Path, tmp_path: Path) -> Path:
    """The zip, extracted."""
    return _extract(session_zip, tmp_path / "code")


async def test_the_zips_entry_point_serves_a_session_through_the_invoke_route(
    unpacked: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_client, "backoff", lambda attempt, **_: 0.0)
    argv = [sys.executable, str(unpacked / "agentcore_main.py"), *LOOPBACK]
    with agentcore_emulator(RUNTIME_ARN, argv) as emulator:
        env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1",
               "AWS_ENDPOINT_URL_BEDROCK_AGENTCORE": emulator.url, "AGENTCORE_RUNTIME_ARN": RUNTIME_ARN}  # fmt: skip
        connection = AgentCoreConnection.from_env("chat_zip_0001", env)
        boot = await connection.start()
        await connection.send({"type": "start", "env": True, "lines": [delta(0), FINISH]}, boot)
        lines = await collect(connection.attach(boot, 0, deadline_seconds=30))
        program_env = lines[0].line["rawValue"]
        assert [line.line for line in lines[1:]] == [delta(0), FINISH]
        # The program gets a minimal environment: the microVM's role credentials do not reach it.
        assert not any(name.startswith("AWS_") for name in program_env)
        status = await connection.status()
        assert status["running"] and emulator.microvms_started == 1
        await connection.destroy()
