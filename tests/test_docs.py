"""The docs match the repository: every decision ``D<n>`` named in the code (the library, the
handlers, the state machine, the template) is defined in ``docs/architecture.md``; every relative
link of the README and the docs pages reaches a file, and a heading when it names one; the HTTP API
page names every error code the API can answer."""

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


def test_the_readme_links_every_docs_page() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    pages = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))
    assert "docs/architecture.md" in pages and "docs/http-api.md" in pages
    assert [p for p in pages if f"]({p})" not in readme] == []


# --- links ---------------------------------------------------------------------------------------

DOCS = (
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "bench" / "README.md",
    ROOT / "layers" / "harness" / "lambda_fastpath" / "README.md",
)
_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.MULTILINE)


def prose(text: str) -> str:
    """The Markdown without its code blocks and code spans (a link shown as code is no link)."""
    return _CODE_SPAN.sub("", _FENCE.sub("", text))


def anchors(text: str) -> set[str]:
    """The ids GitHub gives the headings of a Markdown page: lower case, punctuation dropped,
    spaces as hyphens, a repeated id numbered ``-1``, ``-2``, ..."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for title in _HEADING.findall(_FENCE.sub("", text)):
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title)  # a link in a heading keeps its text
        slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return out


def broken_links(page: Path) -> list[str]:
    """The relative links of ``page`` that reach no file, or no heading of the page they name."""
    broken = []
    for target in _LINK.findall(prose(page.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...: not this repository's
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and (resolved.suffix != ".md" or anchor not in anchors(resolved.read_text(encoding="utf-8"))):
            broken.append(f"{target} (no such heading)")
    return broken


def test_every_relative_link_of_the_readme_and_the_docs_resolves() -> None:
    assert all(page.is_file() for page in DOCS)
    broken = {str(page.relative_to(ROOT)): found for page in DOCS if (found := broken_links(page))}
    assert not broken, broken


def test_the_link_check_sees_links_anchors_and_code(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Title\n\n## 3. Some `code`: here\n\n## Twice\n\n## Twice\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md) [ok](other.md#3-some-code-here) [ok](other.md#twice-1) [ok](#local) [ok](https://x.y/z)\n"
        "[bad](missing.md) [bad](other.md#nope) [bad](#elsewhere) `[not a link](missing.md)`\n\n"
        "```\n[not a link](missing.md)\n# not a heading\n```\n\n## Local\n"
    )
    assert broken_links(page) == ["missing.md (no such file)", "other.md#nope (no such heading)",
                                  "#elsewhere (no such heading)"]  # fmt: skip


# --- the HTTP API's error codes ------------------------------------------------------------------

HTTP_API = ROOT / "docs" / "http-api.md"
PACKAGE = ROOT / "layers" / "harness" / "durable_harness"
_CODES = re.compile(r'\bcode="([a-z_]+)"|"code": "([a-z_]+)"')
NOT_HTTP = {"aws/events.py": "the trigger function's EventBridge events: refused events are logged and counted"}


def error_codes() -> dict[str, list[str]]:
    """Every error code the package spells (``code="..."`` or ``"code": "..."``) -> the files."""
    found: dict[str, list[str]] = {"bad_request": ["errors.py"]}  # InvalidRequestError's default
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        if name in NOT_HTTP:
            continue
        for match in _CODES.finditer(path.read_text(encoding="utf-8")):
            found.setdefault(match.group(1) or match.group(2), []).append(name)
    return found


def test_the_http_api_page_names_every_error_code_the_api_answers() -> None:
    codes = error_codes()
    assert {"invalid_json", "run_not_found", "duplicate_event", "storage_unavailable"} <= set(codes)
    page = HTTP_API.read_text(encoding="utf-8")
    named = set(re.findall(r"`(?:\d{3} )?([a-z_]+)`", page))  # `invalid_json`, `404 run_not_found`
    missing = {code: files for code, files in codes.items() if code not in named}
    assert not missing, f"error codes the API answers that docs/http-api.md does not name: {missing}"


# --- the settings: one table, the settings object's, and every variable the code reads --------------

OPERATING = ROOT / "docs" / "operating.md"
_ENVIRONMENT = r"(?:env|environ|snapshot|source)"
_READ = re.compile(
    rf"""(?:{_ENVIRONMENT}(?:\.get\(|\[)|getenv\(|\b{_ENVIRONMENT}, |\b(?:text|required)\(|_ENV\s*=\s*)"""
    r"""["']([A-Z_][A-Z0-9_]{2,})["']"""
)
"""A variable's name where the code reads it: ``env.get("X")``, ``environ["X"]``, ``getenv("X")``, the
settings' ``_number(snapshot, "X", ...)`` and ``required("X", ...)``, a ``*_ENV = "X"`` constant."""
_API_KEY = re.compile(r'ApiKey\("\w+", "([A-Z_][A-Z0-9_]+)"')
"""A model provider's key: read from the variable, or from the secret its ``_SECRET_ARN`` names."""


def variables_read() -> dict[str, list[str]]:
    """Variable name -> the library, handler and agent files that read it."""
    found: dict[str, list[str]] = {}
    for path in code_files():
        if path.suffix != ".py":
            continue
        text = path.read_text(encoding="utf-8")
        keys = _API_KEY.findall(text)
        for name in sorted({*_READ.findall(text), *keys, *(f"{key}_SECRET_ARN" for key in keys)}):
            found.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return found


def variables_set_by_the_template() -> set[str]:
    """Every variable the template gives a function (its Globals and each function's own)."""
    text = (ROOT / "template.yaml").read_text(encoding="utf-8")
    names: set[str] = set()
    for block in re.findall(r"\n( +)Variables:\n((?:\1  .*\n)+)", text):
        names |= set(re.findall(rf"^{block[0]}  ([A-Z_][A-Z0-9_]+):", block[1], re.MULTILINE))
    return names


def documented_table() -> str:
    """The table of the "Settings" section of docs/operating.md."""
    text = OPERATING.read_text(encoding="utf-8")
    section = text[text.index("\n## Settings\n") :]
    start = section.index("| variable |")
    end = section.find("\n\n", start)
    return section[start : end + 1 if end != -1 else len(section)]


def test_the_settings_table_is_the_settings_objects() -> None:
    from durable_harness.settings import settings_table

    assert documented_table() == settings_table(), (
        "docs/operating.md's Settings table differs from durable_harness.settings.SETTINGS: paste "
        "`python -c 'from durable_harness.settings import settings_table; print(settings_table())'`"
    )


def test_every_variable_the_code_reads_or_the_template_sets_is_in_the_table() -> None:
    from durable_harness.settings import SETTINGS

    documented = {s.name for s in SETTINGS}
    read, set_by_template = variables_read(), variables_set_by_the_template()
    assert len(read) > 40 and {"RUNS_TABLE", "TOOL_THREADS", "OPENAI_API_KEY_SECRET_ARN"} <= set(read), sorted(read)
    assert len(set_by_template) > 30 and "AWS_LITE_CLIENTS" in set_by_template, sorted(set_by_template)
    assert {n: files for n, files in read.items() if n not in documented} == {}
    assert sorted(set_by_template - documented) == []
    # And nothing in the table that nothing reads or sets (a setting removed from the code goes from the docs).
    assert sorted(documented - set(read) - set_by_template) == []
