"""No secret is ever written anywhere: a representative workload with known secrets, then a scan of
everything the harness wrote or answered.

Secrets (all in the environment, as deployed): the approval signing secrets (two, rotated:
``TOOL_APPROVAL_SECRET``), the bearer tokens of two principals (only their hashes are configured:
``AUTH_TOKEN_HASHES``), provider API keys (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``) and an AWS
secret key canary.

Workload, over real HTTP in token mode: a weather turn with a tool call; approvals approved, denied
and tampered with through chat POSTs, and approved through the run API; an OpenAI-compatible model
(a fake provider on loopback) that succeeds, that answers 401 and 500 with the key echoed in the
error, and that sends a stream error event echoing the key; a model that crashes; a cancelled live
run; 401s with near-miss tokens; another principal's 404s; bad requests; status and stream reads of
every run.

Scanned: every log record (root at DEBUG, the harness's and uvicorn's loggers at TRACE, access log
on, with tracebacks and extra fields), everything written to stdout/stderr (fd level), every HTTP
response (status, raw headers, body), every chunk of every run's log, every row of every SQLite
table, and the raw bytes of every file in the data dir. Each secret is looked for as is, and
base64 (standard and URL-safe, at every byte alignment), hex and URL-encoded.

The workload includes a provider stream whose ``data:`` line is not JSON (it once leaked the key:
see test_regressions.py).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import sqlite3
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import httpx
import pytest
from durable_harness import Agent
from durable_harness.demo import DEMO_TOOLS
from durable_harness.messages import TextPart, UserMessage
from durable_harness.models.base import ModelRequest, ModelStreamPart
from durable_harness.models.openai import OpenAIChatModel
from durable_harness.protocol.assemble import assemble_ui_message
from durable_harness.server.auth import authenticator_from_env
from durable_harness.server.local import LocalKit, build_local_kit

from tests.security.helpers import (
    ALICE_TOKEN,
    BOB_TOKEN,
    TOKEN_HASHES,
    GatedDemoModel,
    Notes,
    PausedTurn,
    bearer,
    serve_asgi,
)
from tests.support import parse_sse_body, user_message

APPROVAL_SECRET_NEW = "apprv-NEW-9f8e7d6c5b4a39281706-rotated"
APPROVAL_SECRET_OLD = "apprv-OLD-1a2b3c4d5e6f70819203-retired"
OPENAI_KEY = "sk-proj-FAKEopenaiKEY-0123456789abcdefghijklmn"
ANTHROPIC_KEY = "sk-ant-api03-FAKEanthropicKEY-zyxwvutsrqponm"
AWS_CANARY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYFAKEKEYCANARY"
SECRETS = {
    "approval secret": APPROVAL_SECRET_NEW,
    "old approval secret": APPROVAL_SECRET_OLD,
    "alice's token": ALICE_TOKEN,
    "bob's token": BOB_TOKEN,
    "OpenAI key": OPENAI_KEY,
    "Anthropic key": ANTHROPIC_KEY,
    "AWS secret key": AWS_CANARY,
}
PROVIDER_CASES = ["provider ok", "provider 401", "provider 500", "provider stream error", "provider garbage"]


def encoded_forms(secret: str) -> set[bytes]:
    """The secret as it could show up: raw, URL-encoded, hex, and base64/base64url at every alignment
    (the characters of an encoding of the secret embedded in any longer byte string)."""
    raw = secret.encode()
    forms = {raw, quote(secret, safe="").encode(), quote_plus(secret).encode(), raw.hex().encode()}
    forms.add(raw.hex().upper().encode())
    forms.add(json.dumps(secret).encode()[1:-1])
    for shift in range(3):
        for encoder in (base64.b64encode, base64.urlsafe_b64encode):
            text = encoder(b"\0" * shift + raw + b"\0\0")
            first = -(-shift * 8 // 6)  # the first character made only of the secret's bits
            last = (shift + len(raw)) * 8 // 6  # one past the last such character
            forms.add(text[first:last])
    return {f for f in forms if len(f) >= 16}


# --- the fake provider ------------------------------------------------------------------------------


@dataclass
class FakeProvider:
    """An OpenAI-compatible server that echoes the caller's key in its errors, as careless ones do."""

    seen_keys: list[str] = field(default_factory=list)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        key = dict(scope["headers"]).get(b"authorization", b"").decode().removeprefix("Bearer ")
        self.seen_keys.append(key)
        prompt = json.loads(body)["messages"][-1]["content"]
        case = next(c for c in [*PROVIDER_CASES, "provider garbage"] if c in prompt)
        if case in ("provider 401", "provider 500"):
            status = 401 if case == "provider 401" else 500
            error = {"message": f"Incorrect API key provided: {key}.", "type": "invalid_request_error",
                     "param": None, "code": "invalid_api_key"}  # fmt: skip
            await _respond(send, status, "application/json", json.dumps({"error": error}).encode())
            return
        if case == "provider garbage":  # a gateway's plain-text line (not in PROVIDER_CASES: see the module doc)
            await _respond(send, 200, "text/event-stream", f"data: upstream refused key {key}\n\n".encode())
            return
        events = [{"model": "gpt-test", "choices": [{"index": 0, "delta": {"content": "Hello from the provider"}}]}]
        if case == "provider stream error":
            events.append({"error": {"message": f"The key {key} was revoked.", "type": "invalid_api_key"}})
        else:
            events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
            events.append({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 4}})
        data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
        await _respond(send, 200, "text/event-stream", data)


async def _respond(send: Any, status: int, content_type: str, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", content_type.encode())]})
    await send({"type": "http.response.body", "body": body})


class RoutingModel:
    """The gated demo model, the OpenAI model for prompts about "provider", a crash for "crash"."""

    def __init__(self) -> None:
        self.demo = GatedDemoModel()
        self.openai = OpenAIChatModel("gpt-test")  # key and base URL from the environment

    @property
    def model_id(self) -> str:
        return "routing"

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamPart]:
        users = [m for m in request.messages if isinstance(m, UserMessage)]
        prompt = " ".join(p.text for p in users[-1].content if isinstance(p, TextPart)) if users else ""
        if "crash" in prompt:
            raise RuntimeError("simulated model crash")
        model = self.openai if "provider" in prompt else self.demo
        async for part in model.stream(request):
            yield part


# --- capturing everything ---------------------------------------------------------------------------


class Everything(logging.Handler):
    """Every log record, formatted with its traceback, stack and every extra attribute."""

    def __init__(self) -> None:
        super().__init__(level=1)
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))
        self.lines.append(repr({k: v for k, v in vars(record).items() if k not in ("msg", "args")}))
        self.lines.append(repr(record.msg) + repr(record.args))


@pytest.fixture
def all_logs(caplog: pytest.LogCaptureFixture) -> Iterator[Everything]:
    """Root at DEBUG (caplog), every relevant logger at TRACE and propagating, our handler on root."""
    caplog.set_level(logging.DEBUG)
    handler = Everything()
    names = ["", "durable_harness", "uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi", "httpx", "httpcore"]
    saved = {n: (logging.getLogger(n).level, logging.getLogger(n).propagate) for n in names}
    for name in names:
        logging.getLogger(name).setLevel(5)  # uvicorn's TRACE
        logging.getLogger(name).propagate = True
    logging.getLogger().addHandler(handler)
    try:
        yield handler
    finally:
        logging.getLogger().removeHandler(handler)
        for name, (level, propagate) in saved.items():
            logging.getLogger(name).setLevel(level)
            logging.getLogger(name).propagate = propagate


class Recorder:
    """An HTTP client that keeps every response: status line, raw headers and body."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.client = httpx.Client(timeout=30)
        self.responses: list[bytes] = []

    def keep(self, response: httpx.Response) -> httpx.Response:
        head = f"HTTP {response.status_code} {response.reason_phrase}\n".encode()
        head += b"".join(k + b": " + v + b"\n" for k, v in response.headers.raw)
        self.responses.append(head + b"\n" + response.content)
        return response

    def request(self, method: str, path: str, token: str | None = ALICE_TOKEN, **kw: Any) -> httpx.Response:
        headers = {**(bearer(token) if token else {}), **kw.pop("headers", {})}
        return self.keep(self.client.request(method, self.url + path, headers=headers, **kw))

    def chat(self, messages: list[dict[str, Any]], chat_id: str, token: str = ALICE_TOKEN) -> httpx.Response:
        return self.request("POST", "/api/chat", token, content=json.dumps({"id": chat_id, "messages": messages}))


# --- the workload -----------------------------------------------------------------------------------


def paused(http: Recorder, note: str, chat_id: str) -> PausedTurn:
    user = user_message(f"Save a note: {note}", f"u-{chat_id}")
    response = http.chat([user], chat_id)
    chunks = parse_sse_body(response.content)
    assert chunks[-1] == {"type": "finish", "finishReason": "tool-calls"}
    return PausedTurn(user, assemble_ui_message(chunks), response.headers["x-workflow-run-id"], chat_id)


def workload(http: Recorder, kit: LocalKit, model: RoutingModel) -> dict[str, str]:
    """Everything a deployment sees in a day, in miniature; returns the run ids by what they did."""
    runs: dict[str, str] = {}

    def turn(name: str, text: str, token: str = ALICE_TOKEN) -> httpx.Response:
        response = http.chat([user_message(text, f"u-{name}")], f"chat-{name}", token)
        assert response.status_code == 200, response.text
        runs[name] = response.headers["x-workflow-run-id"]
        return response

    turn("weather", "What is the weather in Reykjavik?")
    # approvals: approved, denied, tampered (chat POSTs), approved through the run API
    for name, change in (("approved", {}), ("denied", None), ("tampered", {"signature": "A" * 43})):
        pause = paused(http, name, f"chat-{name}")
        history = pause.answered(change is not None, **(change or {}))
        response = http.chat(history, f"chat-{name}")
        assert response.status_code == 200
        runs[name] = response.headers["x-workflow-run-id"]
    pause = paused(http, "by the run API", "chat-run-api")
    body = {"approvals": [{"approvalId": pause.part["approval"]["id"], "approved": True, "reason": "fine"}]}
    started = http.request("POST", f"/api/runs/{pause.run_id}/approvals", json=body)
    assert started.status_code == 202
    runs["run api"] = started.json()["runId"]
    http.request("GET", started.json()["stream"])
    # the provider: success, errors echoing the key, a stream error; then a crash
    for case in PROVIDER_CASES:
        turn(case, f"Ask the {case} please")
    turn("crash", "please crash now")
    # a cancelled live run
    with model.demo.holding():
        content = json.dumps({"id": "chat-cancel", "messages": [user_message("hold on, then talk")]})
        with http.client.stream("POST", f"{http.url}/api/chat", content=content, headers=bearer(ALICE_TOKEN)) as live:
            runs["cancelled"] = live.headers["x-workflow-run-id"]
            cancelled = http.request("POST", f"/api/runs/{runs['cancelled']}/cancel")
            assert cancelled.status_code == 200
            model.demo.gate.set()
            live.read()
            http.keep(live)
    # bob, strangers and bad requests
    turn("bob", "hello, I am bob", BOB_TOKEN)
    http.request("GET", f"/api/runs/{runs['weather']}", BOB_TOKEN)
    http.request("POST", f"/api/runs/{runs['weather']}/cancel", BOB_TOKEN)
    for headers in ({}, bearer(ALICE_TOKEN[:-1]), bearer(ALICE_TOKEN + "x"), {"authorization": f"Basic {BOB_TOKEN}"}):
        http.request("GET", f"/api/runs/{runs['weather']}", None, headers=headers)
        http.request("POST", "/api/chat", None, headers=headers, content=b"{}")
    http.request("POST", "/api/chat", content=b"{not json")
    http.request("POST", "/api/chat", content=json.dumps({"messages": [{"id": "s", "role": "system", "parts": []}]}))
    http.request("GET", f"/api/chat/{runs['weather']}/stream?startIndex=oops")
    http.request("GET", "/api/runs/..%2F..%2Fetc%2Fpasswd")
    http.request("GET", "/openapi.json", None)
    http.request("GET", "/health", None)
    # every run: status and the whole stream, as its owner
    for name, run_id in runs.items():
        token = BOB_TOKEN if name == "bob" else ALICE_TOKEN
        status = http.request("GET", f"/api/runs/{run_id}", token)
        assert status.status_code == 200 and status.json()["status"] not in ("not_started", "ready_for_next_step")
        stream = http.request("GET", f"/api/chat/{run_id}/stream?startIndex=0", token)
        assert parse_sse_body(stream.content)[-1]["type"] == "finish"
    return runs


def stored_everything(kit: LocalKit, data_dir: Path) -> list[tuple[str, bytes]]:
    """Every chunk of every run, every SQLite row, the raw bytes of every file under the data dir."""
    found: list[tuple[str, bytes]] = []
    for checkpoint in kit.store.list_runs(limit=10_000):
        found.append((f"checkpoint {checkpoint.run_id}", repr(checkpoint).encode()))
        found += [(f"chunk of {checkpoint.run_id}", c.encode()) for c in kit.log.read(checkpoint.run_id, 0)]
    database = next(data_dir.rglob("*.sqlite3"))
    with sqlite3.connect(database) as conn:
        for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
            for row in conn.execute(f'SELECT * FROM "{table}"').fetchall():
                found.append((f"row of {table}", repr(row).encode() + b"".join(
                    v if isinstance(v, bytes) else str(v).encode() for v in row
                )))  # fmt: skip
    found += [(f"file {p.relative_to(data_dir)}", p.read_bytes()) for p in sorted(data_dir.rglob("*")) if p.is_file()]
    return found


def test_no_secret_is_ever_written(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    all_logs: Everything,
    capfd: pytest.CaptureFixture[str],
    notes: Notes,
) -> None:
    provider = FakeProvider()
    data_dir = tmp_path / "data"
    quiet = {"log_config": None}  # leave the loggers as the fixture set them (no dictConfig)
    with serve_asgi(provider, **quiet) as provider_url:
        env = {
            "TOOL_APPROVAL_SECRET": f"{APPROVAL_SECRET_NEW}\n{APPROVAL_SECRET_OLD}",
            "AUTH_MODE": "token",
            "AUTH_TOKEN_HASHES": TOKEN_HASHES,
            "OPENAI_API_KEY": OPENAI_KEY,
            "OPENAI_BASE_URL": provider_url + "/v1",
            "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
            "AWS_SECRET_ACCESS_KEY": AWS_CANARY,
        }
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        model = RoutingModel()
        agent = Agent(model=model, tools=DEMO_TOOLS, max_retries=1, retry_initial_delay=0.01)
        kit = build_local_kit(agent, data_dir, slice_seconds=0.0, authenticator=authenticator_from_env(os.environ))
        with serve_asgi(kit.app, log_level="trace", access_log=True, **quiet) as url:
            http = Recorder(url)
            try:
                runs = workload(http, kit, model)
            finally:
                http.client.close()
    out, err = capfd.readouterr()

    # The workload did what it claims, with the secrets in flight.
    assert provider.seen_keys and set(provider.seen_keys) == {OPENAI_KEY}
    assert notes.writes == [("approved", "approved"), ("by the run API", "by the run API")]
    statuses = {name: kit.runner.load(run_id).status for name, run_id in runs.items()}
    assert statuses["cancelled"] == "cancelled" and statuses["crash"] == "failed"
    assert statuses["provider ok"] == "finished"
    for case in ("provider 401", "provider 500", "provider stream error"):
        assert statuses[case] == "failed" and "***" in (kit.runner.load(runs[case]).error or ""), case
    assert any("uvicorn.access" in line for line in all_logs.lines)  # the access log was captured
    assert any("simulated model crash" in line for line in all_logs.lines)  # and the crash's traceback

    haystacks: list[tuple[str, bytes]] = [
        *(("log record", line.encode()) for line in all_logs.lines),
        ("stdout", out.encode()),
        ("stderr", err.encode()),
        *(("HTTP response", r) for r in http.responses),
        *stored_everything(kit, data_dir),
    ]
    assert len(haystacks) > 500
    leaks = [
        f"{secret_name} in {where}: ...{hay[max(0, hay.find(form) - 80) : hay.find(form) + 80]!r}..."
        for secret_name, secret in SECRETS.items()
        for form in encoded_forms(secret)
        for where, hay in haystacks
        if form in hay
    ]
    assert not leaks, "\n".join(leaks[:20])


def test_the_encoded_forms_find_an_embedded_secret() -> None:
    """The scan's own check: every form is found inside a longer encoded blob."""
    for secret in SECRETS.values():
        forms = encoded_forms(secret)
        for prefix in (b"", b"x", b"xy"):
            blob = prefix + secret.encode() + b"tail"
            for encoded in (base64.b64encode(blob), base64.urlsafe_b64encode(blob).rstrip(b"="), blob.hex().encode()):
                assert any(f in encoded for f in forms), (secret, prefix, encoded)
        assert any(f in quote(f"a={secret}&b=1").encode() for f in forms)
