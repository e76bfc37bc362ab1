"""The deployed stack under moto for ``deployed_wiring.py`` (not a benchmark itself).

* :func:`build_agent`: the agent the stack's functions load (``AGENT=_deployed:build_agent``): a
  paced model that, by the first user message, streams one text step (``lat:<tag>``, for latency)
  or a 10-step tool-calling run (``cost``);
* :class:`Metered`: the template deployed into moto (``tests/deploy/stack.py``), every AWS request
  of the functions' clients counted and labelled (which function, inside which chunk-log append),
  slice invocations timed, chunk-log appends (flushes) recorded;
* :func:`build_finished_run`: a finished run of ``n`` chunks written straight into moto, in the
  layout of whichever chunk log the tree has (this script also measures the previous tree);
* :func:`is_log_request`, :func:`is_seal_request`, :func:`by_op`: which requests are the chunk log's
  (and which of them seal it into S3), and a count by kind;
* :func:`calibrate`: deltas per step for a cost run of an exact number of chunks.

Works against the current tree and the baseline tree alike: it only uses what both have.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

from _common import RequestMeter, item_kind

EMITTED: dict[str, float] = {}
"""``perf_counter()`` when the model emitted each latency delta, by ``<tag>:<i>``."""


@dataclass
class Settings:
    """What the paced model does (set by the script before the stack loads the agent)."""

    deltas: int = 100
    interval: float = 0.01
    first: float = 0.2
    """The latency turns' time to first token (a real model's is longer)."""
    steps: int = 10
    per_step: list[int] = field(default_factory=lambda: [185] * 10)
    rate: float = 100.0
    ttft: float = 0.2


SETTINGS = Settings()


def build_agent() -> Any:
    """The agent of the benchmark stack (see the module docstring)."""
    from durable_harness import Tool, ToolLoopAgent, step_count_is
    from durable_harness.models.base import finish
    from durable_harness.models.scripted import FunctionModel
    from durable_harness.protocol import harness_parts as hp

    s = SETTINGS

    async def latency(tag: str) -> AsyncIterator[Any]:
        await asyncio.sleep(s.first)
        yield hp.TextStartPart(id="t")  # with the first token, as providers send them
        for i in range(s.deltas):
            if i:
                await asyncio.sleep(s.interval)
            EMITTED[f"{tag}:{i}"] = time.perf_counter()
            yield hp.TextDeltaPart(id="t", delta=f"[{tag}:{i}]")
        yield hp.TextEndPart(id="t")
        yield finish("stop")

    async def cost_step(index: int) -> AsyncIterator[Any]:
        await asyncio.sleep(s.ttft)
        yield hp.TextStartPart(id=f"t{index}")
        for i in range(s.per_step[index]):
            yield hp.TextDeltaPart(id=f"t{index}", delta=f" w{i}")
            await asyncio.sleep(1 / s.rate)
        yield hp.TextEndPart(id=f"t{index}")
        if index >= s.steps - 1:
            yield finish("stop", input_tokens=1000, output_tokens=s.per_step[index])
            return
        call_id, raw = f"call_{index:03d}", json.dumps({"query": f"question {index}"}, separators=(",", ":"))
        yield hp.ToolInputStartPart(id=call_id, tool_name="lookup")
        yield hp.ToolInputDeltaPart(id=call_id, delta=raw)
        yield hp.ToolInputEndPart(id=call_id)
        yield hp.ToolCallPart(tool_call_id=call_id, tool_name="lookup", input=raw)
        yield finish("tool-calls", input_tokens=1000, output_tokens=s.per_step[index])

    def step(request: Any, index: int) -> AsyncIterator[Any]:
        text = request.messages[0].content[0].text
        return latency(text) if text.startswith("lat:") else cost_step(index)

    async def lookup(args: dict[str, Any]) -> dict[str, Any]:
        return {"query": args["query"], "answer": "x" * 140, "source": "bench"}

    tool = Tool(
        name="lookup",
        description="Look something up.",
        input_schema={"type": "object", "properties": {"query": {"type": "string"}}},
        execute=lookup,
    )
    return ToolLoopAgent(model=FunctionModel(step), tools=[tool], stop_when=[step_count_is(s.steps)])


def chunk_log_class() -> type:
    """The deployed chunk log's class in this tree."""
    import durable_harness.aws as aws

    found: type = getattr(aws, "DynamoChunkLog", None) or aws.S3ChunkLog
    return found


class Metered:
    """The template in moto with its functions' AWS requests metered (see the module docstring)."""

    def __init__(self, overrides: dict[str, str]) -> None:
        from tests.deploy.iam import ACTOR
        from tests.deploy.stack import MotoStack

        self.stack = MotoStack(overrides)
        self.actor = ACTOR
        self.local = threading.local()
        self.meter = RequestMeter(label=self._label)
        self.flushes: list[tuple[float, int]] = []  # (time, chunks) of each non-empty append
        self.invocations: list[tuple[str, float]] = []  # (function, seconds)
        self._exit = ExitStack()

    def __enter__(self) -> Metered:
        import durable_harness.aws.runtime as runtime

        self._exit.enter_context(self.stack.deployed())
        made = runtime.client_for

        def client_for(service: str, **kwargs: Any) -> Any:
            client = made(service, **kwargs)
            if not getattr(client, "_bench_metered", False):
                self.meter.attach(client)
                client._bench_metered = True
            return client

        self._exit.enter_context(mock.patch.object(runtime, "client_for", client_for))
        cls = chunk_log_class()
        append = cls.append
        metered = self

        def counted_append(log: Any, run_id: str, start: int, chunks: Any, epoch: int) -> int:
            if chunks:
                metered.flushes.append((time.monotonic(), len(chunks)))
            metered.local.append = True
            try:
                return int(append(log, run_id, start, chunks, epoch))
            finally:
                metered.local.append = False

        self._exit.enter_context(mock.patch.object(cls, "append", counted_append))
        invoke = self.stack._invoke_in_process

        def timed(fn: Any, *args: Any) -> bytes:
            began = time.monotonic()
            try:
                return bytes(invoke(fn, *args))
            finally:
                self.invocations.append((self.stack.by_name[fn.function_name].logical_id, time.monotonic() - began))

        self.stack._invoke_in_process = timed  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        self._exit.close()

    def _label(self) -> str:
        actor = self.actor.get() or "worker"
        return f"{actor}|append" if getattr(self.local, "append", False) else actor

    def chat_app(self) -> Any:
        """A fresh chat app, as a new chat function container builds it, whose calls are labelled."""
        import os

        from tests.deploy.chat import load_chat_app

        env = self.stack.functions["ChatFunction"].env
        with mock.patch.dict(os.environ, env):
            inner = load_chat_app()
        actor = self.actor

        async def app(scope: Any, receive: Any, send: Any) -> None:
            actor.set("ChatFunction")  # this request's task (and its worker threads) only
            await inner(scope, receive, send)

        return app

    def transitions(self, run_id: str) -> int:
        """State transitions of the run's executions (what Step Functions Standard bills)."""
        executions = self.stack.wait_for_executions(run_id, timeout=60)
        return sum(
            1 for e in executions for h in self.stack.history(e["executionArn"]) if h["type"].endswith("StateEntered")
        )


def build_finished_run(metered: Metered, run_id: str, n: int, state_bytes: int, principal: str) -> None:
    """A finished run of ``n`` chunks (10 per append) and a checkpoint of about ``state_bytes``."""
    from durable_harness.messages import AssistantMessage, TextPart, UserMessage
    from durable_harness.ports import StoredRun
    from durable_harness.runner.state import RunState, StreamContext

    stack = metered.stack
    table = stack.resolver.physical["RunsTable"]
    bucket = stack.resolver.physical["ChunkBucket"]
    chunks = [f'{{"type":"text-delta","id":"t0","delta":" word{i}"}}' for i in range(n - 1)]
    chunks.append('{"type":"finish","finishReason":"stop"}')
    history: list[Any] = [UserMessage(content=[TextPart(text="Go.")])]
    history += [AssistantMessage(content=[TextPart(text="x" * 1000)]) for _ in range(max(1, state_bytes // 1100))]
    state = RunState(run_id=run_id, session_id="s", message_id="m", principal=principal, status="finished",
                     turn={"messages": [m.model_dump(mode="json") for m in history]},
                     stream=StreamContext(chunk_count=n))  # fmt: skip
    from durable_harness.aws import DynamoCheckpointStore

    store = DynamoCheckpointStore(table, client=stack.client("dynamodb"), s3_client=stack.client("s3"), bucket=bucket)
    store.create(StoredRun(run_id=run_id, state=state.model_dump_json(by_alias=True), status="finished",
                            principal=principal))  # fmt: skip
    from _common import log_generation, put_log_direct  # the items of the incarnation the record's creation made

    put_log_direct(table, run_id, chunks, 10, gen=log_generation(stack.client("dynamodb"), table, run_id))


def is_log_request(request: Any) -> bool:
    """A request of the chunk log (its items, index, head or objects), as opposed to run records."""
    if request.service == "dynamodb":
        return request.op == "Query" or request.item == "log" or request.item.startswith("c#")
    if request.service == "s3":
        return request.op == "ListObjectsV2" or "/seg/" in request.item or "/spill/" in request.item
    return False


def is_seal_request(request: Any) -> bool:
    """A request that seals the chunk log into S3: a segment's PUT, or its record in the segment
    index (the previous tree has neither: its per-append objects have no ``.ndjson`` suffix)."""
    if request.service == "s3":
        return request.op == "PutObject" and "/seg/" in request.item and request.item.endswith(".ndjson")
    return request.service == "dynamodb" and request.op == "UpdateItem" and request.item.endswith("#~")


def by_op(requests: list[Any]) -> dict[str, int]:
    """Requests by operation and item kind (run record, chunk-log item or head, S3 object kind)."""
    counted: dict[str, int] = {}
    for r in requests:
        key = f"{r.op} {item_kind(r)}".strip()
        counted[key] = counted.get(key, 0) + 1
    return dict(sorted(counted.items()))


def calibrate(steps: int, total: int) -> list[int]:
    """Deltas per step so that the cost run's log holds exactly ``total`` chunks."""
    from durable_harness.messages import TextPart, UserMessage
    from durable_harness.runner.runner import Runner
    from durable_harness.storage.memory import MemoryCheckpointStore, MemoryChunkLog

    async def count(deltas: int) -> int:
        SETTINGS.steps, SETTINGS.per_step, SETTINGS.rate, SETTINGS.ttft = steps, [deltas] * steps, 1e9, 0.0
        log = MemoryChunkLog()
        runner = Runner(build_agent(), MemoryCheckpointStore(), log)
        run_id = runner.create_run([UserMessage(content=[TextPart(text="cost")])]).run_id
        await runner.run(run_id)
        return log.count(run_id)

    overhead = asyncio.run(count(1)) - steps
    per, extra = divmod(total - overhead, steps)
    return [per] * (steps - 1) + [per + extra]
