"""The chat page: ``GET /`` (``index.html``), the runs inspector: ``GET /runs`` (``runs.html``; a run's
page is ``/runs?run=<runId>``), and ``GET /assets/<file>``, from the built static folder.

``web/`` builds the page (``make web``) into :data:`PACKAGE_STATIC_DIR`; :func:`web_page_dir` says
whether to serve it (the folder has an ``index.html`` and ``SERVE_WEB_PAGE`` is not ``0``).
Content-hashed assets (``app-<hash>.js``) are cached for a year as immutable; ``index.html``, which
names the current assets, and any unhashed file are ``no-cache`` (revalidated with their ETag).
Only plain file names directly under ``assets/`` are served: a name with a path separator, a NUL
or ``..`` (also percent-encoded) is a 400, anything else not there a 404.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from pathlib import Path
from typing import Any

from ..errors import InvalidRequestError, MethodNotAllowedError

Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

PACKAGE_STATIC_DIR = Path(__file__).with_name("static")
"""Where ``web/build.mjs`` writes the page (not committed: run the build first)."""

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".map": "application/json; charset=utf-8",
    ".json": "application/json; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".webp": "image/webp",
    ".ico": "image/x-icon",
    ".woff2": "font/woff2",
}

IMMUTABLE = "public, max-age=31536000, immutable"
NO_CACHE = "no-cache"
# esbuild's [hash] (8 base32 characters) and the usual bundler hashes: name-<hash>.ext
_HASHED = re.compile(r"^[A-Za-z0-9_.]+-[A-Za-z0-9_]{8,}\.[A-Za-z0-9]+(?:\.map)?$")
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
# The page talks only to its own origin; no inline script or style, no external fonts.
PAGE_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
    "frame-ancestors 'none'; form-action 'self'"
)
_DISABLED = {"0", "false", "no", "off"}


def web_page_dir(env: Mapping[str, str] | None = None, directory: Path = PACKAGE_STATIC_DIR) -> Path | None:
    """The folder to serve the page from, or None (not built, or ``SERVE_WEB_PAGE=0``)."""
    value = (os.environ if env is None else env).get("SERVE_WEB_PAGE", "1")
    if value.strip().lower() in _DISABLED:
        return None
    return directory if (directory / "index.html").is_file() else None


class StaticSite:
    """Serves ``/``, ``/runs`` and ``/assets/<name>`` from ``root`` (ASGI level, no framework)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def matches(self, segments: list[str]) -> bool:
        """Whether this request path is the page's (and the page is there to serve)."""
        return (segments in ([""], ["index.html"], ["runs"]) or segments[:1] == ["assets"]) and self.root.is_dir()

    async def serve(self, method: str, segments: list[str], headers: Mapping[str, str], send: Send) -> None:
        """Answer one request for the page; raises InvalidRequestError (400/404/405) otherwise."""
        if method not in ("GET", "HEAD"):
            raise MethodNotAllowedError(method, "GET, HEAD, OPTIONS")
        if segments[:1] == ["assets"]:
            path = self._asset(segments)
            cache = IMMUTABLE if _HASHED.match(path.name) else NO_CACHE
        else:
            path, cache = self.root / ("runs.html" if segments == ["runs"] else "index.html"), NO_CACHE
        try:
            body, stat = await asyncio.to_thread(_read, path)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise _not_found(segments) from None
        etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
        response: list[tuple[bytes, bytes]] = [
            (b"content-type", CONTENT_TYPES.get(path.suffix.lower(), "application/octet-stream").encode()),
            (b"cache-control", cache.encode()),
            (b"etag", etag.encode()),
            (b"x-content-type-options", b"nosniff"),
        ]
        if path.suffix.lower() == ".html":
            response += [(b"content-security-policy", PAGE_CSP.encode()), (b"referrer-policy", b"no-referrer")]
        if etag in {t.strip() for t in headers.get("if-none-match", "").split(",")}:
            await send({"type": "http.response.start", "status": 304, "headers": response})
            await send({"type": "http.response.body", "body": b""})
            return
        response.append((b"content-length", str(stat).encode()))
        await send({"type": "http.response.start", "status": 200, "headers": response})
        await send({"type": "http.response.body", "body": b"" if method == "HEAD" else body})

    def _asset(self, segments: list[str]) -> Path:
        if len(segments) != 2 or not segments[1]:
            if any(s in ("..", ".") or "\\" in s or "\0" in s for s in segments):
                raise _bad_path(segments)
            raise _not_found(segments)
        name = segments[1]
        if "/" in name or "\\" in name or "\0" in name or ".." in name:
            raise _bad_path(segments)
        if not _SAFE_NAME.match(name):
            raise _not_found(segments)
        assets = (self.root / "assets").resolve()
        path = (assets / name).resolve()
        if path.parent != assets:  # a symlink pointing out of the folder
            raise _not_found(segments)
        return path


def _read(path: Path) -> tuple[bytes, int]:
    body = path.read_bytes()
    return body, len(body)


def _not_found(segments: list[str]) -> InvalidRequestError:
    return InvalidRequestError(f"No such file: /{'/'.join(segments)}.", code="not_found", status=404)


def _bad_path(segments: list[str]) -> InvalidRequestError:
    shown = "/".join(segments).encode("unicode_escape").decode()
    return InvalidRequestError(f"Invalid path /{shown}.", code="invalid_path", status=400)
