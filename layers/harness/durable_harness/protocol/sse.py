"""Server-sent events framing of the UI message stream, and the client's parsers of what it gets.

The server side is stateless: one ``data: <compact JSON>\\n\\n`` event per chunk, exactly as the AI
SDK's ``JsonToSseTransformStream`` writes it. :class:`SSEParser` follows the SSE rules of the
client's ``eventsource-parser`` 3.1.1, so a Python test client sees the stream the browser sees;
:func:`parse_partial_json` reads a tool input still being streamed and :func:`url_href` a file
URL, as the client does.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import quote, urlsplit

from ..errors import ProtocolError

SSE_DONE: bytes = b"data: [DONE]\n\n"
"""The optional end marker the AI SDK writes after the last chunk (the client ignores it)."""

SSE_KEEPALIVE: bytes = b": keep-alive\n\n"
"""An SSE comment that keeps idle proxies from closing the connection; the client ignores it."""

UI_MESSAGE_STREAM_HEADER_MAP: Mapping[str, str] = {
    "content-type": "text/event-stream",
    "cache-control": "no-cache",
    "connection": "keep-alive",
    "x-vercel-ai-ui-message-stream": "v1",
    "x-accel-buffering": "no",
}
"""The response headers of ``createUIMessageStreamResponse`` (the client checks none of them)."""

UI_MESSAGE_STREAM_HEADERS: list[tuple[bytes, bytes]] = [
    (name.encode("latin-1"), value.encode("latin-1")) for name, value in UI_MESSAGE_STREAM_HEADER_MAP.items()
]
""":data:`UI_MESSAGE_STREAM_HEADER_MAP` as ASGI ``(name, value)`` byte pairs, in the same order."""

UNDEFINED: Any = type("Undefined", (), {"__repr__": lambda self: "UNDEFINED"})()
"""JavaScript's ``undefined`` (no value at all; ``None`` is JSON ``null``)."""

DONE_DATA = "[DONE]"
"""The data of the :data:`SSE_DONE` event."""


def encode_sse(json_text: str) -> bytes:
    """One SSE event carrying ``json_text``: ``data: <json>\\n\\n``.

    ``json_text`` must be a single line; compact JSON always is, because ``json.dumps`` escapes
    every line break inside strings.
    """
    return b"data: " + json_text.encode("utf-8") + b"\n\n"


class SSEParser:
    """Incremental SSE parser: feed raw bytes, get the ``data`` of each complete event.

    - LF, CRLF and CR all end a line, even when CR and LF arrive in different feeds.
    - ``:`` lines are comments; ``event``, ``id``, ``retry`` and unknown fields are ignored.
    - Several ``data`` lines of one event are joined with ``\\n``; an event with a ``data:`` line
      of empty value yields ``""`` (the client then fails to parse it as JSON).
    - An event not ended by a blank line is never yielded, even at :meth:`close`.
    - With ``skip_done`` (the default) the ``[DONE]`` marker is dropped, as the client does.
    """

    def __init__(self, *, skip_done: bool = True) -> None:
        """A parser at the start of a stream."""
        self._decoder = codecs.getincrementaldecoder("utf-8-sig")(errors="replace")
        self._buffer = ""
        self._data: list[str] = []
        self._skip_done = skip_done
        self._closed = False

    def feed(self, chunk: bytes) -> list[str]:
        """Parse more bytes; returns the data of every event completed by them, in order."""
        if self._closed:
            raise ValueError("SSEParser.feed() after close()")
        return list(self._consume(self._decoder.decode(chunk, final=False)))

    def close(self) -> list[str]:
        """End of stream: flushes a pending line ending; a half-received event is discarded."""
        if self._closed:
            return []
        self._closed = True
        text = self._decoder.decode(b"", final=True)
        if self._buffer.endswith("\r"):
            text += "\n"  # a final lone CR is a complete line ending
        out = list(self._consume(text))
        self._data = []
        self._buffer = ""
        return out

    def _consume(self, text: str) -> Iterator[str]:
        buffer = self._buffer + text
        start = 0
        length = len(buffer)
        while start < length:
            cr = buffer.find("\r", start)
            lf = buffer.find("\n", start)
            if cr == -1 and lf == -1:
                break
            if cr != -1 and (lf == -1 or cr < lf):
                if cr + 1 == length:
                    break  # the LF of a CRLF may still be on its way: wait for more input
                end, next_start = cr, cr + 2 if buffer[cr + 1] == "\n" else cr + 1
            else:
                end, next_start = lf, lf + 1
            event = self._line(buffer[start:end])
            if event is not None:
                yield event
            start = next_start
        self._buffer = buffer[start:]

    def _line(self, line: str) -> str | None:
        if not line:
            if not self._data:
                return None
            data = "\n".join(self._data)
            self._data = []
            if self._skip_done and data == DONE_DATA:
                return None
            return data
        if line.startswith(":"):
            return None
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        return None


# --- partial JSON (streamed tool input) ----------------------------------------------------------


def _loads(text: str) -> Any:
    return json.loads(text, parse_constant=_reject_constant)  # JSON.parse: no NaN / Infinity


def _reject_constant(name: str) -> Any:
    raise ValueError(name)


def parse_partial_json(text: str) -> Any:
    """The AI SDK's ``parsePartialJson``: the value of complete or repairable JSON text, else
    :data:`UNDEFINED` (the client shows a streaming tool input this way)."""
    for candidate in (text, fix_json(text)):
        try:
            return _loads(candidate)
        except ValueError:
            continue
    return UNDEFINED


_LITERALS = ("true", "false", "null")
_VALUE_STARTS = {
    '"': "STRING", "f": "LITERAL", "t": "LITERAL", "n": "LITERAL", "-": "NUMBER",
    "{": "OBJECT_START", "[": "ARRAY_START",
}  # fmt: skip


def fix_json(text: str) -> str:
    """The AI SDK's ``fixJson``: close a truncated JSON text (one linear scan with a state stack)."""
    stack, last, literal_start, hex_digits = ["ROOT"], -1, 0, 0

    def value_start(ch: str, i: int, swap: str) -> None:
        nonlocal last, literal_start
        state = _VALUE_STARTS.get(ch, "NUMBER" if ch in "0123456789" else "")
        if state:
            if ch != "-":
                last = i
            literal_start = i if state == "LITERAL" else literal_start
            stack[-1] = swap
            stack.append(state)

    def after_value(ch: str, i: int, container: str) -> None:
        nonlocal last
        if ch == ",":
            stack[-1] = f"{container}_AFTER_COMMA"
        elif ch == ("}" if container == "OBJECT" else "]"):
            last = i
            stack.pop()

    for i, ch in enumerate(text):
        state = stack[-1]
        if state == "ROOT":
            value_start(ch, i, "FINISH")
        elif state in ("OBJECT_START", "OBJECT_AFTER_COMMA") and ch == '"':
            stack[-1] = "OBJECT_KEY"
        elif state == "OBJECT_START" and ch == "}":
            last = i
            stack.pop()
        elif state == "OBJECT_KEY" and ch == '"':
            stack[-1] = "OBJECT_AFTER_KEY"
        elif state == "OBJECT_AFTER_KEY" and ch == ":":
            stack[-1] = "OBJECT_BEFORE_VALUE"
        elif state == "OBJECT_BEFORE_VALUE":
            value_start(ch, i, "OBJECT_AFTER_VALUE")
        elif state == "OBJECT_AFTER_VALUE":
            after_value(ch, i, "OBJECT")
        elif state == "STRING":
            if ch == "\\":
                stack.append("STRING_ESCAPE")
            else:
                last = i
                if ch == '"':
                    stack.pop()
        elif state == "ARRAY_START" and ch == "]":
            last = i
            stack.pop()
        elif state == "ARRAY_START":
            value_start(ch, i, "ARRAY_AFTER_VALUE")
        elif state == "ARRAY_AFTER_VALUE":
            if ch in ",]":
                after_value(ch, i, "ARRAY")
            else:
                last = i
        elif state == "ARRAY_AFTER_COMMA":
            value_start(ch, i, "ARRAY_AFTER_VALUE")
        elif state == "STRING_ESCAPE":
            stack.pop()
            if ch == "u":
                hex_digits = 0
                stack.append("STRING_UNICODE_ESCAPE")
            else:
                last = i
        elif state == "STRING_UNICODE_ESCAPE":
            if ch in "0123456789abcdefABCDEF":
                hex_digits += 1
                if hex_digits == 4:
                    stack.pop()
                    last = i
        elif state == "NUMBER":
            if ch in "0123456789":
                last = i
            elif ch not in "eE-.":
                stack.pop()
                if ch in ",]" and stack[-1] == "ARRAY_AFTER_VALUE":
                    after_value(ch, i, "ARRAY")
                elif ch in ",}" and stack[-1] == "OBJECT_AFTER_VALUE":
                    after_value(ch, i, "OBJECT")
        elif state == "LITERAL":
            if any(lit.startswith(text[literal_start : i + 1]) for lit in _LITERALS):
                last = i
            else:
                stack.pop()
                if stack[-1] in ("OBJECT_AFTER_VALUE", "ARRAY_AFTER_VALUE"):
                    after_value(ch, i, stack[-1].partition("_")[0])
    result = text[: last + 1]
    for state in reversed(stack):
        if state == "STRING":
            result += '"'
        elif state.startswith(("OBJECT_", "ARRAY_")):
            result += "}" if state.startswith("OBJECT_") else "]"
        elif state == "LITERAL":
            partial = text[literal_start:]
            result += next((lit[len(partial) :] for lit in _LITERALS if lit.startswith(partial)), "")
    return result


# --- URLs (``new URL(url).href``) -----------------------------------------------------------------

_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+-.")
_PORTS: dict[str, int | None] = {"http": 80, "https": 443, "ws": 80, "wss": 443, "ftp": 21, "file": None}


def url_href(url: str) -> str:
    """``new URL(url).href`` (a file part's URL goes through ``URL``) for absolute URLs: scheme and
    web host lower-cased, default port dropped, dot segments resolved, unsafe characters escaped."""
    url = "".join(c for c in url.strip("".join(map(chr, range(33)))) if c not in "\t\n\r")
    scheme, colon, rest = url.partition(":")
    if not (colon and scheme[:1].isalpha() and all(c in _SCHEME_CHARS for c in scheme)):
        raise ProtocolError(f'invalid URL "{url[:100]}"')
    scheme = scheme.lower()
    if scheme not in _PORTS:
        return f"{scheme}:{rest}"  # an opaque URL (data:, blob:) keeps its text
    try:
        split = urlsplit(url.replace("\\", "/"))
        host, port = (split.hostname or "").encode("idna").decode("ascii"), split.port
    except (ValueError, UnicodeError):
        raise ProtocolError(f'invalid URL "{url[:100]}"') from None
    netloc = split.netloc.rpartition("@")[0] + "@" if "@" in split.netloc else ""
    netloc += (f"[{host}]" if ":" in host else host) + ("" if port in (None, _PORTS[scheme]) else f":{port}")
    segments: list[str] = []
    for segment in split.path.split("/")[1:] or [""]:
        segments = segments[:-1] if segment == ".." else segments if segment == "." else [*segments, segment]
    trailing = "/" if segments and split.path.endswith(("/.", "/..")) else ""
    path = _escape("/" + "/".join(segments) + trailing, '"#<>?`{}')
    query = "?" + _escape(split.query, "\"#<>'") if "?" in url.partition("#")[0] else ""
    fragment = "#" + _escape(split.fragment, '"<>`') if "#" in url else ""
    return f"{scheme}://{netloc}{path}{query}{fragment}"


def _escape(text: str, unsafe: str) -> str:
    # Percent-encode controls, space, non-ASCII and the set's characters, as UTF-8.
    return "".join(quote(c, safe="") if c in unsafe or not " " < c < "\x7f" else c for c in text)
