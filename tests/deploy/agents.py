"""Agents for the deploy tests, loaded by the real handlers through ``AGENT=tests.deploy.agents:<name>``.

The script is the same for all of them: a step that calls a tool, a second step that calls it
again, and a text answer, so a run takes four slices with ``SliceSeconds=0`` (one step each, plus
the slice that ends the turn). :data:`CONTROL` injects trouble into the second step:

* ``retryable_crashes``: the model streams part of the step, then raises a ``StorageError``
  (a :class:`~durable_harness.errors.RetryableError`) that many times;
* ``sandbox_kills``: the model streams part of the step, then Lambda kills the sandbox (a
  timeout or out of memory; see ``stack.SandboxKilled``) that many times;
* ``fatal``: the model raises an unexpected exception whose message holds a "secret" that must
  never reach the client;
* ``gate``: the step waits until the test opens the gate (to cancel a run mid-slice);
* ``hang`` (with ``gate``): in that function only (a logical id, e.g. ``"ChatFunction"``), the
  step streams part of itself and then waits for the gate: a function that died mid-step. Opened
  later, it goes on like a process that wakes up after it was taken over;
* ``crash_in``: in that function only, the step streams part of itself and then raises an
  unexpected error (a bug the function itself survives).

The handlers run in this process (on moto's Step Functions worker threads), so this module's
state is shared with the test.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

from durable_harness import Agent, CallOptions, ToolContext, tool
from durable_harness.chunks.writer import ChunkWriter
from durable_harness.errors import StorageError
from durable_harness.models.base import ModelRequest, ModelStreamPart
from durable_harness.models.scripted import FunctionModel, text_step, tool_calls_step
from pydantic import BaseModel

from .iam import ACTOR
from .stack import SandboxKilled

SECRET = "hunter2-database-password"
ANSWER = "Alpha and beta are both in stock."


@dataclass
class Control:
    """What the next runs should go through (reset by the ``stack`` fixture)."""

    retryable_crashes: int = 0
    sandbox_kills: int = 0
    fatal: bool = False
    gate: threading.Event | None = None
    hang: str | None = None
    crash_in: str | None = None
    entered_gate: threading.Event = field(default_factory=threading.Event)
    executions: Counter[str] = field(default_factory=Counter)
    model_calls: Counter[int] = field(default_factory=Counter)
    aborted: list[list[int]] = field(default_factory=list)
    """``on_abort`` calls, with the numbers of the steps that had finished."""
    call_options: list[Any] = field(default_factory=list)
    """What ``prepare_call`` got as call options, run after run."""
    hooks: list[str] | None = None
    """When a list: ``await_build`` hands out a signed event URL (``ctx.event_url``) and puts it here."""


CONTROL = Control()


def reset() -> None:
    """Back to a run without trouble."""
    global CONTROL
    CONTROL = Control()


# The slice's chunk writer, so that a step can wait until what it streamed is in the log (a fault
# injected "after those chunks are committed" is then exactly that, not a sleep that hopes so).
# The writer is made in the slice's task before the model runs, so the model's context sees it.
_WRITER: contextvars.ContextVar[ChunkWriter | None] = contextvars.ContextVar("deploy_test_writer", default=None)
_writer_init = ChunkWriter.__init__


def _remember_writer(self: ChunkWriter, *args: Any, **kwargs: Any) -> None:
    _writer_init(self, *args, **kwargs)
    _WRITER.set(self)


ChunkWriter.__init__ = _remember_writer  # type: ignore[method-assign]


async def _committed() -> None:
    """Wait until every chunk the slice has written so far is durable in the log."""
    writer = _WRITER.get()
    assert writer is not None, "no chunk writer in this slice's context"
    await asyncio.wait_for(writer.flush(), 30)


class Item(BaseModel):
    """Input of the ``lookup`` tool."""

    name: str


@tool
def lookup(input: Item) -> dict[str, str]:
    """Look an item up."""
    CONTROL.executions[input.name] += 1
    return {"item": input.name, "status": "in stock"}


async def _second_step() -> AsyncIterator[ModelStreamPart]:
    parts = tool_calls_step(("c2", "lookup", {"name": "beta"}), text="Now beta.")
    if CONTROL.crash_in is not None and ACTOR.get() == CONTROL.crash_in:
        for part in parts[:3]:
            yield part
        await _committed()
        raise RuntimeError("an unexpected error in the middle of a step")
    if CONTROL.hang is not None:
        if ACTOR.get() == CONTROL.hang:
            for part in parts[:3]:  # some of the step reaches the log
                yield part
            await _committed()  # some of the step reached the log
            await _wait_for_gate()
            for part in parts[3:]:
                yield part
            return
    elif CONTROL.gate is not None:
        await _wait_for_gate()
    if CONTROL.fatal:
        raise RuntimeError(f"cannot reach the database with password {SECRET}")
    if CONTROL.retryable_crashes > 0 or CONTROL.sandbox_kills > 0:
        killed = CONTROL.retryable_crashes == 0
        if killed:
            CONTROL.sandbox_kills -= 1
        else:
            CONTROL.retryable_crashes -= 1
        for part in parts[:3]:  # some of the step reaches the log before the crash
            yield part
        await _committed()
        if killed:
            raise SandboxKilled("the sandbox ran out of time mid-step")
        raise StorageError("simulated throttling while streaming")
    for part in parts:
        yield part


async def _wait_for_gate() -> None:
    assert CONTROL.gate is not None
    CONTROL.entered_gate.set()
    deadline = time.monotonic() + 20
    while not CONTROL.gate.is_set() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)


def _script(request: ModelRequest, index: int) -> AsyncIterator[ModelStreamPart]:
    CONTROL.model_calls[index] += 1

    async def play() -> AsyncIterator[ModelStreamPart]:
        if index == 0:
            for part in tool_calls_step(("c1", "lookup", {"name": "alpha"}), text="Let me look."):
                yield part
        elif index == 1:
            async for part in _second_step():
                yield part
        else:
            for part in text_step(ANSWER):
                yield part

    return play()


@tool(needs_approval=True)
def remove(input: Item) -> dict[str, str]:
    """Remove an item (the user must approve every call)."""
    CONTROL.executions[f"remove:{input.name}"] += 1
    return {"removed": input.name}


def _approval_script(request: ModelRequest, index: int) -> list[ModelStreamPart]:
    return tool_calls_step(("c9", "remove", {"name": "gamma"}), text="Removing gamma needs your approval.")


def build_approval_agent() -> Agent:
    """An agent whose first step asks to run a tool that needs approval."""
    return Agent(model=FunctionModel(_approval_script, model_id="deploy-test"), tools=[remove])


class Options(BaseModel):
    """The call options the deploy agent takes (from a chat body or an event's ``callOptions``)."""

    tone: Literal["plain", "brief"] = "plain"


def _prepare_call(options: CallOptions) -> None:
    CONTROL.call_options.append(options.call_options)


def build_agent() -> Agent:
    """The scripted agent of the deploy tests."""
    return Agent(
        model=FunctionModel(_script, model_id="deploy-test"), instructions="Be brief.", tools=[lookup],
        call_options=Options, prepare_call=_prepare_call,
        on_abort=lambda steps: CONTROL.aborted.append([s.number for s in steps]),
    )  # fmt: skip


REFUSED_MESSAGE = (
    "Model access is denied due to IAM user or service role is not authorized to perform the required AWS "
    "Marketplace actions (aws-marketplace:ViewSubscriptions, aws-marketplace:Subscribe) to enable access to this "
    "model. Your AWS Marketplace subscription for this model cannot be completed at this time."
)
"""What Bedrock answers the first call of a third-party model from a role without the Marketplace actions."""


class RefusingBedrock:
    """A ``bedrock-runtime`` client whose every ``converse_stream`` is refused as Bedrock refuses it
    (403 ``AccessDeniedException``, raised as botocore raises it). A stand-in: moto has no
    bedrock-runtime (``converse_stream`` is not implemented) and no Bedrock runs here."""

    def converse_stream(self, **arguments: Any) -> dict[str, Any]:
        """Refuse the call."""
        from botocore.exceptions import ClientError

        response: Any = {
            "Error": {"Code": "AccessDeniedException", "Message": REFUSED_MESSAGE},
            "ResponseMetadata": {"HTTPStatusCode": 403, "HTTPHeaders": {}},
        }
        raise ClientError(response, "ConverseStream")


def build_refused_agent() -> Agent:
    """The demo's tools over an Anthropic model on Bedrock that refuses every call (see :class:`RefusingBedrock`)."""
    from durable_harness.demo import DEMO_TOOLS
    from durable_harness.models.bedrock import BedrockConverseModel

    model = BedrockConverseModel("us.anthropic.claude-sonnet-4-5-20250929-v1:0", client=RefusingBedrock())
    return Agent(model=model, instructions="Be brief.", tools=DEMO_TOOLS)


FAULT_EXECUTIONS: Counter[tuple[str, str]] = Counter()
"""``(the run's first user text, tool input name)`` -> executions, for the fault suite's agent."""
FAULT_RESULTS: dict[tuple[str, str], list[str]] = {}
"""The same key -> the execution marks its executions returned, in order."""
FAULT_REPEATS: list[tuple[str, str]] = []
"""Executions of a tool whose earlier result the run's stored checkpoint already held."""
FAULT_STORED: Any = None
"""Set by the fault suite: the run's first user text -> its stored checkpoint's text ("" if none)."""


@tool(name="lookup")
def counted_lookup(input: Item, context: Any) -> dict[str, str]:
    """Look an item up; each execution counted per run and returning a mark of its own, so that
    an execution whose earlier result the checkpoint already recorded is caught."""
    first = next(m for m in context.messages if getattr(m, "role", "") == "user")
    key = ("".join(getattr(part, "text", "") for part in first.content), input.name)
    marks = FAULT_RESULTS.setdefault(key, [])
    if marks and FAULT_STORED is not None:
        stored = FAULT_STORED(key[0])
        if any(mark in stored for mark in marks):
            FAULT_REPEATS.append(key)
    mark = f"execution-{uuid.uuid4().hex}"
    marks.append(mark)
    FAULT_EXECUTIONS[key] += 1
    return {"item": input.name, "status": "in stock", "execution": mark}


def build_fault_agent() -> Agent:
    """The scripted agent (two tool steps and an answer), its tool executions counted per run."""
    return Agent(model=FunctionModel(_script, model_id="deploy-test"), instructions="Be brief.", tools=[counted_lookup])


class Build(BaseModel):
    """Input of the waiting tools."""

    repo: str


@tool
async def await_build(input: Build, ctx: ToolContext) -> dict[str, Any]:
    """Start a build (a recorded step) and wait for its ``build-done`` event."""

    hook = ctx.event_url("build-done", timeout_seconds=3600) if CONTROL.hooks is not None else None

    def start() -> dict[str, str]:
        CONTROL.executions[f"start:{input.repo}"] += 1
        if CONTROL.hooks is not None and hook is not None:
            CONTROL.hooks.append(hook)  # what the build system would be told
        return {"id": "b-1"}

    build = await ctx.step("start", start)
    event = await ctx.wait_for_event("build-done", timeout_seconds=3600)
    return {"build": build["id"], "status": event["status"]}


@tool
async def nap(input: Build, ctx: ToolContext) -> dict[str, Any]:
    """A recorded step, then a durable sleep of one second."""
    await ctx.step("before", lambda: CONTROL.executions.update([f"nap:{input.repo}"]))
    await ctx.sleep(1)
    return {"slept": input.repo}


def _wait_script(request: ModelRequest, index: int) -> list[ModelStreamPart]:
    if index > 0:
        return text_step("The build is done.")
    name = "nap" if "nap" in str(request.messages[-1]) else "await_build"
    return tool_calls_step(("w1", name, {"repo": "acme"}))


def build_wait_agent() -> Agent:
    """An agent whose first step calls a tool that waits (an event, or a sleep when asked to nap)."""
    return Agent(model=FunctionModel(_wait_script, model_id="deploy-test"), tools=[await_build, nap])
