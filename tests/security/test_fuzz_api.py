"""HTTP fuzzing of the chat API, driven by its OpenAPI document (hypothesis, derandomized, bounded).

Requests are generated from the routes of ``/openapi.json`` (and around them): methods, raw paths
(percent-encoded anything, dot segments, run ids of every owner and shape), query strings, headers
(credentials, content types, odd bytes), and bodies (valid and mutated UI messages with wrong
types, arbitrary and odd JSON, invalid UTF-8, deep nesting, other encodings, bodies over 4 MiB).

For every response: never a 5xx; every error is JSON ``{"error": {"code": str, "message": str}}``
with exactly the status an oracle derived from docs/http-api.md expects (401 before routing
under ``/api`` in token mode, then 404/405, 400 for a malformed run id, 404 for a run that is not
the caller's, 413 over 4 MiB, ...); every success has the documented shape (SSE ending in
``finish`` and ``[DONE]``, JSON status, 202 continuation, 204 preflight).

Two layers: the live loopback server (uvicorn + httpx, token and none auth modes), and the ASGI
app called in-process with byte-level scopes that no HTTP client would send.

Bodies nested deeper than the server's limit, lone surrogates, huge integers and run ids with a
trailing ``%0A`` are covered one by one in ``test_regressions.py``; the generated bodies stay within
``MAX_DEPTH`` so that their expected status stays predictable.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlencode

import httpx
import pytest
from durable_harness import ApprovalSecret
from durable_harness.demo import build_demo_agent
from durable_harness.ids import is_run_id
from durable_harness.server.app import ChatApp
from durable_harness.server.auth import TokenAuth
from durable_harness.server.local import build_local_kit
from durable_harness.server.service import ServiceConfig
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.security.helpers import (
    ALICE_TOKEN,
    APPROVAL_SECRET,
    BOB_TOKEN,
    TOKEN_HASHES,
    assert_error_response,
    serve_asgi,
)
from tests.support import parse_sse_body, user_message

MAX_BODY = 4 * 1024 * 1024
MAX_DEPTH = 90  # bodies nested deeper than 100 levels are refused (400), see test_regressions.py
LIVE_EXAMPLES = {"token": 300, "none": 150}
ASGI_EXAMPLES = 200
FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)
RUN_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"


# --- the servers and the runs they hold -------------------------------------------------------------


@dataclass
class Target:
    """A server under fuzzing and the runs it holds, by owner."""

    mode: str  # "token" or "none"
    url: str
    routes: list[tuple[str, str]]  # (METHOD, path template) from the OpenAPI document
    page: Path | None = None  # the chat page's folder, when the app serves one
    own_finished: list[str] = field(default_factory=list)  # alice's (anonymous in none mode)
    own_paused: list[str] = field(default_factory=list)
    others: list[str] = field(default_factory=list)  # bob's, all finished

    def state_of(self, run_id: str, principal: str) -> str:
        """What ``principal`` may know of a well-formed run id: absent, finished or paused."""
        if principal == "bob":
            return "finished" if run_id in self.others else "absent"
        if run_id in self.own_paused:
            return "paused"
        return "finished" if run_id in self.own_finished else "absent"

    @property
    def principal_header(self) -> dict[str, str]:
        return {"authorization": f"Bearer {ALICE_TOKEN}"} if self.mode == "token" else {}


def _start_runs(client: httpx.Client, target: Target) -> None:
    def start(text: str, headers: dict[str, str], chat: str) -> str:
        body = {"id": chat, "messages": [user_message(text)]}
        response = client.post(f"{target.url}/api/chat", json=body, headers=headers)
        assert response.status_code == 200 and parse_sse_body(response.content)[-1]["type"] == "finish"
        return response.headers["x-workflow-run-id"]

    alice = target.principal_header
    target.own_finished = [start("What is the weather in Lima?", alice, "fuzz-1"), start("hello", alice, "fuzz-2")]
    target.own_paused = [start("Save a note: fuzz", alice, "fuzz-3")]
    if target.mode == "token":
        target.others = [start("hello from bob", {"authorization": f"Bearer {BOB_TOKEN}"}, "fuzz-4")]


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Target]]:
    config = ServiceConfig(stream_window_seconds=20)  # a hang would still end; the checks then fail
    agent = build_demo_agent(delay=0, approval_secret=ApprovalSecret.from_value(APPROVAL_SECRET))
    token_kit = build_local_kit(
        agent, tmp_path_factory.mktemp("fuzz-token"), config=config, authenticator=TokenAuth.from_entries(TOKEN_HASHES)
    )
    open_kit = build_local_kit(agent, tmp_path_factory.mktemp("fuzz-none"), config=config)
    with serve_asgi(token_kit.app) as token_url, serve_asgi(open_kit.app) as open_url, httpx.Client() as client:
        document = client.get(f"{token_url}/openapi.json").json()
        routes = [(m.upper(), p) for p, item in document["paths"].items() for m in item]
        found = {
            mode: Target(mode, url, routes, page=_page_root(kit.app))
            for mode, url, kit in (("token", token_url, token_kit), ("none", open_url, open_kit))
        }
        for target in found.values():
            _start_runs(client, target)
        yield found


def _page_root(app: ChatApp) -> Path | None:
    site = getattr(app, "static_site", None)  # the chat page (GET /, /assets/<file>), when built
    return Path(site.root) if site is not None else None


# --- strategies ----------------------------------------------------------------------------------------

JSON_SCALARS = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=40)
JSON = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)


def nested(depth: int, kind: str) -> str:
    """JSON text nested ``depth`` levels deep."""
    return ("[" * depth + "]" * depth) if kind == "list" else ('{"a":' * depth + "1" + "}" * depth)


TEXT_PART = st.builds(lambda t: {"type": "text", "text": t}, st.text(max_size=120))
PROMPTS = st.sampled_from(["hello", "What is the weather in Paris?", "Save a note: fuzz it", "weather in ?", ""])
USER = st.builds(
    lambda i, parts: {"id": i, "role": "user", "parts": parts},
    st.text(min_size=1, max_size=24),
    st.lists(TEXT_PART | PROMPTS.map(lambda t: {"type": "text", "text": t}), min_size=1, max_size=3),
)
ASSISTANT = st.builds(
    lambda i, parts: {"id": i, "role": "assistant", "parts": [{"type": "step-start"}, *parts]},
    st.text(min_size=1, max_size=24),
    st.lists(TEXT_PART, max_size=2),
)
VALID_MESSAGES = st.lists(USER | ASSISTANT, max_size=4).flatmap(lambda h: USER.map(lambda u: [*h, u]))
CHAT_ID = st.none() | st.text(min_size=1, max_size=200)
TOOL_PART = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["tool-save_note", "tool-get_weather", "tool-nope", "dynamic-tool", "tool-"]),
        "toolCallId": st.sampled_from(["call_demo_0", "c1", ""]) | st.text(max_size=8),
        "state": st.sampled_from(
            [
                "input-streaming",
                "input-available",
                "approval-requested",
                "approval-responded",
                "output-available",
                "output-error",
                "output-denied",
                "bogus",
            ]
        ),
    },
    optional={
        "toolName": st.sampled_from(["save_note", "get_weather"]) | JSON,
        "input": st.just({"title": "t", "text": "x"}) | st.just({"city": "Paris"}) | JSON,
        "output": JSON,
        "errorText": JSON,
        "approval": st.fixed_dictionaries(
            {"id": st.sampled_from(["approval-call_demo_0", "approval-c1"]) | JSON},
            optional={"approved": st.booleans() | JSON, "signature": st.text(max_size=44) | JSON, "reason": JSON},
        )
        | JSON,
    },
)
WEIRD_PART = st.one_of(
    TOOL_PART,
    st.fixed_dictionaries({"type": st.sampled_from(["data-x", "data-", "file", "reasoning", "source-url"])},
                          optional={"data": JSON, "url": JSON, "mediaType": JSON, "text": JSON, "id": JSON}),
    st.dictionaries(st.sampled_from(["type", "text", "state", "id"]), JSON, max_size=3),
    JSON,
)  # fmt: skip


@st.composite
def mutated_messages(draw: st.DrawFn) -> Any:
    """Valid messages with one to three changes: a value replaced by any JSON (wrong types), a key
    dropped or added, an odd part inserted, a role changed."""
    messages: Any = draw(VALID_MESSAGES)
    for _ in range(draw(st.integers(1, 3))):
        slots: list[tuple[Any, Any]] = [(messages, i) for i in range(len(messages))]
        for message in messages:
            if isinstance(message, dict):
                slots += [(message, k) for k in message]
                if isinstance(message.get("parts"), list):
                    slots += [(message["parts"], i) for i in range(len(message["parts"]))]
                    slots += [(p, k) for p in message["parts"] if isinstance(p, dict) for k in p]
        holder, key = draw(st.sampled_from(slots))
        action = draw(st.sampled_from(["replace", "replace", "drop", "insert part", "role"]))
        if action == "replace":
            holder[key] = draw(JSON)
        elif action == "drop" and isinstance(holder, dict):
            del holder[key]
        elif action == "insert part" and isinstance(holder, dict) and isinstance(holder.get("parts"), list):
            holder["parts"].insert(draw(st.integers(0, len(holder["parts"]))), draw(WEIRD_PART))
        elif action == "role" and isinstance(holder, dict):
            holder["role"] = draw(st.sampled_from(["system", "tool", "System", "", "assistant", "user"]) | JSON)
    return messages


def encode(value: Any, draw: st.DrawFn) -> bytes:
    if draw(st.booleans()):
        return json.dumps(value, ensure_ascii=False, allow_nan=True).encode()
    return json.dumps(value).encode()


@dataclass
class Body:
    data: bytes
    chat: set[int]  # the statuses POST /api/chat may answer with this body, once authorized
    label: str


HUGE = Body(b" " * (MAX_BODY + 1), {413}, "one byte over the limit")
BODY_KINDS = [
    "valid", "valid", "mutated", "mutated", "mutated", "json", "binary", "bad utf-8", "nested", "odd json",
    "encoding", "empty", "approvals", "huge",
]  # fmt: skip


@st.composite
def bodies(draw: st.DrawFn) -> Body:
    kind = draw(st.sampled_from(BODY_KINDS))
    if kind in ("valid", "mutated", "nested", "encoding"):
        messages = draw(VALID_MESSAGES) if kind != "mutated" else draw(mutated_messages())
        chat_id = draw(CHAT_ID)
        body: dict[str, Any] = {"messages": messages, **({} if chat_id is None else {"id": chat_id})}
        if kind == "nested":
            depth = draw(st.integers(1, MAX_DEPTH))
            value = json.loads(nested(depth, draw(st.sampled_from(["list", "dict"]))))
            where = draw(st.sampled_from(["metadata", "data part", "body"]))
            if where == "metadata":
                messages[-1]["metadata"] = value
            elif where == "data part":
                messages[-1]["parts"].append({"type": "data-deep", "data": value})
            else:
                body["extra"] = value
            return Body(encode(body, draw), {200}, f"valid, nested {depth} deep in {where}")
        if kind == "encoding":
            codec = draw(st.sampled_from(["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-8-sig"]))
            return Body(json.dumps(body).encode(codec), {200}, f"valid in {codec}")
        return Body(encode(body, draw), {200} if kind == "valid" else {200, 400}, kind)
    if kind == "json":
        value = draw(JSON | st.dictionaries(st.sampled_from(["messages", "id"]), JSON, min_size=1))
        return Body(encode(value, draw), {400}, "json")
    if kind == "binary":
        return Body(draw(st.binary(max_size=512)), {400}, "binary")
    if kind == "bad utf-8":
        valid = encode({"messages": draw(VALID_MESSAGES)}, draw)
        at = draw(st.integers(0, len(valid)))
        junk = draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\x80"]))
        return Body(valid[:at] + junk + valid[at:], {400}, "invalid utf-8")
    if kind == "odd json":
        odd = draw(st.sampled_from([
            b"NaN", b"-Infinity", b"1e999", b"-0", b'"\\u0000"', b"{}", b"[]", b'{"messages": null}',
            b'{"messages": [], "messages": []}', b'{"messages": {"0": {}}}', b"{'messages': []}", b"// c\n{}",
            b'{"messages": [1]} trailing', b'{"messages": "' + b"x" * 70_000 + b'"}', b"\x00", b'{"a":1,}',
            b'{"messages": [{"id": "u", "role": "user", "parts": [{"type": "text", "text": "hi"}]}], "id": ""}',
            b'{"messages": [' + b'{"id":"u","role":"user","parts":[{"type":"text","text":"x"}]},' * 1000
            + b'{"id":"u","role":"user","parts":[{"type":"text","text":"x"}]}]}',
        ]))  # fmt: skip
        return Body(odd, {400}, "odd json")
    if kind == "empty":
        return Body(b"", {400}, "empty")
    if kind == "approvals":
        item = st.fixed_dictionaries(
            {},
            optional={
                "approvalId": st.just("approval-call_demo_0") | JSON,
                "approved": st.booleans() | JSON,
                "reason": st.text(max_size=20) | JSON,
            },
        )
        value = {"approvals": draw(st.lists(item, max_size=3) | JSON)}
        return Body(encode(value, draw), {400}, "approvals body")
    big = draw(st.sampled_from([HUGE, Body(b'{"messages":[]' + b" " * (MAX_BODY - 15) + b"}", {400}, "at the limit")]))
    return big


AUTH = {
    "alice": ("alice", {"authorization": f"Bearer {ALICE_TOKEN}"}),
    "alice, lower-case scheme": ("alice", {"authorization": f"bearer  {ALICE_TOKEN}"}),
    "bob": ("bob", {"authorization": f"Bearer {BOB_TOKEN}"}),
    "none": (None, {}),
    "wrong token": (None, {"authorization": "Bearer nope"}),
    "basic": (None, {"authorization": f"Basic {ALICE_TOKEN}"}),
    "near miss": (None, {"authorization": f"Bearer {ALICE_TOKEN[:-1]}"}),
}
CONTENT_TYPES = st.sampled_from(
    [None, "application/json", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
     "multipart/form-data; boundary=x", "application/json; charset=utf-16", "text/event-stream", "*/*", "garbage"]
)  # fmt: skip
HEADER_NAME = st.text("abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=1, max_size=16).filter(
    lambda n: n not in {"host", "content-length", "transfer-encoding", "connection", "expect", "upgrade", "te",
                        "authorization", "keep-alive", "content-type", "trailer"}
)  # fmt: skip
HEADER_VALUE = st.binary(max_size=40).map(lambda b: bytes(c for c in b if c > 0x20 and c != 0x7F) or b"x")
EXTRA_HEADERS = st.lists(
    st.tuples(HEADER_NAME, HEADER_VALUE)
    | st.sampled_from([
        ("origin", b"https://evil.example"), ("x-amzn-request-context", b'{"authorizer":{"iam":{"userArn":"x"}}}'),
        ("content-encoding", b"gzip"), ("accept", b"text/event-stream"), ("x-forwarded-for", b"10.0.0.1"),
        ("cookie", b"a=b"), ("accept-charset", b"\xff\xfe"),
    ]),
    max_size=4,
)  # fmt: skip


def run_ids(target: Target) -> st.SearchStrategy[str]:
    """Run ids of every owner and shape, already percent-encoded for a path."""
    real = st.sampled_from([*target.own_finished, *target.own_paused, *target.others])
    unknown = st.text(RUN_ALPHABET, min_size=26, max_size=26).map(lambda s: "wrun_" + s)
    malformed = st.one_of(
        st.text(max_size=30).map(lambda s: quote(s, safe="")),
        st.binary(max_size=30).map(lambda b: quote(b, safe="")),
        st.sampled_from([".", "..", "%2E%2E", "..%2F..%2Fetc", "%00", "wrun_" + "0" * 25 + "%2F", "WRUN_" + "0" * 26]),
        real.map(lambda r: r[:-1]),
        real.map(lambda r: r + "0"),
        real.map(lambda r: r.upper()),
    ).filter(lambda s: not s.endswith("%0A") and unquote(s) not in ("health", "openapi.json"))
    return st.one_of(real, real, real, unknown, malformed)


def paths(target: Target) -> st.SearchStrategy[str]:
    documented = st.sampled_from(sorted({p for _, p in target.routes}))
    filled = st.tuples(documented, run_ids(target)).map(lambda t: t[0].replace("{runId}", t[1]))
    words = st.sampled_from(
        ["api", "chat", "runs", "stream", "cancel", "approvals", "health", "openapi.json", "", ".", "..", "%2E%2E",
         "assets", "index.html", "%2Fetc%2Fpasswd", "..%2F..%2Fpyproject.toml", "%00", "app.py"]
    )  # fmt: skip
    segment = words | st.text(max_size=12).map(lambda s: quote(s, safe=""))
    free = st.lists(segment, min_size=1, max_size=5).map(lambda s: "/" + "/".join(s))
    return st.one_of(filled, filled, filled, free, filled.map(lambda p: p + "/"), filled.map(lambda p: "/" + p))


def queries() -> st.SearchStrategy[str]:
    start = st.integers(-(10**6), 10**6).map(str) | st.text(max_size=12) | st.sampled_from(["", "1.5", "0x1", "1_0"])
    pairs = st.lists(
        st.tuples(st.sampled_from(["startIndex", "x", "access_token"]) | st.text(max_size=6), start), max_size=3
    )
    return st.one_of(st.just(""), pairs.map(urlencode), st.binary(max_size=20).map(lambda b: quote(b, safe="=&")))


@dataclass
class Request:
    method: str
    path: str  # percent-encoded, as sent
    query: str
    auth: str
    headers: list[tuple[str, bytes]]
    body: Body


def requests(target: Target) -> st.SearchStrategy[Request]:
    """Two thirds aimed at a documented route with its own method (so that bodies and run ids
    matter), a third anything: any method on any path, any credentials."""
    methods = st.sampled_from(["GET", "POST", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "TRACE", "FOO"])
    anyone = st.sampled_from(list(AUTH)) if target.mode == "token" else st.sampled_from(["none", "alice"])
    mostly_alice = st.sampled_from(["alice"] * 6 + ["alice, lower-case scheme"]) | anyone
    route = st.sampled_from(target.routes)

    @st.composite
    def build(draw: st.DrawFn) -> Request:
        headers = list(draw(EXTRA_HEADERS))
        content_type = draw(CONTENT_TYPES)
        if content_type:
            headers.append(("content-type", content_type.encode()))
        if draw(st.sampled_from([True, True, False])):
            method, template = draw(route)
            path, auth = template.replace("{runId}", draw(run_ids(target))), draw(mostly_alice)
        else:
            method, path, auth = draw(methods), draw(paths(target)), draw(anyone)
        body = draw(bodies())
        return Request(method, path, draw(queries()), auth, headers, body)

    return build()


# --- the oracle ----------------------------------------------------------------------------------------


def is_page(target: Target, req: Request) -> bool:
    """A request for the chat page (served only when the page was built)."""
    segments = [unquote(s) for s in req.path.split("/")[1:]]
    pages = ([""], ["index.html"], ["runs"])  # the chat page and the runs inspector
    return target.page is not None and (segments in pages or segments[:1] == ["assets"])


def expected(target: Target, req: Request) -> set[int]:
    """The statuses docs/http-api.md allows for this request."""
    segments = [unquote(s) for s in req.path.split("/")[1:]]
    method, body = req.method, req.body
    if method == "OPTIONS":
        return {204}
    if segments in (["health"], ["openapi.json"]):
        return {200} if method == "GET" else {405}
    if is_page(target, req):
        return {200, 304, 400, 404} if method in ("GET", "HEAD") else {405}
    if len(segments) == 3 and segments[:2] == ["hooks", "events"]:  # a signed event URL: the token is the key
        if method != "POST":
            return {405}
        return {413} if len(body.data) > MAX_BODY else {401}  # no fuzzed token is signed
    if segments[:1] != ["api"]:
        return {404}
    principal = AUTH[req.auth][0] if target.mode == "token" else "anonymous"
    if principal is None:
        return {401}

    def run(value: str) -> str:
        return target.state_of(value, principal) if is_run_id(value) else "malformed"

    def parses() -> bool:
        try:  # a lone surrogate (e.g. from invalid UTF-8) cannot be stored as text: the app refuses it
            json.dumps(json.loads(body.data), ensure_ascii=False).encode("utf-8")
        except Exception:  # what the app must turn into a 400, whatever the parser raises
            return False
        return True

    if segments == ["api", "chat"]:
        return body.chat if method == "POST" else {405}
    if len(segments) == 4 and segments[:2] == ["api", "chat"] and segments[3] == "stream":
        if method != "GET":
            return {405}
        # Not a run id (nor meant as one: "wrun_..."): a chat id, or a 400 when it is empty or too
        # long. A chat's stream is 204 without startIndex when there is nothing to resume.
        kind = run(segments[2])
        if kind == "malformed" and not segments[2].startswith("wrun_"):
            return {200, 204, 400}
        return {"malformed": {400}, "absent": {404}}.get(kind, {200, 400})
    if segments == ["api", "runs"]:  # the caller's runs: a page, or a 400 for a parameter it cannot take
        return {200, 400} if method == "GET" else {405}
    if len(segments) == 3 and segments[:2] == ["api", "runs"]:
        if method != "GET":
            return {405}
        return {"malformed": {400}, "absent": {404}}.get(run(segments[2]), {200})
    if len(segments) == 4 and segments[:2] == ["api", "runs"] and segments[3] == "result":
        if method != "GET":
            return {405}
        # every sampled run ended or paused: a result (409 is for a run still going)
        return {"malformed": {400}, "absent": {404}}.get(run(segments[2]), {200})
    if len(segments) == 4 and segments[:2] == ["api", "runs"] and segments[3] == "cancel":
        if method != "POST":
            return {405}
        # every sampled run ended, or is paused for approval (the first cancel abandons it: 200)
        return {"malformed": {400}, "absent": {404}}.get(run(segments[2]), {200, 409})
    answers = len(segments) == 4 and segments[3] == "approvals"
    events = len(segments) == 5 and segments[3] == "events"
    if segments[:2] == ["api", "runs"] and (answers or events):
        if method != "POST":
            return {405}
        kind = run(segments[2])
        if kind == "malformed":
            return {400}
        if len(body.data) > MAX_BODY:
            return {413}
        if events:  # every sampled run ended or is paused for approval: no event is taken (or a bad name/payload)
            return {"absent": {404}}.get(kind, {400, 409, 413})
        if not parses():
            return {400}
        return {"absent": {404}, "finished": {409}}.get(kind, {202, 400, 409})
    return {404}


ERROR_CODES = {
    400: {"bad_request", "invalid_json", "invalid_messages", "system_message_not_allowed", "unknown_approval",
          "invalid_start_index", "invalid_run_id", "invalid_chat_id", "missing_approval", "invalid_path",
          "invalid_query", "invalid_status", "invalid_limit", "invalid_cursor", "invalid_event_name"},
    401: {"unauthorized", "invalid_token"}, 404: {"not_found", "run_not_found"}, 405: {"method_not_allowed"},
    409: {"run_ended", "not_paused", "already_answered", "conflict", "run_in_progress", "duplicate_event"},
    413: {"body_too_large", "payload_too_large"},
}  # fmt: skip


def check(response: httpx.Response, allowed: set[int], req: Any, page: Path | None = None) -> None:
    status = response.status_code
    assert status < 500, (status, response.content[:500], req)
    assert status in allowed, (status, allowed, response.content[:300], req)
    if page is not None and status == 200 and not response.headers["content-type"].startswith("application/json"):
        # The chat page: only index.html or a file directly in assets/, never anything else on disk.
        files = [page / "index.html", *(page / "assets").glob("*")]
        assert response.request.method == "HEAD" or any(response.content == f.read_bytes() for f in files), req
    elif status >= 400:
        error = assert_error_response(response, status)
        if error:
            assert error["code"] in ERROR_CODES[status], (error, req)
    elif status == 200 and response.headers.get("content-type", "").startswith("text/event-stream"):
        assert response.content.endswith(b"data: [DONE]\n\n"), (response.content[-200:], req)
        chunks = parse_sse_body(response.content)  # none: asked from the length of a finished stream
        assert not chunks or chunks[-1]["type"] == "finish"
        int(response.headers["x-workflow-stream-tail-index"])
    elif status in (200, 202) and response.request.method != "HEAD":
        document = response.json()
        assert isinstance(document, dict) and (status != 202 or is_run_id(document["runId"]))
    elif status == 204:
        assert response.content == b""


# --- live loopback server -------------------------------------------------------------------------------


def _send(client: httpx.Client, target: Target, req: Request) -> httpx.Response:
    raw_target = req.path + ("?" + req.query if req.query else "")
    headers = [(k.encode(), v) for k, v in req.headers] + [
        (k.encode(), v.encode()) for k, v in AUTH[req.auth][1].items()
    ]
    return client.request(
        req.method, target.url + "/", headers=headers, content=req.body.data,
        extensions={"target": raw_target.encode()},
    )  # fmt: skip


@pytest.mark.parametrize("mode", ["token", "none"])
def test_fuzz_the_live_chat_api(targets: dict[str, Target], mode: str) -> None:
    target = targets[mode]
    with httpx.Client(timeout=30) as client:

        @settings(FUZZ, max_examples=LIVE_EXAMPLES[mode])
        @given(req=requests(target))
        def one(req: Request) -> None:
            response = _send(client, target, req)
            check(response, expected(target, req), req, target.page if is_page(target, req) else None)

        one()
        # The server is still healthy and its runs are intact.
        assert client.get(f"{target.url}/health").status_code == 200
        for run_id in target.own_finished:
            status = client.get(f"{target.url}/api/runs/{run_id}", headers=target.principal_header).json()
            assert status["status"] == "finished"


# --- in-process ASGI with byte-level scopes ---------------------------------------------------------------


class LoopThread:
    """An event loop in a thread, where the app (and the runs it starts) live."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def call(self, app: ChatApp, scope: dict[str, Any], body: bytes) -> tuple[int, dict[bytes, bytes], bytes]:
        async def run() -> tuple[int, dict[bytes, bytes], bytes]:
            sent: list[dict[str, Any]] = []
            done = asyncio.Event()
            delivered = False

            async def receive() -> dict[str, Any]:
                nonlocal delivered
                if not delivered:
                    delivered = True
                    return {"type": "http.request", "body": body, "more_body": False}
                await done.wait()
                return {"type": "http.disconnect"}

            async def send(message: dict[str, Any]) -> None:
                sent.append(message)
                if message["type"] == "http.response.body" and not message.get("more_body"):
                    done.set()

            await app(scope, receive, send)
            start = next(m for m in sent if m["type"] == "http.response.start")
            content = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
            return start["status"], dict(start.get("headers", [])), content

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(30)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def asgi(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LoopThread, ChatApp, str]]:
    agent = build_demo_agent(delay=0, approval_secret=ApprovalSecret.from_value(APPROVAL_SECRET))
    root: Path = tmp_path_factory.mktemp("fuzz-asgi")
    kit = build_local_kit(agent, root, authenticator=TokenAuth.from_entries(TOKEN_HASHES))
    loop = LoopThread()
    body = json.dumps({"messages": [user_message("hi")]}).encode()
    scope = _scope("POST", b"/api/chat", b"", [(b"authorization", f"Bearer {ALICE_TOKEN}".encode())])
    status, headers, _ = loop.call(kit.app, scope, body)
    assert status == 200
    try:
        yield loop, kit.app, headers[b"x-workflow-run-id"].decode()
    finally:
        asyncio.run_coroutine_threadsafe(kit.orchestrator.aclose(), loop.loop).result(10)
        loop.close()


def _scope(method: str, raw_path: bytes, query: bytes, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
        "path": unquote(raw_path.decode("latin-1")), "raw_path": raw_path, "query_string": query, "root_path": "",
        "headers": headers, "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80),
    }  # fmt: skip


RAW_SEGMENT = st.one_of(
    st.sampled_from([b"api", b"chat", b"runs", b"stream", b"cancel", b"approvals", b"health", b"", b".", b".."]),
    st.binary(max_size=16).map(lambda b: b.replace(b"/", b"").replace(b"?", b"")),
)
RAW_TEMPLATES = [
    ("GET", [b"api", b"chat", None, b"stream"]), ("GET", [b"api", b"runs", None]),
    ("POST", [b"api", b"runs", None, b"cancel"]), ("POST", [b"api", b"runs", None, b"approvals"]),
    ("POST", [b"api", b"chat"]),
]  # fmt: skip
RAW_HEADER = st.tuples(
    st.binary(min_size=1, max_size=20).map(bytes.lower)
    | st.sampled_from([b"authorization", b"origin", b"content-type", b"x-amzn-request-context"]),
    st.binary(max_size=60),
)
RAW_AUTH = st.sampled_from(
    [f"Bearer {ALICE_TOKEN}".encode()] * 3 + [f"bearer \t{ALICE_TOKEN}\x85".encode("latin-1"), b"Bearer \xff\xfe\x00"]
) | st.binary(max_size=40)


@st.composite
def raw_requests(draw: st.DrawFn, run_id: str) -> tuple[str, bytes, bytes | None]:
    """(method, raw path, authorization): mostly a documented route with its method, the owner's
    token and a real run id or raw bytes in its place; otherwise any method, raw segments, bytes."""
    if draw(st.sampled_from([True, True, False])):
        method, template = draw(st.sampled_from(RAW_TEMPLATES))
        slot = st.just(run_id.encode()) | RAW_SEGMENT
        segments = [s if s is not None else draw(slot) for s in template]
        return method, b"/" + b"/".join(segments), f"Bearer {ALICE_TOKEN}".encode()
    method = draw(
        st.sampled_from(["GET", "POST", "OPTIONS", "HEAD", "DELETE", "get"]) | st.text(min_size=1, max_size=8)
    )
    segments = draw(st.lists(RAW_SEGMENT, min_size=1, max_size=5))
    return method, b"/" + b"/".join(segments), draw(st.none() | RAW_AUTH)


@settings(FUZZ, max_examples=ASGI_EXAMPLES)
@given(
    data=st.data(),
    query=st.binary(max_size=40),
    headers=st.lists(RAW_HEADER, max_size=4),
    body=st.binary(max_size=200) | st.sampled_from([json.dumps({"messages": [user_message("hi", "raw")]}).encode()]),
)
def test_fuzz_the_asgi_app_with_raw_bytes(
    asgi: tuple[LoopThread, ChatApp, str],
    data: st.DataObject,
    query: bytes,
    headers: list[tuple[bytes, bytes]],
    body: bytes,
) -> None:
    """Scopes no HTTP client would send: raw paths and header bytes that are not UTF-8, NULs, any method."""
    loop, app, run_id = asgi
    method, raw_path, auth = data.draw(raw_requests(run_id))
    if auth is not None:
        headers = [*headers, (b"authorization", auth)]
    status, response_headers, content = loop.call(app, _scope(method, raw_path, query, headers), body)
    assert status < 500, (status, content[:300], method, raw_path, query, headers)
    assert status in {200, 202, 204, 400, 401, 404, 405, 409, 413}, (status, content[:300])
    if status >= 400:
        assert response_headers[b"content-type"] == b"application/json"
        error = json.loads(content)["error"]
        assert set(error) == {"code", "message"} and all(isinstance(v, str) and v for v in error.values())
        assert error["code"] in ERROR_CODES[status]
        assert ALICE_TOKEN not in content.decode()
    elif status == 200 and response_headers.get(b"content-type", b"").startswith(b"text/event-stream"):
        assert content.endswith(b"data: [DONE]\n\n")
        chunks = parse_sse_body(content)
        assert not chunks or chunks[-1]["type"] == "finish"
