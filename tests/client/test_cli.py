"""``durable-harness chat`` and ``durable-harness runs show|follow|cancel`` as subprocesses."""

from __future__ import annotations

import hashlib
import io
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from durable_harness.cli import main
from durable_harness.client import ChatClient
from durable_harness.demo import SAVED_NOTES
from durable_harness.server.auth import TokenAuth
from durable_harness.server.local import LocalKit
from durable_harness.server.service import ServiceConfig

from tests.client.conftest import make_kit
from tests.support import log_chunks, message_of, serve

APPROVE_PROMPT = 'Approve save_note {"title":"buy milk","text":"buy milk"}? [y/N, or n <reason>]'


def cli_env(env: dict[str, str] | None = None) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("CHAT_URL", "CHAT_TOKEN", "TERM")}
    return environ | {"NO_COLOR": "1", "PYTHONIOENCODING": "utf-8"} | (env or {})


def cli(*args: str, stdin: str = "", env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durable_harness", *args], input=stdin, capture_output=True, text=True,
        encoding="utf-8", env=cli_env(env), timeout=60, check=False,
    )  # fmt: skip


def in_process(capsys: pytest.CaptureFixture[str], *args: str) -> subprocess.CompletedProcess[str]:
    """``durable-harness ARGS`` run in this process (faster than a subprocess), as a completed process."""
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(list(args), code, out, err)


def assert_one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode == 1, result
    assert result.stderr.startswith("durable-harness: ") and result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    for fragment in fragments:
        assert fragment in result.stderr


def finished_run(url: str, text: str) -> str:
    with ChatClient(url) as client:
        stream = client.send(text)
        stream.collect()
    return stream.run_id or ""


def test_chat_streams_the_answer_tool_lines_and_asks_for_approval(url: str, kit: LocalKit) -> None:
    SAVED_NOTES.clear()
    result = cli("chat", "--url", url, stdin="What is the weather in Paris?\nSave a note: buy milk\ny\n")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "\x1b[" not in out  # NO_COLOR
    lines = out.splitlines()
    assert lines[0] == f"durable-harness chat · {url} · Ctrl-D to quit"
    assert "The user wants the weather in Paris. I will call get_weather." in lines  # reasoning, not dimmed here
    weather = next(line for line in lines if line.startswith("⚙ get_weather"))
    assert weather.startswith('⚙ get_weather {"city":"Paris"} → {"city":"Paris","tempC":')
    answer = next(line for line in lines if line.startswith("It is "))
    assert answer.endswith("in Paris. (This is the demo model.)")
    assert '⚙ save_note {"title":"buy milk","text":"buy milk"} ⏸ needs approval' in lines
    assert APPROVE_PROMPT in out
    assert '⚙ save_note → {"saved":"buy milk","notes":1}' in lines
    assert any(line.startswith("The tool returned:") for line in lines)
    assert out.count("you> ") == 3 and SAVED_NOTES == {"buy milk": "buy milk"}


def test_chat_denial_with_a_reason_and_eof_at_the_approval_prompt(url: str) -> None:
    SAVED_NOTES.clear()
    result = cli("chat", "--url", url, stdin="Save a note: buy milk\nn not today\nSave a note: later\n")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "⚙ save_note ✗ denied" in lines
    assert "Understood: I did not run save_note. (This is the demo model.)" in lines
    assert any(line.startswith("left unanswered: run wrun_") for line in lines)  # EOF at the second prompt
    assert SAVED_NOTES == {}


def test_runs_show(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    run_id = finished_run(url, "What is the weather in Oslo?")
    result = cli("runs", "show", run_id, "--url", url)
    assert result.returncode == 0, result.stderr
    assert f"run        {run_id}" in result.stdout and "status     finished (stop)" in result.stdout
    as_json = in_process(capsys, "runs", "show", run_id, "--json", "--url", url)
    assert as_json.returncode == 0 and json.loads(as_json.stdout)["runId"] == run_id
    paused = finished_run(url, "Save a note: buy milk")
    shown = in_process(capsys, "runs", "show", paused, "--url", url).stdout
    assert "status     awaiting_tool_approval (tool-calls)" in shown
    assert 'pending    approval-call_demo_0  save_note {"title":"buy milk","text":"buy milk"}' in shown


def test_runs_follow_and_json_from_the_tail(url: str, kit: LocalKit, capsys: pytest.CaptureFixture[str]) -> None:
    run_id = finished_run(url, "What is the weather in Lima?")
    logged = log_chunks(kit.log, run_id)
    result = cli("runs", "follow", run_id, "--url", url)
    assert result.returncode == 0, result.stderr
    assert message_of(logged)["parts"][-1]["text"] in result.stdout.splitlines()
    assert '⚙ get_weather {"city":"Lima"} → ' in result.stdout
    tail = in_process(capsys, "runs", "follow", run_id, "--from", "-3", "--json", "--url", url)
    assert tail.returncode == 0 and [json.loads(line) for line in tail.stdout.splitlines()] == logged[-3:]
    past = in_process(capsys, "runs", "follow", run_id, "--from", "100000", "--url", url)
    assert_one_line_error(past, "HTTP 400 (invalid_start_index)")


def test_runs_follow_resumes_a_live_run_across_responses(tmp_path: Path) -> None:
    # Every response ends after 50 ms without `finish`, so the command has to reconnect while the
    # (slow) run streams; once it has, the run is cancelled and the command ends at its `finish`.
    kit = make_kit(tmp_path / "window", delay=0.1, config=ServiceConfig(stream_window_seconds=0.05))
    with serve(kit.app) as base, ChatClient(base) as client:
        stream = client.send("tell me something")
        next(stream)
        run_id = stream.run_id or ""
        stream.close()
        follow = subprocess.Popen(
            [sys.executable, "-m", "durable_harness", "runs", "follow", run_id, "--url", base],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, encoding="utf-8", env=cli_env(),
        )  # fmt: skip
        assert follow.stdout is not None
        lines = []
        for line in follow.stdout:  # until the first resume notice (or the end of the output)
            lines.append(line.rstrip("\n"))
            if line.startswith("↻ "):
                break
        client.cancel(run_id)
        rest, errors = follow.communicate(timeout=30)
        logged = log_chunks(kit.log, run_id)
    assert follow.returncode == 0, errors
    lines += rest.splitlines()
    notices = [line for line in lines if line.startswith("↻ ")]
    assert notices and all("; resuming at chunk " in line for line in notices), lines
    assert lines[-1] == "[finished: other]"
    text = "".join(line for line in lines[:-1] if not line.startswith("↻ "))
    assert text == message_of(logged)["parts"][-1]["text"]


def test_runs_cancel(tmp_path: Path, url: str, capsys: pytest.CaptureFixture[str]) -> None:
    kit = make_kit(tmp_path / "slow", delay=0.5)
    with serve(kit.app) as base, ChatClient(base) as client:
        stream = client.send("tell me something")
        next(stream)
        result = cli("runs", "cancel", stream.run_id or "", "--url", base)
        assert result.returncode == 0, result.stderr
        assert result.stdout == f"{stream.run_id}: cancelled\n"
        assert stream.collect()[-1].to_dict() == {"type": "finish", "finishReason": "other"}
        again = in_process(capsys, "runs", "cancel", stream.run_id or "", "--url", base)
    assert again.returncode == 0 and again.stdout == f"{stream.run_id}: cancelled\n"  # idempotent
    assert_one_line_error(in_process(capsys, "runs", "cancel", "wrun_" + "0" * 26, "--url", url), "HTTP 404")


@pytest.fixture(scope="module")
def auth_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    digest = hashlib.sha256(b"cli-token").hexdigest()
    kit = make_kit(tmp_path_factory.mktemp("auth"), authenticator=TokenAuth.from_entries(f"alice:{digest}"))
    with serve(kit.app) as base:
        yield base


def test_401_is_a_one_line_error_and_the_token_works(
    auth_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    result = cli("chat", "--url", auth_url, stdin="hello\n")
    assert_one_line_error(result, "HTTP 401 (unauthorized)", "--token")
    assert_one_line_error(in_process(capsys, "runs", "show", "wrun_" + "0" * 26, "--url", auth_url), "HTTP 401")
    monkeypatch.setattr("sys.stdin", io.StringIO("hello\n"))
    ok = in_process(capsys, "chat", "--url", auth_url, "--token", "cli-token")
    assert ok.returncode == 0 and 'You said: "hello".' in ok.stdout


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_bad_urls_are_one_line_errors(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    assert_one_line_error(cli("chat", "--url", closed, stdin="hi\n"), f"cannot connect to {closed}")
    assert_one_line_error(in_process(capsys, "chat", "--url", "not-a-url"), "invalid URL 'not-a-url'")
    assert_one_line_error(in_process(capsys, "runs", "follow", "wrun_" + "0" * 26, "--url", closed), "cannot connect")
    monkeypatch.setenv("CHAT_URL", "ftp://example.com")
    assert_one_line_error(in_process(capsys, "runs", "show", "x"), "invalid URL 'ftp://example.com'")


@pytest.mark.parametrize(
    "args", [["runs"], ["runs", "follow"], ["runs", "follow", "wrun_x", "--from", "x"], ["chat", "--nope"], ["nope"]]
)
def test_usage_errors_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(args)
    assert caught.value.code == 2 and "usage: durable-harness" in capsys.readouterr().err


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    packaged = version("durable-harness")  # the installed distribution's (pyproject reads __version__)
    result = in_process(capsys, "--version")
    assert result.returncode == 0 and result.stdout == f"durable-harness {packaged}\n"


def test_the_client_commands_default_to_the_servers_port(
    url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = finished_run(url, "What is the weather in Paris?")
    monkeypatch.delenv("CHAT_URL", raising=False)
    monkeypatch.setenv("PORT", url.rsplit(":", 1)[1])  # as `PORT=... make dev` serves it
    shown = in_process(capsys, "runs", "show", run_id)
    assert shown.returncode == 0 and f"{run_id}" in shown.stdout and "finished" in shown.stdout
    monkeypatch.setenv("CHAT_URL", url.replace("127.0.0.1", "localhost"))  # CHAT_URL wins over PORT
    assert in_process(capsys, "runs", "show", run_id).returncode == 0


def test_a_bad_model_id_is_one_line(tmp_path: Path) -> None:
    result = cli("serve", "--data-dir", str(tmp_path / "data"), "--port", str(free_port()), env={"MODEL_ID": "nope"})
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("cannot build agent 'my_agent:build_agent': unknown model spec 'nope'")
