"""Powertools Metrics per agent and model for runs with tools: the EMF documents Powertools prints.

Nothing is faked: Powertools' ``EphemeralMetrics`` prints each EMF document to stdout (as
CloudWatch Logs receives it in Lambda); the test reads stdout.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from durable_harness.telemetry.metrics import DIMENSIONS, METRIC_NAMES, MetricsExporter

from tests.telemetry.support import PRIVATE, SCENARIOS, Scenario, run_scenario

NAMESPACE = "DurableHarnessTest"


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.setenv("STEP_SECONDS", "0.05")  # the harness program's own tools
    monkeypatch.setenv("NOTES_DIR", str(tmp_path / "notes"))
    monkeypatch.delenv("POWERTOOLS_METRICS_DISABLED", raising=False)
    monkeypatch.delenv("POWERTOOLS_DEV", raising=False)


def emf_documents(output: str) -> list[dict[str, Any]]:
    return [doc for line in output.splitlines() if line.startswith("{") and "_aws" in (doc := json.loads(line))]


def total(documents: list[dict[str, Any]], name: str) -> float:
    return sum(sum(doc.get(name, [])) for doc in documents)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
async def test_each_slice_emits_its_figures_per_agent_and_model(
    scenario: Scenario, capsys: pytest.CaptureFixture[str]
) -> None:
    _, state = await run_scenario(scenario, [MetricsExporter(namespace=NAMESPACE, service="svc")])
    documents = emf_documents(capsys.readouterr().out)
    assert len(documents) == state.slices  # one model per slice: one document each

    for doc in documents:
        (directive,) = doc["_aws"]["CloudWatchMetrics"]
        assert directive["Namespace"] == NAMESPACE
        assert directive["Dimensions"] == [[*DIMENSIONS, "service"]]
        assert {m["Name"] for m in directive["Metrics"]} == set(METRIC_NAMES)
        assert doc["service"] == "svc" and doc["agent"] == documents[0]["agent"]
    # The harness's model (the program names none: "unknown"), the same for every slice.
    assert len({doc["model"] for doc in documents}) == 1
    # Low cardinality: no run id, session id or tool call id anywhere in the metrics.
    text = json.dumps(documents)
    assert state.run_id not in text and state.session_id not in text and PRIVATE not in text

    final = state.final_result
    assert final is not None
    assert (total(documents, "InputTokens"), total(documents, "OutputTokens")) == (
        final.input_tokens,
        final.output_tokens,
    )
    assert total(documents, "ApprovalsWaiting") == 1  # only the slice that paused the run
    assert documents[-1]["ApprovalsWaiting"] == [1.0]
    assert all(doc["SliceDuration"][0] > 0 for doc in documents)
    assert total(documents, "Steps") >= 2 and total(documents, "ToolCalls") >= 2


async def test_the_built_in_loop_counts_its_tool_error_and_names_its_model(capsys: pytest.CaptureFixture[str]) -> None:
    _, state = await run_scenario(SCENARIOS[0], [MetricsExporter(namespace=NAMESPACE)], slice_seconds=None)
    (doc,) = emf_documents(capsys.readouterr().out)
    assert (doc["agent"], doc["model"]) == ("ToolLoopAgent", "scripted")
    counts = {name: doc[name] for name in ("Steps", "ToolCalls", "ToolErrors", "ApprovalsWaiting")}
    assert counts == {"Steps": [2.0], "ToolCalls": [4.0], "ToolErrors": [1.0], "ApprovalsWaiting": [1.0]}
    assert (doc["InputTokens"], doc["OutputTokens"]) == ([20.0], [10.0])
    assert state.slices == 1


async def test_powertools_metrics_disabled_prints_nothing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    await run_scenario(SCENARIOS[0], [MetricsExporter(namespace=NAMESPACE)], slice_seconds=None)
    assert emf_documents(capsys.readouterr().out) == []
