"""``durable-harness check`` against the moto stack served over real HTTP (``serve_stack.py`` in
its own process, the CLI in another): it passes against the stack as deployed, and fails with the
model's refusal as its reason against a stack whose Bedrock model is refused (issue 22)."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from .cfn import ROOT

TOKEN = "check-token"


@contextmanager
def served_stack(*args: str) -> Iterator[tuple[str, list[str]]]:
    """``serve_stack.py --port 0 ARGS`` running; its URL, and its output lines so far (complete
    once the block is left: the server is stopped with SIGTERM and must report its IAM check)."""
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "deploy" / "serve_stack.py"), "--port", "0", *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=dict(os.environ),
    )  # fmt: skip
    lines: list[str] = []
    arrived: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            arrived.put(line)
        arrived.put(None)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        url = ""
        while not url:
            line = arrived.get(timeout=120)  # deploying the stack into moto takes a few seconds
            assert line is not None, "serve_stack exited before it was ready:\n" + "\n".join(lines)
            if line.startswith("serve_stack: ready on "):
                url = line.split()[-1]
        yield url, lines
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        reader.join(timeout=10)


def check(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``durable-harness check URL ARGS`` as a process."""
    return subprocess.run(
        [sys.executable, "-m", "durable_harness", "check", url, *args], capture_output=True, text=True,
        encoding="utf-8", timeout=300, check=False, env={**os.environ, "PYTHONIOENCODING": "utf-8"},
    )  # fmt: skip


def steps(output: str) -> dict[str, str]:
    """Step name -> its mark (``ok`` / ``FAIL``) from the check's report."""
    return {line.split()[1]: line.split()[0] for line in output.splitlines() if line.split()[:1] in (["ok"], ["FAIL"])}


def test_check_passes_against_the_moto_stack() -> None:
    with served_stack("--token", TOKEN) as (url, lines):
        result = check(url, "--token", TOKEN, "--approval-prompt", "Save a note: durable-harness check")
    assert result.returncode == 0, result.stdout + result.stderr
    assert steps(result.stdout) == dict.fromkeys(
        ["health", "turn", "approval", "resume-middle", "resume-tail", "run-api", "cancel"], "ok"
    ), result.stdout
    turn = next(line for line in result.stdout.splitlines() if line.split()[1] == "turn")
    assert "first chunk " in turn and "per chunk median " in turn and "finish stop" in turn
    assert "approved save_note" in result.stdout
    assert result.stdout.rstrip().endswith("durable-harness check: every step passed") and not result.stderr
    assert any(line.startswith("serve_stack: iam ok") for line in lines), lines  # every call the stack allows


def test_check_fails_at_the_turn_with_the_refusal_advice_against_a_refused_model() -> None:
    with served_stack("--agent", "tests.deploy.agents:build_refused_agent") as (url, _):
        result = check(url)
    assert result.returncode == 1, result.stdout + result.stderr
    assert steps(result.stdout) == {"health": "ok", "turn": "FAIL"}, result.stdout
    [reason] = result.stderr.splitlines()
    assert reason.startswith("durable-harness check: failed at turn: the run streamed an error: "), reason
    assert "Bedrock refused the model call" in reason and "Marketplace" in reason
    assert "docs/deploying.md, Model access" in reason
    assert "Traceback" not in result.stdout + result.stderr
