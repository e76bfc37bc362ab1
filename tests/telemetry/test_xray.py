"""X-Ray subsegments of a run with tools, through Powertools' Tracer and the real X-Ray SDK recorder.

What is faked: only the emitter. The X-Ray SDK's ``AWSXRayRecorder`` sends finished segments to
the daemon over UDP; here its emitter keeps the documents it would send (the same JSON) in memory.
The recorder, its segment and subsegment models, its streaming of finished subsegments and
Powertools' ``Tracer`` (given that recorder as its provider) are the real ones.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from aws_lambda_powertools import Tracer
from aws_xray_sdk import global_sdk_config  # type: ignore[import-untyped]
from aws_xray_sdk.core.context import Context  # type: ignore[import-untyped]
from aws_xray_sdk.core.recorder import AWSXRayRecorder  # type: ignore[import-untyped]
from durable_harness.telemetry.xray import NAMESPACE, XRayExporter

from tests.telemetry.support import PRIVATE, SCENARIOS, run_scenario, tool_calls_of


class MemoryEmitter:
    """The emitter interface of the X-Ray SDK; keeps each document instead of sending it to the daemon."""

    def __init__(self) -> None:
        self.documents: list[dict[str, Any]] = []

    def send_entity(self, entity: Any) -> None:
        self.documents.append(json.loads(entity.serialize()))

    def set_daemon_address(self, address: str | None) -> None:
        """No daemon."""


@pytest.fixture
def xray() -> Iterator[tuple[Tracer, AWSXRayRecorder, MemoryEmitter]]:
    enabled = global_sdk_config.sdk_enabled()
    global_sdk_config.set_sdk_enabled(True)  # a disabled Tracer elsewhere in the process turns the SDK off
    emitter = MemoryEmitter()
    recorder = AWSXRayRecorder()
    recorder.configure(emitter=emitter, sampling=False, context=Context(), streaming_threshold=0)
    tracer = Tracer(service="durable-harness-test", provider=recorder, disabled=False, auto_patch=False)
    yield tracer, recorder, emitter
    Tracer._reset_config()  # Tracer's configuration is shared by every instance
    global_sdk_config.set_sdk_enabled(enabled)


def subsegments(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every subsegment sent, nested or streamed on its own, each with its ``parent_id``."""
    found: list[dict[str, Any]] = []

    def walk(entity: dict[str, Any], parent: str | None) -> None:
        for sub in entity.get("subsegments", []):
            found.append({**sub, "parent_id": sub.get("parent_id", entity["id"])})
            walk(sub, sub["id"])

    for document in documents:
        if document.get("type") == "subsegment":
            found.append(document)
        walk(document, document.get("parent_id"))
    return found


async def test_a_run_with_tools_becomes_nested_subsegments_of_the_handlers_segment(
    xray: tuple[Tracer, AWSXRayRecorder, MemoryEmitter],
) -> None:
    tracer, recorder, emitter = xray
    segment = recorder.begin_segment("slice-function")  # in Lambda: the function's (facade) segment
    handler = recorder.begin_subsegment("## handler")  # what capture_lambda_handler opens
    chunks, state = await run_scenario(SCENARIOS[0], [XRayExporter(tracer)])
    recorder.end_subsegment()
    recorder.end_segment()

    subs = subsegments(emitter.documents)
    by_id = {s["id"]: s for s in subs}
    assert all(s["trace_id"] == segment.trace_id for s in emitter.documents)
    slices = [s for s in subs if s["name"].startswith("invoke_agent ")]
    assert len(slices) == state.slices >= 2
    assert all(s["parent_id"] == handler.id for s in slices)
    for s in slices:
        assert s["annotations"]["run_id"] == state.run_id and s["annotations"]["model"] == "scripted"
    assert [s["annotations"]["slice"] for s in sorted(slices, key=lambda s: s["start_time"])] == list(
        range(1, state.slices + 1)
    )
    last = max(slices, key=lambda s: s["start_time"])["metadata"][NAMESPACE]
    assert last["durable_harness.run.status"] == "awaiting_tool_approval"
    assert last["durable_harness.approvals.waiting"] == 1

    steps = [s for s in subs if s["name"] == "step"]
    assert steps and all(by_id[s["parent_id"]]["name"].startswith("invoke_agent ") for s in steps)
    models = [s for s in subs if s["name"].startswith("chat ")]
    assert len(models) == 2 and all(by_id[m["parent_id"]]["name"] == "step" for m in models)
    assert [m["metadata"][NAMESPACE]["gen_ai.usage.input_tokens"] for m in models] == [10, 10]
    tools = {t["metadata"][NAMESPACE]["gen_ai.tool.call.id"]: t for t in subs if t["name"].startswith("execute_tool ")}
    assert {k: v["name"].removeprefix("execute_tool ") for k, v in tools.items()} == tool_calls_of(chunks)
    assert tools["c2"].get("fault") is True and tools["c2"]["metadata"][NAMESPACE]["error.type"] == "tool_error"
    assert "fault" not in tools["c1"]
    # The recorded times, not the time of export: each subsegment lies inside its parent.
    for sub in subs:
        parent = by_id.get(sub["parent_id"])
        if parent is not None:
            assert parent["start_time"] <= sub["start_time"] <= sub["end_time"] <= parent["end_time"], sub["name"]
    assert PRIVATE not in json.dumps(emitter.documents)


async def test_without_a_segment_nothing_is_written_and_the_run_goes_on(
    xray: tuple[Tracer, AWSXRayRecorder, MemoryEmitter],
) -> None:
    tracer, _, emitter = xray
    _, state = await run_scenario(SCENARIOS[0], [XRayExporter(tracer)], slice_seconds=None)
    assert state.status == "awaiting_tool_approval" and emitter.documents == []
