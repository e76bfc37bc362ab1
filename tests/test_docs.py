"""The design the code cites is in the repository: every decision ``D<n>`` named in the code (the
library, the handlers, the state machine, the template) is defined in ``docs/architecture.md``."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
_CITED = re.compile(r"\bD(\d+)\b")
_DEFINED = re.compile(r"^\*\*D(\d+)\. ", re.MULTILINE)  # a decision's paragraph opens "**Dn. Title"
_SOURCES = (".py", ".json", ".yaml", ".yml", ".sh")
_NOT_SOURCE = ("egg-info", "__pycache__", "node_modules", ".aws-sam")  # build output, not the code


def code_files() -> Iterator[Path]:
    """The files whose citations must resolve."""
    yield ROOT / "template.yaml"
    for folder in ("layers", "functions", "statemachine"):
        for path in sorted((ROOT / folder).rglob("*")):
            parts = path.relative_to(ROOT).parts
            if path.suffix in _SOURCES and path.is_file() and not any(p.endswith(_NOT_SOURCE) for p in parts):
                yield path


def citations() -> dict[int, list[str]]:
    """Decision number -> the files citing it."""
    found: dict[int, list[str]] = {}
    for path in code_files():
        for number in sorted({int(n) for n in _CITED.findall(path.read_text(encoding="utf-8"))}):
            found.setdefault(number, []).append(str(path.relative_to(ROOT)))
    return found


def test_every_decision_the_code_cites_is_defined_in_the_architecture_doc() -> None:
    cited = citations()
    assert len(cited) >= 5, "the scan found almost no citations: it no longer looks where the code is"
    defined = {int(n) for n in _DEFINED.findall(ARCHITECTURE.read_text(encoding="utf-8"))}
    missing = {f"D{n}": files for n, files in cited.items() if n not in defined}
    assert not missing, f"decisions cited in the code but not defined in docs/architecture.md: {missing}"


def test_the_decisions_are_defined_once_each_in_order() -> None:
    numbers = [int(n) for n in _DEFINED.findall(ARCHITECTURE.read_text(encoding="utf-8"))]
    assert numbers == list(range(1, len(numbers) + 1))


def test_the_readme_links_the_architecture_doc() -> None:
    assert "docs/architecture.md" in (ROOT / "README.md").read_text(encoding="utf-8")
