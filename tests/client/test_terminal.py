"""The terminal renderer in-process: compact lines, colours only when allowed, the spinner's erasing."""

from __future__ import annotations

import io
import threading
from pathlib import Path
from typing import Any

import pytest
from durable_harness.client.render import Renderer, Spinner, Style, compact, use_color
from durable_harness.client.terminal import Terminal, format_status, parse_approval, run_chat
from durable_harness.protocol.ui_chunks import UIChunkModel, parse_ui_chunk

from tests.client.conftest import make_kit
from tests.support import serve


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


PLAIN = Style(False)


def render(chunks: list[dict[str, Any]], *, style: Style = PLAIN) -> str:
    out = io.StringIO()
    renderer = Renderer(out, style)
    for chunk in chunks:
        renderer.chunk(parse_ui_chunk(chunk))
    renderer.end_line()
    return out.getvalue()


def test_a_tool_turn_is_compact() -> None:
    out = render([
        {"type": "start"}, {"type": "start-step"},
        {"type": "reasoning-start", "id": "r"}, {"type": "reasoning-delta", "id": "r", "delta": "Hmm."},
        {"type": "reasoning-end", "id": "r"},
        {"type": "tool-input-start", "toolCallId": "c1", "toolName": "get_weather"},
        {"type": "tool-input-available", "toolCallId": "c1", "toolName": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool-output-available", "toolCallId": "c1", "output": {"tempC": 21, "notes": "x" * 200}},
        {"type": "tool-input-available", "toolCallId": "c2", "toolName": "boom", "input": {}},
        {"type": "tool-output-error", "toolCallId": "c2", "errorText": "it broke"},
        {"type": "finish-step"}, {"type": "start-step"},
        {"type": "text-start", "id": "t"}, {"type": "text-delta", "id": "t", "delta": "It is"},
        {"type": "text-delta", "id": "t", "delta": " 21 °C."}, {"type": "text-end", "id": "t"},
        {"type": "finish-step"}, {"type": "finish", "finishReason": "length"},
    ])  # fmt: skip
    lines = out.splitlines()
    assert lines[0] == "Hmm."
    assert lines[1].startswith('⚙ get_weather {"city":"Paris"} → {"tempC":21,"notes":"xxx') and lines[1].endswith("…")
    assert len(lines[1]) == len('⚙ get_weather {"city":"Paris"} → ') + 100
    assert lines[2:] == ["⚙ boom {} ✗ it broke", "It is 21 °C.", "[finished: length]"]


def test_colours_and_errors() -> None:
    out = render(
        [{"type": "reasoning-delta", "id": "r", "delta": "think"}, {"type": "error", "errorText": "bad"}],
        style=Style(True),
    )
    assert out == "\x1b[2mthink\x1b[0m\n\x1b[31merror: bad\x1b[0m\n"
    assert use_color(FakeTTY(), {}) and not use_color(FakeTTY(), {"NO_COLOR": "1"})
    assert not use_color(io.StringIO(), {}) and not use_color(FakeTTY(), {"TERM": "dumb"})


def test_the_spinner_is_erased_before_any_output() -> None:
    out = FakeTTY()
    lock = threading.Lock()
    spinner = Spinner(out, lock, Style(False), interval=3600)  # its thread never draws by itself
    renderer = Renderer(out, Style(False))
    renderer.spinner = spinner
    spinner.lock = renderer.lock
    renderer.wait("thinking")
    spinner.draw()
    spinner.draw()
    renderer.write("Hi")
    assert out.getvalue() == "\r⠋ thinking…\x1b[K\r⠙ thinking…\x1b[K\r\x1b[KHi"
    renderer.chunk(parse_ui_chunk({"type": "tool-input-available", "toolCallId": "c", "toolName": "t", "input": 1}))
    renderer.wait()  # inline, after the open tool line
    spinner.draw()
    spinner.draw()
    renderer.chunk(parse_ui_chunk({"type": "tool-output-available", "toolCallId": "c", "output": 2}))
    assert out.getvalue().endswith("\n⚙ t 1 ⠹\b⠸\b\b  \b\b → 2\n")
    renderer.close()


def test_helpers() -> None:
    assert parse_approval("y") == (True, None) and parse_approval(" YES ") == (True, None)
    assert parse_approval("") == (False, None) and parse_approval("n") == (False, None)
    assert parse_approval("n not today") == (False, "not today") and parse_approval("maybe") == (False, None)
    assert compact({"a": "é"}) == '{"a":"é"}' and compact("x" * 10, 5) == '"xxx…'
    status = {
        "runId": "wrun_1", "status": "awaiting_tool_approval", "finishReason": "tool-calls", "chunkCount": 12,
        "usage": {"inputTokens": 60, "outputTokens": 20},
        "pendingApprovals": [{"approvalId": "approval-c", "toolName": "save_note", "input": {"title": "t"}}],
    }  # fmt: skip
    assert format_status(status).splitlines() == [
        "run        wrun_1",
        "status     awaiting_tool_approval (tool-calls)",
        "chunks     12",
        "usage      60 in, 20 out tokens",
        'pending    approval-c  save_note {"title":"t"}',
    ]


def test_ctrl_c_in_a_turn_cancels_the_run_and_keeps_the_message_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kit = make_kit(tmp_path / "slow", delay=0.05)
    original = Renderer.chunk
    interrupted: list[str] = []

    def chunk(self: Renderer, chunk: UIChunkModel) -> None:
        if chunk.type == "text-delta" and not interrupted:
            interrupted.append("yes")
            raise KeyboardInterrupt  # the user presses Ctrl-C while the reply streams
        original(self, chunk)

    monkeypatch.setattr(Renderer, "chunk", chunk)
    out, err = io.StringIO(), io.StringIO()
    with serve(kit.app) as base:
        term = Terminal(stdin=io.StringIO("tell me something\n"), stdout=out, stderr=err, environ={})
        assert run_chat(base, None, term) == 0, err.getvalue()
    lines = out.getvalue().splitlines()
    stopping = next(line for line in lines if line.startswith("stopping run "))
    run_id = stopping.removeprefix("stopping run ").rstrip("…")
    assert lines[-2:] == ["[finished: other]", "you> "]
    assert kit.store.load(run_id).status == "cancelled"
