"""durable_harness.settings: one snapshot of the environment, its defaults the documented ones, bad values named."""

from __future__ import annotations

import pytest
from durable_harness.errors import SettingsError
from durable_harness.settings import DEFAULT_AGENT, SETTINGS, Settings

DAY = 86400


def test_the_defaults_are_the_ones_the_table_documents() -> None:
    settings = Settings.from_env({})
    documented = {s.name: s.default for s in SETTINGS}
    numbers = {
        "SLICE_SECONDS": settings.slice_seconds,
        "RUN_TTL_DAYS": settings.run_ttl_seconds / DAY,
        "INLINE_HEARTBEAT_SECONDS": settings.inline_heartbeat_seconds,
        "STREAM_FLUSH_SECONDS": settings.stream_flush_seconds,
        "STREAM_WINDOW_SECONDS": settings.stream_window_seconds,
        "STREAM_POLL_SECONDS": settings.stream_poll_seconds,
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": settings.function_memory_mb,
        "INLINE_FIRST_SLICE": int(settings.inline_first_slice),
    }
    assert {name: float(documented[name]) for name in numbers} == {k: float(v) for k, v in numbers.items()}
    assert documented["AGENT"] == settings.agent == DEFAULT_AGENT
    assert not settings.deployed and settings.chunk_retention_seconds is None and settings.event_bus_name is None


def test_the_environment_is_read_once() -> None:
    env = {"AGENT": "mine:agent", "SLICE_SECONDS": "30", "RUNS_TABLE": "runs"}
    settings = Settings.from_env(env)
    env["SLICE_SECONDS"], env["AGENT"] = "1", "other:agent"  # a later change reaches nothing built from it
    assert (settings.agent, settings.slice_seconds, settings.deployed) == ("mine:agent", 30.0, True)
    assert settings.environ["SLICE_SECONDS"] == "30"
    with pytest.raises(TypeError):
        settings.environ["AGENT"] = "x"  # type: ignore[index]  # a read-only snapshot


@pytest.mark.parametrize(
    ("name", "value"),
    [("SLICE_SECONDS", "soon"), ("SLICE_SECONDS", "-1"), ("STREAM_FLUSH_SECONDS", "nan"),
     ("STREAM_WINDOW_SECONDS", "inf"), ("INLINE_HEARTBEAT_SECONDS", "0"), ("INLINE_HEARTBEAT_INTERVAL", "2.5"),
     ("RUN_TTL_DAYS", "0"), ("CHUNK_RETENTION_DAYS", "a month"), ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "big")],
)  # fmt: skip
def test_a_bad_value_stops_the_start_naming_its_variable(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=f"^{name} must be"):
        Settings.from_env({name: value})


def test_a_required_deployment_setting_says_what_it_names() -> None:
    with pytest.raises(SettingsError, match="RUNS_TABLE is not set: it must name the runs table"):
        Settings.from_env({"RUNS_TABLE": " "}).required("RUNS_TABLE", "the runs table")
