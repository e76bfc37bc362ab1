"""The README's "Test your tools without a model" example, run exactly as it is printed there.

The code block after the README's marker comment is written to a fresh folder as the file it says
it is and run by pytest in a child process, as a user would run it (the demo agent ``my_agent`` is
importable from the development install): its three tests must pass.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
MARKER = "<!-- README example: test your tools (run by tests/models/test_readme_example.py) -->"


def readme_example() -> str:
    """The Python block that follows the marker in the README."""
    text = README.read_text(encoding="utf-8")
    assert MARKER in text, "the README lost the example's marker"
    match = re.match(r"\s*```python\n(.*?)\n```", text.split(MARKER, 1)[1], re.DOTALL)
    assert match, "the marker is not followed by a python block"
    return match.group(1) + "\n"


def test_the_readme_example_of_testing_your_tools_passes(tmp_path: Path) -> None:
    code = readme_example()
    assert code.startswith("# tests/test_my_tools.py")
    (tmp_path / "test_my_tools.py").write_text(code, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "MODEL_ID", "AGENT"))}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:asyncio", "test_my_tools.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert re.search(r"\b3 passed\b", run.stdout), run.stdout
