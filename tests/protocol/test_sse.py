"""SSE framing (ui-message-stream.md §3), the SSE parser, and the client-side parsers in sse.py."""

from __future__ import annotations

import json

import pytest
from durable_harness.errors import ProtocolError
from durable_harness.protocol.sse import (
    SSE_DONE,
    SSE_KEEPALIVE,
    UI_MESSAGE_STREAM_HEADER_MAP,
    UI_MESSAGE_STREAM_HEADERS,
    UNDEFINED,
    SSEParser,
    encode_sse,
    fix_json,
    parse_partial_json,
    url_href,
)
from durable_harness.protocol.ui_chunks import (
    FinishChunk,
    FinishStepChunk,
    StartChunk,
    StartStepChunk,
    TextDeltaChunk,
    TextEndChunk,
    TextStartChunk,
    encode_ui_chunk,
    parse_ui_chunk,
)


def parse_sse(body: bytes, *, skip_done: bool = True) -> list[str]:
    """The data of every complete event of a whole SSE body."""
    parser = SSEParser(skip_done=skip_done)
    return parser.feed(body) + parser.close()


# §3.1 "Exact bytes for a text turn", with the \n\n written out.
TEXT_TURN = (
    b'data: {"type":"start","messageMetadata":{"createdAt":1},"messageId":"msg-assistant-1"}\n\n'
    b'data: {"type":"start-step"}\n\n'
    b'data: {"type":"text-start","id":"t1"}\n\n'
    b'data: {"type":"text-delta","id":"t1","delta":"Hello"}\n\n'
    b'data: {"type":"text-delta","id":"t1","delta":" world"}\n\n'
    b'data: {"type":"text-end","id":"t1"}\n\n'
    b'data: {"type":"finish-step"}\n\n'
    b'data: {"type":"finish","finishReason":"stop","messageMetadata":{"totalTokens":8}}\n\n'
    b"data: [DONE]\n\n"
)

TEXT_TURN_CHUNKS = [
    StartChunk(message_metadata={"createdAt": 1}, message_id="msg-assistant-1"),
    StartStepChunk(),
    TextStartChunk(id="t1"),
    TextDeltaChunk(id="t1", delta="Hello"),
    TextDeltaChunk(id="t1", delta=" world"),
    TextEndChunk(id="t1"),
    FinishStepChunk(),
    FinishChunk(finish_reason="stop", message_metadata={"totalTokens": 8}),
]


def test_text_turn_bytes_from_chunk_models() -> None:
    body = b"".join(encode_sse(encode_ui_chunk(chunk)) for chunk in TEXT_TURN_CHUNKS) + SSE_DONE
    assert body == TEXT_TURN


def test_text_turn_bytes_survive_parse_and_reencode() -> None:
    datas = parse_sse(TEXT_TURN)
    assert len(datas) == 8
    body = b"".join(encode_sse(encode_ui_chunk(parse_ui_chunk(json.loads(d)))) for d in datas) + SSE_DONE
    assert body == TEXT_TURN


def test_constants_and_headers() -> None:
    assert SSE_DONE == b"data: [DONE]\n\n"
    assert SSE_KEEPALIVE == b": keep-alive\n\n"
    assert UI_MESSAGE_STREAM_HEADERS == [
        (b"content-type", b"text/event-stream"),
        (b"cache-control", b"no-cache"),
        (b"connection", b"keep-alive"),
        (b"x-vercel-ai-ui-message-stream", b"v1"),
        (b"x-accel-buffering", b"no"),
    ]
    assert dict(UI_MESSAGE_STREAM_HEADER_MAP) == {k.decode(): v.decode() for k, v in UI_MESSAGE_STREAM_HEADERS}


def test_encode_sse() -> None:
    assert encode_sse('{"type":"start"}') == b'data: {"type":"start"}\n\n'
    assert encode_sse('{"a":"ü"}') == 'data: {"a":"ü"}\n\n'.encode()


def test_parser_whole_body_and_done() -> None:
    assert parse_sse(TEXT_TURN)[0] == '{"type":"start","messageMetadata":{"createdAt":1},"messageId":"msg-assistant-1"}'
    assert parse_sse(TEXT_TURN, skip_done=False)[-1] == "[DONE]"


def test_parser_byte_by_byte_is_the_same() -> None:
    parser = SSEParser()
    out: list[str] = []
    for i in range(len(TEXT_TURN)):
        out += parser.feed(TEXT_TURN[i : i + 1])
    out += parser.close()
    assert out == parse_sse(TEXT_TURN)


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
def test_parser_line_endings(newline: bytes) -> None:
    body = b"data: a" + newline + newline + b"data: b" + newline + newline
    assert parse_sse(body) == ["a", "b"]
    # The same, fed one byte at a time (a CRLF split across two feeds is one line ending).
    parser = SSEParser()
    out = [d for i in range(len(body)) for d in parser.feed(body[i : i + 1])] + parser.close()
    assert out == ["a", "b"]


def test_parser_sse_rules() -> None:
    body = (
        b": stream-open\n\n"
        b": keep-alive\n\n"
        b'event: message\nid: 7\nretry: 10\ndata: {"a":\ndata:1}\n\n'  # two data lines joined with \n
        b"data:no-space\n\n"
        b"data\n\n"  # a field with no colon: empty data
        b"data: \xc3"
    )
    parser = SSEParser()
    out = parser.feed(body)
    out += parser.feed(b"\xbc\n\n")  # a UTF-8 character split across feeds
    out += parser.feed(b"data: cut off")  # no blank line: never dispatched
    out += parser.close()
    assert out == ['{"a":\n1}', "no-space", "", "ü"]


def test_parser_strips_bom_and_rejects_feed_after_close() -> None:
    parser = SSEParser()
    assert parser.feed(b"\xef\xbb\xbfdata: x\n\n") == ["x"]
    assert parser.close() == []
    with pytest.raises(ValueError):
        parser.feed(b"data: y\n\n")


@pytest.mark.parametrize(
    ("text", "fixed"),
    [
        ("", ""),
        ('{"a":', "{}"),
        ('{"a":"b', '{"a":"b"}'),
        ("[1,2", "[1,2]"),
        ('{"a":tr', '{"a":true}'),
        ('{"a":1.', '{"a":1}'),
        ('{"a":-', "{}"),
        ('"ab\\u00', '"ab"'),
        ('{"x":[{"y":nu', '{"x":[{"y":null}]}'),
        ('{"a":[1,{"b":"c\\', '{"a":[1,{"b":"c"}]}'),
    ],
)
def test_fix_json(text: str, fixed: str) -> None:
    assert fix_json(text) == fixed


def test_parse_partial_json() -> None:
    assert parse_partial_json('{"city":"Par') == {"city": "Par"}
    assert parse_partial_json('{"a":1}') == {"a": 1}
    assert parse_partial_json("") is UNDEFINED
    assert parse_partial_json("NaN") is UNDEFINED  # JSON.parse has no NaN


# Expected values are what Node's ``new URL(url).href`` gives.
@pytest.mark.parametrize(
    ("url", "href"),
    [
        ("data:image/png;base64,iVBORw0KGgo=", "data:image/png;base64,iVBORw0KGgo="),
        ("DATA:text/plain,hi  ", "data:text/plain,hi"),
        ("HTTP://EX.com:80/x", "http://ex.com/x"),
        ("https://x.com", "https://x.com/"),
        ("https://user:pw@Ex.com:8443/p", "https://user:pw@ex.com:8443/p"),
        ("https://ex.com/a b?x=1 2&y='\"#f g", "https://ex.com/a%20b?x=1%202&y=%27%22#f%20g"),
        ("https://x.com/a/./b/../c", "https://x.com/a/c"),
        ("https://x.com/a/..", "https://x.com/"),
        ("https://Bücher.de/", "https://xn--bcher-kva.de/"),
        ("https://[::1]:443/a", "https://[::1]/a"),
        ("https://x.com/p#a?b", "https://x.com/p#a?b"),
    ],
)
def test_url_href(url: str, href: str) -> None:
    assert url_href(url) == href


@pytest.mark.parametrize("url", ["not a url", "/relative", "https://x.com:99999/"])
def test_url_href_rejects_what_url_rejects(url: str) -> None:
    with pytest.raises(ProtocolError):
        url_href(url)
