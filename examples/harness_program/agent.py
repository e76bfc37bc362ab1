"""An agent file whose agent is a program: ``notes_harness.py``, driven over JSON lines.

Serve it with ``AGENT=examples.harness_program.agent:agent make dev`` (from the repository root).
The program runs its own tools (``draft_note``, ``save_note``, ``work``); ``get_weather`` is a
*host* tool: defined here, run by the server when the program calls it.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

from durable_harness import tool
from durable_harness.harness import ProcessHarness
from pydantic import BaseModel, Field

HERE = Path(__file__).resolve().parent


class City(BaseModel):
    """Input of ``get_weather``."""

    city: str = Field(min_length=1, max_length=100)


@tool
def get_weather(input: City) -> dict[str, object]:
    """The weather in a city (made up, but the same city always gets the same answer)."""
    digest = hashlib.sha256(input.city.strip().lower().encode()).digest()
    conditions = ["sunny", "cloudy", "rainy", "windy", "foggy"][digest[0] % 5]
    return {"city": input.city.strip(), "tempC": digest[1] % 35 - 5, "conditions": conditions}


agent = ProcessHarness(
    command=[sys.executable, str(HERE / "notes_harness.py")],
    cwd=HERE,
    # The program's environment is PATH, HOME, LANG, TZ and these (None: the server's value, if set).
    env={"PYTHONUNBUFFERED": "1", "NOTES_DIR": None, "STEP_SECONDS": None},
    tools=[get_weather],
    builtin_tools=["draft_note", "save_note", "work"],
    stop_grace_seconds=float(os.environ.get("HARNESS_STOP_GRACE_SECONDS", "10")),
)
