"""Reliability suites: a summary of how much each one tried (crash points, drops, faults).

Tests report through the ``reliability_report`` fixture: each line goes to the test report
(``record_property``, so it lands in JUnit XML) and to a "reliability" section of pytest's terminal
summary, which is printed whether or not output capture (``-s``) is on.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

_LINES: list[str] = []

Report = Callable[[str, object], None]


@pytest.fixture
def reliability_report(record_property: Callable[[str, object], None], request: pytest.FixtureRequest) -> Report:
    """``report(key, value)``: record a count in the test report and in the terminal summary."""

    def report(key: str, value: object) -> None:
        record_property(key, value)
        line = f"{request.node.nodeid}: {key} = {value}"
        _LINES.append(line)
        print(line)

    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _LINES:
        terminalreporter.section("reliability")
        for line in _LINES:
            terminalreporter.write_line(line)
