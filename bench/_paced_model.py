"""A paced OpenAI-compatible model server on loopback, for the benchmarks (not a benchmark itself).

``POST /v1/chat/completions`` (``"stream": true``) answers with Chat Completions chunks at a fixed
pace (without ``stream``: one ``chat.completion`` when its last delta would have been sent), like
a real model's HTTP API, so the kit, its peers and a bare client all read the same model over the
same kind of connection. What a turn looks like is set by the request's ``model`` field, as a
query string, so one server serves every configuration::

    paced?deltas=20&rate=1000&ttft=0.2&tools=5&parallel=1

* ``deltas``: text deltas per model call (step), default 20;
* ``rate``: deltas per second, default 1000 (0: as fast as the server writes); the deltas follow
  one absolute schedule (``ttft + i / rate`` after the request arrived), so pacing does not drift;
* ``ttft``: the initial delay before the first delta of each call, seconds, default 0;
* ``tools``: how many calls of a turn end in tool calls (then one answers with ``stop``); the
  server counts the ``tool`` messages after the last ``user`` message to know which call it is;
* ``parallel``: tool calls per such step, default 1 (a ``lookup`` function with a JSON query).

Each text delta is ``" w<i>@<t>"`` where ``t`` is ``time.monotonic()`` when the server wrote it:
on Linux that clock (``CLOCK_MONOTONIC``) is the same in every process of the machine, so any
receiver, in any process, computes ``receive - emit`` with :func:`emitted`.

``GET /requests`` returns, for every completion request so far, ``{"at": monotonic arrival time,
"step": its index in the turn, "bytes": body size}`` (``DELETE /requests`` forgets them): what
``first_chunk.py`` lines up with the storage requests sent before the model was called.

:func:`paced_server` runs it in its own process (``python bench/_paced_model.py``), so the
model's work never shares the measured process's interpreter.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import httpx

DELTA = re.compile(r"@(\d+\.\d+)")
DEFAULTS = {"deltas": 20.0, "rate": 1000.0, "ttft": 0.0, "tools": 0.0, "parallel": 1.0}


def model_name(**settings: float) -> str:
    """The ``model`` field that asks for ``settings`` (see the module's docstring)."""
    unknown = set(settings) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"unknown paced-model settings {sorted(unknown)}")
    return "paced?" + "&".join(f"{k}={v:g}" for k, v in settings.items())


def emitted(text: str) -> list[float]:
    """The emission times (``time.monotonic()``) carried by the text deltas in ``text``."""
    return [float(m) for m in DELTA.findall(text)]


def settings_of(model: str) -> dict[str, float]:
    """The settings a ``model`` field asks for, over the defaults."""
    out = dict(DEFAULTS)
    for key, value in parse_qsl(model.partition("?")[2]):
        if key in out:
            out[key] = float(value)
    return out


def step_of(messages: list[dict[str, Any]], parallel: int) -> int:
    """Which model call of the turn this is: the tool results since the last user message, per step."""
    tools = 0
    for message in reversed(messages):
        if message.get("role") == "user":
            break
        tools += message.get("role") == "tool"
    return tools // max(1, parallel)


def _event(model: str, delta: dict[str, Any], finish: str | None = None) -> bytes:
    chunk = {"id": "chatcmpl-paced", "object": "chat.completion.chunk", "created": 0, "model": model,
             "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip
    return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"


class PacedOpenAI:
    """The ASGI app: paced Chat Completions streams, and the log of the requests it answered."""

    def __init__(self) -> None:
        self.requests: list[dict[str, float]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Serve one ASGI request."""
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        arrived = time.monotonic()
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        path, method = scope["path"], scope["method"]
        if path == "/requests":
            if method == "DELETE":
                self.requests.clear()
            await _reply(send, 200, json.dumps(self.requests).encode(), b"application/json")
            return
        if path.rstrip("/").endswith("/chat/completions") and method == "POST":
            await self._complete(send, json.loads(body), arrived, len(body))
            return
        await _reply(send, 404, b'{"error":{"message":"POST /v1/chat/completions"}}', b"application/json")

    async def _complete(self, send: Any, request: dict[str, Any], arrived: float, size: int) -> None:
        model = str(request.get("model", "paced"))
        s = settings_of(model)
        parallel = int(s["parallel"])
        step = step_of(request.get("messages", []), parallel)
        self.requests.append({"at": arrived, "step": step, "bytes": size})
        if not request.get("stream"):
            await self._whole(send, model, s, step)
            return
        headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})

        async def out(data: bytes) -> None:
            await send({"type": "http.response.body", "body": data, "more_body": True})

        await out(_event(model, {"role": "assistant", "content": ""}))
        loop = asyncio.get_running_loop()
        start = loop.time() + s["ttft"]
        for i in range(int(s["deltas"])):
            due = start + (i / s["rate"] if s["rate"] > 0 else 0)
            if due > loop.time():
                await asyncio.sleep(due - loop.time())
            await out(_event(model, {"content": f" w{i}@{time.monotonic():.6f}"}))
        if step < int(s["tools"]):
            for k in range(parallel):
                args = json.dumps({"query": f"question {step}.{k}", "limit": 5}, separators=(",", ":"))
                call = {"index": k, "id": f"call_{step:04d}_{k}", "type": "function",
                        "function": {"name": "lookup", "arguments": args}}  # fmt: skip
                await out(_event(model, {"tool_calls": [call]}))
            await out(_event(model, {}, "tool_calls"))
        else:
            await out(_event(model, {}, "stop"))
        usage = {"prompt_tokens": 100 + 10 * step, "completion_tokens": int(s["deltas"])}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        tail = {"id": "chatcmpl-paced", "object": "chat.completion.chunk", "created": 0, "model": model,
                "choices": [], "usage": usage}  # fmt: skip
        await out(b"data: " + json.dumps(tail).encode() + b"\n\ndata: [DONE]\n\n")
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _whole(self, send: Any, model: str, s: dict[str, float], step: int) -> None:
        """A request without ``stream``: one ``chat.completion`` once its last delta is due."""
        deltas = int(s["deltas"])
        await asyncio.sleep(s["ttft"] + (max(0, deltas - 1) / s["rate"] if s["rate"] > 0 else 0))
        now = time.monotonic()
        message: dict[str, Any] = {"role": "assistant", "content": "".join(f" w{i}@{now:.6f}" for i in range(deltas))}
        finish = "stop"
        if step < int(s["tools"]):
            message["tool_calls"] = [
                {"id": f"call_{step:04d}_{k}", "type": "function", "function": {"name": "lookup", "arguments":
                 json.dumps({"query": f"question {step}.{k}", "limit": 5}, separators=(",", ":"))}}
                for k in range(int(s["parallel"]))
            ]  # fmt: skip
            finish = "tool_calls"
        body = {"id": "chatcmpl-paced", "object": "chat.completion", "created": 0, "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 100 + 10 * step, "completion_tokens": deltas,
                          "total_tokens": 100 + 10 * step + deltas}}  # fmt: skip
        await _reply(send, 200, json.dumps(body).encode(), b"application/json")


async def _reply(send: Any, status: int, body: bytes, kind: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", kind)]})
    await send({"type": "http.response.body", "body": body})


@contextmanager
def paced_server() -> Iterator[str]:
    """The paced model in its own process on a loopback port; yields the base URL (``.../v1``)."""
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--port", "0"],
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("http://"):
            raise RuntimeError(f"the paced model server did not start (said {line!r})")
        base = line.strip()
        with httpx.Client() as client:  # ready when it answers
            for _ in range(200):
                try:
                    client.get(f"{base}/requests", timeout=1)
                    break
                except httpx.TransportError:
                    time.sleep(0.02)
        yield f"{base}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def model_requests(base_url: str, *, reset: bool = False) -> list[dict[str, float]]:
    """The completion requests the server at ``base_url`` (``.../v1``) answered (``reset``: and forget them)."""
    root = base_url.removesuffix("/v1")
    response = httpx.request("DELETE" if reset else "GET", f"{root}/requests", timeout=10)
    return list(response.json())


URL_ENV, MODEL_ENV = "PACED_MODEL_URL", "PACED_MODEL_NAME"


def build_agent() -> Any:
    """The benchmarks' tool-loop agent on the paced server named by ``$PACED_MODEL_URL`` (``.../v1``),
    asking for ``$PACED_MODEL_NAME`` (:func:`model_name`): an ``AGENT=_paced_model:build_agent``
    for the deployed stack or a server in another process."""
    import os

    from _common import lookup_tool
    from durable_harness import ToolLoopAgent, step_count_is
    from durable_harness.models.openai import OpenAIChatModel

    name = os.environ.get(MODEL_ENV, "paced")
    steps = int(settings_of(name)["tools"]) + 1
    model = OpenAIChatModel(name, base_url=os.environ[URL_ENV], api_key="bench")
    return ToolLoopAgent(model=model, tools=[lookup_tool(200)], stop_when=[step_count_is(steps)])


def main() -> None:
    """Serve on loopback (``--port 0``: any free port) and print the server's URL on one line."""
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # TCP_NODELAY, as uvicorn
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    print(f"http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(PacedOpenAI(), log_level="warning", lifespan="on", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
