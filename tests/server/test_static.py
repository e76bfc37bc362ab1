"""The chat page: GET / and GET /assets/<file> from the static folder (content types, caching, traversal)."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterable, Iterator, MutableMapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import httpx
import pytest
from durable_harness.demo import build_demo_agent
from durable_harness.server import app as app_module
from durable_harness.server.app import ChatApp
from durable_harness.server.local import build_local_kit
from durable_harness.server.static import IMMUTABLE, NO_CACHE, PACKAGE_STATIC_DIR, web_page_dir

from tests.support import serve

INDEX = b'<!doctype html><title>chat</title><script type="module" src="./assets/app-ABCD1234.js"></script>'
APP_JS = b"console.log('app');\n"
RUNS = b'<!doctype html><title>runs</title><script type="module" src="./assets/runs-ABCD1234.js"></script>'
SECRET = b"top secret, outside the static folder\n"


@pytest.fixture
def site(tmp_path: Path) -> Path:
    root = tmp_path / "static"
    (root / "assets").mkdir(parents=True)
    (root / "index.html").write_bytes(INDEX)
    (root / "runs.html").write_bytes(RUNS)
    (root / "assets" / "app-ABCD1234.js").write_bytes(APP_JS)
    (root / "assets" / "app-ABCD1234.css").write_bytes(b"body{color:red}")
    (root / "assets" / "app-ABCD1234.js.map").write_bytes(b"{}")
    (root / "assets" / "plain.css").write_bytes(b"p{}")
    (root / "assets" / "font-ZYXW9876.woff2").write_bytes(b"wOF2")
    (root / "assets" / "blob-ZYXW9876.bin").write_bytes(b"\x00\x01")
    (tmp_path / "secret.txt").write_bytes(SECRET)
    (root / "assets" / "link.js").symlink_to(tmp_path / "secret.txt")
    return root


def make_app(tmp_path: Path, static_dir: str | Path | None) -> ChatApp:
    return build_local_kit(build_demo_agent(delay=0), tmp_path / "data", static_dir=static_dir).app


async def call(
    app: ChatApp, method: str, raw_path: str, headers: Iterable[tuple[str, str]] = ()
) -> tuple[int, dict[str, str], bytes]:
    """One request straight through the ASGI app, with ``raw_path`` exactly as given (no normalizing)."""
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    target = urlsplit(raw_path)
    scope = {
        "type": "http",
        "method": method,
        "path": unquote(target.path),
        "raw_path": target.path.encode(),
        "query_string": target.query.encode(),
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers],
    }
    await app(scope, receive, send)
    start = sent[0]
    assert start["type"] == "http.response.start"
    head = {k.decode(): v.decode() for k, v in start["headers"]}
    body = b"".join(m.get("body", b"") for m in sent[1:])
    return int(start["status"]), head, body


async def test_index_is_html_and_never_cached_stale(tmp_path: Path, site: Path) -> None:
    app = make_app(tmp_path, site)
    for path in ("/", "/index.html"):
        status, headers, body = await call(app, "GET", path)
        assert status == 200 and body == INDEX
        assert headers["content-type"] == "text/html; charset=utf-8"
        assert headers["cache-control"] == NO_CACHE
        assert headers["content-length"] == str(len(INDEX))
        assert headers["x-content-type-options"] == "nosniff"
        assert "connect-src 'self'" in headers["content-security-policy"]
        assert headers["etag"].startswith('"')


async def test_the_runs_inspector_is_served_at_runs_like_the_chat_page(tmp_path: Path, site: Path) -> None:
    app = make_app(tmp_path, site)
    for path in ("/runs", "/runs?run=wrun_" + "0" * 26):
        status, headers, body = await call(app, "GET", path)
        assert status == 200 and body == RUNS
        assert headers["cache-control"] == NO_CACHE
        assert "connect-src 'self'" in headers["content-security-policy"]
    assert (await call(app, "GET", "/runs/wrun_" + "0" * 26))[0] == 404  # a run's page is /runs?run=<id>
    assert (await call(app, "POST", "/runs"))[0] == 405


async def test_every_page_route_the_app_module_names_is_served(tmp_path: Path, site: Path) -> None:
    # The routes listed in durable_harness.server.app's docstring, outside the API (which needs
    # credentials and runs): each answers 200 (a placeholder filled with a real run id or asset).
    doc = app_module.__doc__ or ""
    paths = [p for p in re.findall(r"``GET (/[^`]*)``", doc) if not p.startswith(("/api/", "/hooks/"))]
    assert {"/", "/runs", "/health"} <= set(paths), paths
    app = make_app(tmp_path, site)
    for path in paths:
        concrete = path.replace("<runId>", "wrun_" + "0" * 26).replace("<file>", "app-ABCD1234.js")
        assert (await call(app, "GET", concrete))[0] == 200, path


async def test_head_sends_the_headers_without_a_body(tmp_path: Path, site: Path) -> None:
    status, headers, body = await call(make_app(tmp_path, site), "HEAD", "/")
    assert status == 200 and body == b"" and headers["content-length"] == str(len(INDEX))


@pytest.mark.parametrize(
    ("name", "content_type", "cache"),
    [
        ("app-ABCD1234.js", "text/javascript; charset=utf-8", IMMUTABLE),
        ("app-ABCD1234.css", "text/css; charset=utf-8", IMMUTABLE),
        ("app-ABCD1234.js.map", "application/json; charset=utf-8", IMMUTABLE),
        ("font-ZYXW9876.woff2", "font/woff2", IMMUTABLE),
        ("blob-ZYXW9876.bin", "application/octet-stream", IMMUTABLE),
        ("plain.css", "text/css; charset=utf-8", NO_CACHE),
    ],
)
async def test_assets_have_their_content_type_and_hashed_ones_are_immutable(
    tmp_path: Path, site: Path, name: str, content_type: str, cache: str
) -> None:
    status, headers, body = await call(make_app(tmp_path, site), "GET", f"/assets/{name}")
    assert status == 200 and body == (site / "assets" / name).read_bytes()
    assert headers["content-type"] == content_type
    assert headers["cache-control"] == cache
    assert "content-security-policy" not in headers


async def test_a_matching_etag_gets_304(tmp_path: Path, site: Path) -> None:
    app = make_app(tmp_path, site)
    _, headers, _ = await call(app, "GET", "/assets/app-ABCD1234.js")
    status, again, body = await call(app, "GET", "/assets/app-ABCD1234.js", [("If-None-Match", headers["etag"])])
    assert status == 304 and body == b"" and again["etag"] == headers["etag"]
    status, _, body = await call(app, "GET", "/assets/app-ABCD1234.js", [("If-None-Match", '"other"')])
    assert status == 200 and body == APP_JS


@pytest.mark.parametrize(
    "raw_path",
    [
        "/assets/../secret.txt",
        "/assets/../../secret.txt",
        "/assets/..%2fsecret.txt",
        "/assets/..%2F..%2Fsecret.txt",
        "/assets/%2e%2e%2fsecret.txt",
        "/assets/%2e%2e",
        "/assets/..",
        "/assets/..%5csecret.txt",
        "/assets/x/../../secret.txt",
        "/assets/app%00.js",
        "/assets/%2fetc%2fpasswd",
    ],
)
async def test_path_traversal_is_rejected(tmp_path: Path, site: Path, raw_path: str) -> None:
    status, headers, body = await call(make_app(tmp_path, site), "GET", raw_path)
    assert status == 400, (raw_path, status, body)
    assert SECRET not in body
    assert json.loads(body)["error"]["code"] == "invalid_path"
    assert headers["content-type"] == "application/json"


@pytest.mark.parametrize(
    "raw_path",
    ["/assets/missing-ABCD1234.js", "/assets/", "/assets", "/assets/link.js", "/assets/.hidden", "/assets/a/b.js"],
)
async def test_what_is_not_a_plain_file_in_assets_is_404(tmp_path: Path, site: Path, raw_path: str) -> None:
    (site / "assets" / ".hidden").write_bytes(b"hidden")
    (site / "assets" / "a").mkdir()
    (site / "assets" / "a" / "b.js").write_bytes(b"nested")
    status, _, body = await call(make_app(tmp_path, site), "GET", raw_path)
    assert status == 404, (raw_path, status, body)
    assert SECRET not in body and json.loads(body)["error"]["code"] == "not_found"


async def test_other_methods_get_405(tmp_path: Path, site: Path) -> None:
    for path in ("/", "/assets/app-ABCD1234.js"):
        status, head, body = await call(make_app(tmp_path, site), "POST", path)
        assert status == 405 and json.loads(body)["error"]["code"] == "method_not_allowed"
        assert head["allow"] == "GET, HEAD, OPTIONS"


async def test_the_api_is_unchanged_next_to_the_page(tmp_path: Path, site: Path) -> None:
    app = make_app(tmp_path, site)
    assert (await call(app, "GET", "/health"))[0] == 200
    assert (await call(app, "GET", "/api/nothing"))[0] == 404
    assert (await call(app, "GET", "/other"))[0] == 404


async def test_no_page_without_a_static_dir_or_when_it_is_missing(tmp_path: Path, site: Path) -> None:
    for static_dir in (None, tmp_path / "does-not-exist"):
        app = make_app(tmp_path, static_dir)
        for path in ("/", "/assets/app-ABCD1234.js"):
            status, _, body = await call(app, "GET", path)
            assert status == 404 and json.loads(body)["error"]["code"] == "not_found"


def test_web_page_dir_serves_a_built_page_unless_disabled(tmp_path: Path, site: Path) -> None:
    assert web_page_dir({}, directory=site) == site
    assert web_page_dir({"SERVE_WEB_PAGE": "1"}, directory=site) == site
    for off in ("0", "false", "off", "no", " 0 "):
        assert web_page_dir({"SERVE_WEB_PAGE": off}, directory=site) is None
    assert web_page_dir({}, directory=tmp_path / "does-not-exist") is None
    (site / "index.html").unlink()
    assert web_page_dir({}, directory=site) is None  # not built: no page
    assert PACKAGE_STATIC_DIR.name == "static" and PACKAGE_STATIC_DIR.parent.name == "server"


async def test_serve_web_page_0_disables_the_built_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVE_WEB_PAGE", "0")
    status, _, _ = await call(make_app(tmp_path, "auto"), "GET", "/")
    assert status == 404


@pytest.fixture
def base_url(tmp_path: Path, site: Path) -> Iterator[str]:
    with serve(make_app(tmp_path, site)) as url:
        yield url


def raw_get(base_url: str, target: str) -> tuple[int, bytes]:
    """A GET whose request target goes on the wire verbatim (httpx would normalize ``..``)."""
    host, port = urlsplit(base_url).hostname, urlsplit(base_url).port
    assert host is not None and port is not None
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(f"GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


def test_over_http(base_url: str) -> None:
    index = httpx.get(f"{base_url}/", timeout=10)
    assert index.status_code == 200 and index.content == INDEX
    assert index.headers["content-type"] == "text/html; charset=utf-8"
    asset = httpx.get(f"{base_url}/assets/app-ABCD1234.js", timeout=10)
    assert asset.status_code == 200 and asset.content == APP_JS
    assert asset.headers["cache-control"] == IMMUTABLE
    for target in ("/assets/../secret.txt", "/assets/..%2fsecret.txt", "/assets/%2e%2e/%2e%2e/secret.txt"):
        status, body = raw_get(base_url, target)
        assert status == 400 and SECRET not in body, target
