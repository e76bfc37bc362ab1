"""The agent through the HTTP API: call options, run results (and ``generate()``), cancel and ``on_abort``.

Real HTTP on loopback against the local kit; the model is scripted.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest
from durable_harness import Agent, ApprovalSecret, CallOptions, Tool, ToolContext
from durable_harness.models.base import ModelRequest
from durable_harness.models.scripted import FunctionModel, ScriptedModel, text_step, tool_calls_step
from durable_harness.protocol import harness_parts as hp
from durable_harness.server.local import build_local_kit
from pydantic import BaseModel, ConfigDict

from tests.support import message_of, parse_sse_body, serve, user_message

# --- call options -----------------------------------------------------------------------------------


class Options(BaseModel):
    """What the client may choose per request."""

    model_config = ConfigDict(extra="forbid")
    locale: Literal["en", "fr"] = "en"
    tier: Literal["fast", "best"] = "fast"


class Seen:
    """What the hooks and the tool saw."""

    def __init__(self) -> None:
        self.calls: list[Any] = []
        self.steps: list[Any] = []
        self.tool: list[Any] = []


def options_agent(seen: Seen, *, call_options: type[BaseModel] | None = Options) -> Agent:
    def prepare_call(options: CallOptions) -> CallOptions:
        seen.calls.append(options.call_options)
        if isinstance(options.call_options, Options):
            options.instructions = f"Answer in {options.call_options.locale}."
        return options

    def prepare_step(options: CallOptions) -> None:
        seen.steps.append(options.call_options)

    def lookup(input: Any, context: ToolContext) -> str:
        seen.tool.append(context.runtime_context)
        return "found"

    model = ScriptedModel([tool_calls_step(("c1", "lookup", {})), text_step("Voilà.")])
    return Agent(
        model=model, tools=[Tool(name="lookup", execute=lookup)], call_options=call_options,
        prepare_call=prepare_call, prepare_step=prepare_step,
    )  # fmt: skip


def post(url: str, body: Any) -> httpx.Response:
    return httpx.post(f"{url}/api/chat", content=json.dumps(body), timeout=10)


@pytest.mark.parametrize("slice_seconds", [600.0, 0.0])
def test_call_options_from_the_body_reach_the_hooks_validated(tmp_path: Path, slice_seconds: float) -> None:
    seen = Seen()
    kit = build_local_kit(options_agent(seen), tmp_path / "data", slice_seconds=slice_seconds, static_dir=None)
    with serve(kit.app) as url:
        response = post(url, {"messages": [user_message("bonjour")], "locale": "fr", "tier": "best"})
        assert response.status_code == 200 and parse_sse_body(response.content)[-1]["type"] == "finish"
        run_id = response.headers["x-workflow-run-id"]
    assert seen.calls == [Options(locale="fr", tier="best")]
    # Every step sees them, also when each step runs in its own slice (read back from the checkpoint).
    assert seen.steps == [Options(locale="fr", tier="best")] * 2
    assert kit.runner.load(run_id).call_options == {"locale": "fr", "tier": "best"}
    assert kit.runner.load(run_id).slices >= (2 if slice_seconds == 0 else 1)  # a slice per step


def test_an_invalid_call_option_is_a_400_naming_it_and_starts_nothing(tmp_path: Path) -> None:
    seen = Seen()
    kit = build_local_kit(options_agent(seen), tmp_path / "data", static_dir=None)
    with serve(kit.app) as url:
        bad = post(url, {"messages": [user_message("hi")], "locale": "de"})
        unknown = post(url, {"messages": [user_message("hi")], "colour": "red"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_call_options"
    assert "'locale'" in bad.json()["error"]["message"] and "'en' or 'fr'" in bad.json()["error"]["message"]
    assert unknown.status_code == 400 and "'colour'" in unknown.json()["error"]["message"]
    assert seen.calls == [] and seen.steps == []


def test_without_a_call_options_model_extra_fields_never_reach_the_agent(tmp_path: Path) -> None:
    seen = Seen()
    kit = build_local_kit(options_agent(seen, call_options=None), tmp_path / "data", static_dir=None)
    with serve(kit.app) as url:
        assert post(url, {"messages": [user_message("hi")], "locale": "xx", "admin": True}).status_code == 200
    assert seen.calls == [None] and seen.steps == [None, None]


# --- results --------------------------------------------------------------------------------------


def research_model() -> ScriptedModel:
    """Three steps: two tool calls (one fails), another call, then the answer."""
    return ScriptedModel(
        [
            tool_calls_step(("c1", "lookup", {"q": "alpha"}), ("c2", "lookup", {"q": "boom"}), text="Looking."),
            tool_calls_step(("c3", "lookup", {"q": "beta"})),
            text_step("Alpha and beta are in stock; the other lookup failed."),
        ]
    )


def lookup(input: Any) -> dict[str, str]:
    if input["q"] == "boom":
        raise RuntimeError("the catalogue is down")
    return {"item": input["q"], "status": "in stock"}


def research_agent() -> Agent:
    return Agent(model=research_model(), tools=[Tool(name="lookup", execute=lookup)])


def test_the_result_endpoint_and_generate_agree_with_the_streamed_message(tmp_path: Path) -> None:
    kit = build_local_kit(research_agent(), tmp_path / "data", slice_seconds=0, static_dir=None)
    with serve(kit.app) as url:
        response = post(url, {"messages": [user_message("what is in stock?")]})
        run_id = response.headers["x-workflow-run-id"]
        result = httpx.get(f"{url}/api/runs/{run_id}/result").json()
        status = httpx.get(f"{url}/api/runs/{run_id}").json()
    message = message_of(parse_sse_body(response.content))

    # The result says what the client saw: the final text, every tool call with its input and outcome.
    assert result["text"] == message["parts"][-1]["text"]
    tools = [p for p in message["parts"] if p["type"].startswith("tool-")]
    calls = [c for step in result["steps"] for c in step["toolCalls"]]
    assert [(c["toolCallId"], c["input"]) for c in calls] == [(p["toolCallId"], p["input"]) for p in tools]
    outcomes = {r["toolCallId"]: r["output"] for step in result["steps"] for r in step["toolResults"]}
    for part in tools:
        if part["state"] == "output-available":
            assert outcomes[part["toolCallId"]] == {"type": "json", "value": part["output"]}
        else:
            assert outcomes[part["toolCallId"]] == {"type": "error-text", "value": part["errorText"]}
    assert [s["finishReason"] for s in result["steps"]] == ["tool-calls", "tool-calls", "stop"]
    assert result["finishReason"] == status["finishReason"] == "stop"
    usage = result["totalUsage"]
    assert (usage["inputTokens"], usage["outputTokens"]) == (
        status["usage"]["inputTokens"], status["usage"]["outputTokens"],
    )  # fmt: skip
    assert usage["inputTokens"] == sum(s["usage"]["inputTokens"] for s in result["steps"])
    assert [m["role"] for m in result["responseMessages"]] == ["assistant", "tool", "assistant", "tool", "assistant"]

    # generate() runs the same turn in memory and returns the same result.
    generated = asyncio.run(research_agent().generate("what is in stock?"))
    assert generated.to_dict() == {k: v for k, v in result.items() if k not in ("runId", "status")}
    assert generated.text == result["text"] and generated.steps[0].tool_calls[0].tool_call_id == "c1"


def test_a_paused_result_lists_signed_requests_and_generate_continues_from_it() -> None:
    from durable_harness.messages import ToolApprovalResponsePart, ToolMessage

    ran: list[str] = []
    model = ScriptedModel([tool_calls_step(("c1", "wipe", {"what": "cache"})), text_step("Wiped.")])
    wipe = Tool(name="wipe", execute=lambda input: ran.append(input["what"]) or "ok", needs_approval=True)
    agent = Agent(model=model, tools=[wipe], approval_secret=ApprovalSecret.from_value("k" * 32))
    paused = asyncio.run(agent.generate("wipe the cache"))
    assert ran == [] and paused.pending_approvals[0]["approvalId"] == "approval-c1"
    request = paused.response_messages[0].content[-1]
    assert request.signature == agent.sign_approval("approval-c1", "c1", "wipe", {"what": "cache"})  # type: ignore[union-attr]
    answer = ToolMessage(content=[ToolApprovalResponsePart(approval_id="approval-c1", approved=True)])
    history = [*model.requests[0].messages, *paused.response_messages, answer]
    before = [m.to_dict() for m in history]
    done = asyncio.run(agent.generate(messages=history))
    assert ran == ["cache"] and done.text == "Wiped." and done.pending_approvals == []
    assert [m.to_dict() for m in history] == before  # the caller's messages are left as they were
    assert done.response_messages[0].to_dict()["content"][0]["toolCallId"] == "c1"  # the approved call's result


def test_a_result_is_409_while_the_run_goes_on(tmp_path: Path) -> None:
    gate = threading.Event()

    async def waits(request: ModelRequest, step: int) -> Any:
        yield hp.TextStartPart(id="t0")
        while not gate.is_set():
            await asyncio.sleep(0.01)
        for part in text_step("done")[1:]:
            yield part

    kit = build_local_kit(Agent(model=FunctionModel(waits)), tmp_path / "data", static_dir=None)
    with (
        serve(kit.app) as url,
        httpx.stream("POST", f"{url}/api/chat", content=json.dumps({"messages": [user_message("hi")]})) as live,
    ):
        run_id = live.headers["x-workflow-run-id"]
        early = httpx.get(f"{url}/api/runs/{run_id}/result")
        gate.set()
        live.read()
        late = httpx.get(f"{url}/api/runs/{run_id}/result")
    assert early.status_code == 409 and early.json()["error"]["code"] == "run_in_progress"
    assert late.status_code == 200 and late.json()["text"] == "done"


# --- cancel ----------------------------------------------------------------------------------------


@pytest.fixture
def slow_run(tmp_path: Path) -> Iterator[tuple[str, list[Any]]]:
    aborted: list[Any] = []
    never = asyncio.Event()

    async def second_step_hangs(request: ModelRequest, step: int) -> Any:
        if step == 0:
            for part in tool_calls_step(("c1", "lookup", {"q": "alpha"})):
                yield part
            return
        yield hp.TextStartPart(id="t")
        await never.wait()

    agent = Agent(
        model=FunctionModel(second_step_hangs), tools=[Tool(name="lookup", execute=lookup)],
        on_abort=lambda steps: aborted.append([s.number for s in steps]),
    )  # fmt: skip
    kit = build_local_kit(agent, tmp_path / "data", static_dir=None)
    with serve(kit.app) as url:
        yield url, aborted


def test_a_cancel_through_the_api_calls_on_abort_once_with_the_finished_steps(
    slow_run: tuple[str, list[Any]],
) -> None:
    url, aborted = slow_run
    with httpx.stream("POST", f"{url}/api/chat", content=json.dumps({"messages": [user_message("go")]})) as live:
        run_id = live.headers["x-workflow-run-id"]
        for raw in live.iter_raw():
            if b'"text-start"' in raw:
                break  # the second step is streaming
        cancelled = httpx.post(f"{url}/api/runs/{run_id}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert aborted == [[0]]  # the local task's cancellation is not a second abort
    result = httpx.get(f"{url}/api/runs/{run_id}/result").json()
    assert result["status"] == "cancelled" and [s["stepNumber"] for s in result["steps"]] == [0]


def test_a_server_shutdown_is_not_an_abort(tmp_path: Path) -> None:
    aborted: list[Any] = []
    entered = threading.Event()

    async def hangs(request: ModelRequest, step: int) -> Any:
        entered.set()
        yield hp.TextStartPart(id="t")
        await asyncio.Event().wait()

    kit = build_local_kit(Agent(model=FunctionModel(hangs), on_abort=aborted.append), tmp_path / "d", static_dir=None)
    body = json.dumps({"messages": [user_message("go")]})
    with serve(kit.app) as url, httpx.stream("POST", f"{url}/api/chat", content=body):
        assert entered.wait(10)
    # The server stopped with the run in flight: the run resumes later; nothing was aborted.
    assert aborted == []
