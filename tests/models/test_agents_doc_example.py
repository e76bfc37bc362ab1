"""The "Test your tools without a model" example of docs/agents.md, run exactly as it is printed there.

The code block after the page's marker comment is written to a fresh folder as the file it says
it is and run by pytest in a child process, as a user would run it (the demo agent ``my_agent`` is
importable from the development install): its three tests must pass.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

AGENTS_DOC = Path(__file__).resolve().parents[2] / "docs" / "agents.md"
MARKER = "<!-- docs example: test your tools (run by tests/models/test_agents_doc_example.py) -->"


def docs_example() -> str:
    """The Python block that follows the marker in docs/agents.md."""
    text = AGENTS_DOC.read_text(encoding="utf-8")
    assert MARKER in text, "docs/agents.md lost the example's marker"
    match = re.match(r"\s*```python\n(.*?)\n```", text.split(MARKER, 1)[1], re.DOTALL)
    assert match, "the marker is not followed by a python block"
    return match.group(1) + "\n"


def test_the_agents_doc_example_of_testing_your_tools_passes(tmp_path: Path) -> None:
    code = docs_example()
    assert code.startswith("# tests/test_my_tools.py")
    (tmp_path / "test_my_tools.py").write_text(code, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "MODEL_ID", "AGENT"))}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:asyncio", "test_my_tools.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert re.search(r"\b3 passed\b", run.stdout), run.stdout
