"""Shared helpers of the benchmark scripts (not a benchmark itself).

* :func:`serve`: the ASGI app under uvicorn or the deployed chat function's server, on a loopback
  port, in a background thread;
* :class:`MotoAws`: the deployed adapters' DynamoDB table and S3 bucket under moto, with
  :class:`RequestMeter` counting requests, bytes and DynamoDB capacity units by operation;
* :class:`MotoEndpoint`: that moto over real HTTP on loopback, for another process
  (``AWS_ENDPOINT_URL``);
* :data:`PRICES` and the per-run cost helpers: the library's (:mod:`durable_harness.telemetry.costs`);
* small formatting and statistics helpers.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import platform
import statistics
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The prices and the per-run cost arithmetic are the library's (one table: the deployed run API
# prices runs with it too); the scripts import them from here or from there.
from durable_harness.telemetry.costs import PRICE_DATE as PRICE_DATE
from durable_harness.telemetry.costs import PRICES as PRICES
from durable_harness.telemetry.costs import overhead_note as overhead_note
from durable_harness.telemetry.costs import overhead_rows as overhead_rows
from durable_harness.telemetry.costs import price_banner as price_banner
from durable_harness.telemetry.costs import request_dollars

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # the scripts run as `python bench/x.py`: make `tests` importable
    sys.path.insert(0, str(REPO))


def serve(app: Any, *, server: str = "uvicorn") -> AbstractContextManager[str]:
    """Serve ``app`` on a loopback port (the test suite's helper, with TCP_NODELAY on): ``server``
    is ``"uvicorn"`` (the local kit's server, ``make dev``) or ``"httpd"`` (the deployed chat
    function's, :mod:`lambda_fastpath.httpd`)."""
    from tests.support import serve as serve_app

    # A baseline tree measured by deployed_wiring.py has a tests.support without the choice.
    return serve_app(app) if server == "uvicorn" else serve_app(app, server=server)


def deployed_server() -> str:
    """The server the deployed chat function runs in this tree (``httpd``: ``lambda_fastpath.httpd``, or
    ``durable_harness.server.httpd`` in trees from before ``lambda_fastpath``; ``uvicorn`` in trees from
    before ``functions/chat/serve.py``): a baseline tree is measured with its own."""
    import importlib.util

    if importlib.util.find_spec("lambda_fastpath") or importlib.util.find_spec("durable_harness.server.httpd"):
        return "httpd"
    return "uvicorn"


REGION = "us-east-1"
ACCOUNT = "123456789012"  # moto's default account
TABLE = "bench-runs"
BUCKET = "bench-chunks"

S3_PUT_CLASS = {"PutObject", "CopyObject", "PostObject", "ListObjectsV2", "ListObjects", "CompleteMultipartUpload"}


# --- statistics and output ------------------------------------------------------------------------


def pct(values: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) of ``values`` (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def busy_ms(requests: Sequence[Request], ops: set[str]) -> float:
    """Milliseconds during which at least one request of ``ops`` was in flight (parallel ones once)."""
    spans = sorted((r.at, r.at + r.ms / 1000) for r in requests if r.op in ops)
    total, end = 0.0, float("-inf")
    for a, b in spans:
        total += max(0.0, b - max(a, end))
        end = max(end, b)
    return total * 1000


def median(values: Sequence[float]) -> float:
    """The median of ``values``."""
    return statistics.median(values)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table (pastes straight into bench/README.md)."""
    cells = [[str(h) for h in headers], *[[_cell(v) for v in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |" for row in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        if value == 0:
            return "0"
        if abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 1:
            return f"{value:.2f}"
        return f"{value:.3g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def verdict(met: bool, detail: str = "") -> str:
    """``MET`` / ``MISSED`` with an optional explanation."""
    return ("MET" if met else "MISSED") + (f" ({detail})" if detail else "")


def machine() -> str:
    """One line describing where the figures were measured."""
    load = os.getloadavg()[0]
    return (
        f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, {platform.machine()}, "
        f"Python {platform.python_version()}, {platform.system()} {platform.release()}, load average {load:.1f}"
    )


# --- HTTP -----------------------------------------------------------------------------------------


# --- AWS under moto -------------------------------------------------------------------------------


@dataclass
class Request:
    """One HTTP request an AWS client sent (one attempt)."""

    service: str
    op: str
    sent: int  # request bytes (body)
    received: int = 0  # response bytes (body)
    wru: float = 0.0  # DynamoDB write request units
    rru: float = 0.0  # DynamoDB read request units
    at: float = 0.0  # time.monotonic() when sent
    item: str = ""  # DynamoDB: which item (the sort key: "run" record, "c#..." chunk-log items)
    ms: float = 0.0  # from before-send to after-call (moto's time plus the client's parsing)
    label: str = ""  # what the meter's ``label`` callable said when the request was sent
    attrs: frozenset[str] = frozenset()  # DynamoDB PutItem: the names of the attributes it writes
    written: int = 0  # DynamoDB: bytes of the items as written (DynamoDB's item sizes, after the write)


class RequestMeter:
    """Counts the requests of boto3 clients under moto, by operation, with bytes and capacity units.

    Hooks botocore's ``before-send`` (every HTTP attempt, before moto answers it) and
    ``after-call`` events. DynamoDB capacity is computed the way DynamoDB bills it, from the item
    sizes moto holds (moto's ``Item.size()``, which follows DynamoDB's sizing rules closely):
    a write costs ``ceil(max(size before, size after) / 1 KB)`` WRU, a read
    ``ceil(size / 4 KB)`` RRU, half for an eventually consistent read; never less than one unit
    (half for an eventually consistent read). A Query is billed on the total size of the items it
    returns (no filter is used), computed from the response with DynamoDB's sizing rules.

    ``label``, when given, is called as each request is sent (in the sending thread); what it
    returns is kept in :attr:`Request.label` (e.g. which function sent it).
    """

    def __init__(self, *clients: Any, label: Any = None) -> None:
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._label = label
        for client in clients:
            self.attach(client)

    def attach(self, client: Any) -> None:
        """Count this client's requests too."""
        client.meta.events.register_first("before-send", self._before_send)
        client.meta.events.register("after-call", self._after_call)

    def reset(self) -> None:
        """Forget everything counted so far."""
        with self._lock:
            self.requests.clear()

    # --- views ---

    def counts(self) -> Counter[str]:
        """Requests by operation."""
        return Counter(r.op for r in self.requests)

    def total(self) -> int:
        """All requests."""
        return len(self.requests)

    def by_op(self, *, items: bool = False) -> dict[str, dict[str, float]]:
        """``{op: {"n", "sent", "received", "wru", "rru"}}``; with ``items``, DynamoDB operations are
        split by item (``UpdateItem run`` for the run record, ``UpdateItem log`` for the log head)."""
        out: dict[str, dict[str, float]] = defaultdict(lambda: {"n": 0, "sent": 0, "received": 0, "wru": 0, "rru": 0})
        for r in list(self.requests):
            row = out[f"{r.op} {item_kind(r)}".strip() if items else r.op]
            row["n"] += 1
            row["sent"] += r.sent
            row["received"] += r.received
            row["wru"] += r.wru
            row["rru"] += r.rru
        return dict(out)

    def reads(self) -> int:
        """Requests that read storage (GetItem, Query, GetObject, ListObjectsV2, HeadObject)."""
        return sum(1 for r in self.requests if r.op in {"GetItem", "Query", "GetObject", "ListObjectsV2", "HeadObject"})

    def dollars(self) -> dict[str, float]:
        """The request cost by category (S3 PUT class, S3 GET class, DynamoDB writes, reads)."""
        rows = self.by_op()
        s3_put = sum(v["n"] for op, v in rows.items() if op in S3_PUT_CLASS)
        s3_get = sum(v["n"] for op, v in rows.items() if op in {"GetObject", "HeadObject"})
        wru = sum(v["wru"] for v in rows.values())
        rru = sum(v["rru"] for v in rows.values())
        return request_dollars(s3_put=s3_put, s3_get=s3_get, wru=wru, rru=rru)

    # --- hooks ---

    def _before_send(self, request: Any, event_name: str, **_: Any) -> None:
        _, service, op = event_name.split(".", 2)
        body = request.body
        length = request.headers.get("X-Amz-Decoded-Content-Length") or request.headers.get("Content-Length")
        if length is not None:
            sent = int(length)
        elif isinstance(body, bytes | bytearray):
            sent = len(body)
        elif isinstance(body, str):
            sent = len(body.encode())
        else:
            sent = 0
        entry = Request(service=service, op=op, sent=sent, at=time.monotonic())
        if self._label is not None:
            entry.label = str(self._label())
        if service == "s3":
            entry.item = request.url.split("?", 1)[0]  # which object (segment or state)
        if service == "dynamodb" and op == "TransactWriteItems":
            # Two write units per KB of each item written (transactions cost double), each item
            # billed at the larger of its sizes before and after (as for UpdateItem); creating a
            # run puts its record and its empty chunk log in one transaction.
            payload = json.loads(body) if body else {}
            writes = [next(iter(e.values())) for e in payload.get("TransactItems", [])]
            keys = [(w["TableName"], w.get("Key") or {k: w["Item"][k] for k in ("pk", "sk") if k in w["Item"]})
                    for w in writes]  # fmt: skip
            request.context["bench"] = (entry, {"Transact": keys}, [_size_of(t, k) for t, k in keys])
        if service == "dynamodb" and op == "Query":
            request.context["bench"] = (entry, {"Query": json.loads(body) if body else {}}, 0)
        if service == "dynamodb" and op in ("GetItem", "PutItem", "UpdateItem", "DeleteItem"):
            payload = json.loads(body) if body else {}
            key = payload.get("Key") or payload.get("Item") or {}
            entry.item = str(key.get("sk", {}).get("S", ""))
            entry.attrs = frozenset(payload.get("Item", {}))
            request.context["bench"] = (entry, payload, _item_size(payload))
        with self._lock:
            self.requests.append(entry)
        request.context.setdefault("bench", (entry, None, 0))

    def _after_call(
        self, http_response: Any, model: Any, context: dict[str, Any], parsed: Any = None, **_: Any
    ) -> None:
        entry, payload, before = context.get("bench", (None, None, 0))
        if entry is None:
            return
        entry.ms = (time.monotonic() - entry.at) * 1000
        length = http_response.headers.get("content-length")
        if length is not None:
            entry.received = int(length)
        elif not model.has_streaming_output:
            entry.received = len(http_response.content or b"")
        if payload is None or http_response.status_code >= 300:
            return
        if "Transact" in payload:
            after = [_size_of(table, key) for table, key in payload["Transact"]]
            entry.wru = float(sum(2 * max(1, math.ceil(max(b, a) / 1024)) for b, a in zip(before, after, strict=True)))
            entry.written = sum(after)
            return
        if "Query" in payload:  # the sizes of the items read, summed, then rounded up to 4 KB units
            size = sum(ddb_item_size(item) for item in (parsed or {}).get("Items", []))
            units = max(1, math.ceil(size / 4096))
            entry.rru = float(units) if payload["Query"].get("ConsistentRead") else units / 2
            return
        after = _item_size(payload)
        if entry.op == "GetItem":
            units = max(1, math.ceil(after / 4096))
            entry.rru = float(units) if payload.get("ConsistentRead") else units / 2
        else:
            entry.wru = float(max(1, math.ceil(max(before, after) / 1024)))
            entry.written = after


def item_kind(request: Request) -> str:
    """What a request touched: ``run`` (record), ``chunk item``, ``segment index``, ``log`` (the
    previous log head), an S3 ``segment``, ``spill`` or ``state`` object; empty when nothing in
    particular (a Query, a listing)."""
    if request.item.startswith("c#"):
        return "segment index" if request.item.endswith("#~") else "chunk item"
    if request.service == "s3":
        for kind in ("seg", "spill", "state"):
            if f"/{kind}/" in request.item:
                return {"seg": "segment"}.get(kind, kind)
        return ""
    return request.item


def ddb_item_size(item: dict[str, Any]) -> int:
    """An item's size as DynamoDB bills it: attribute names plus values (wire format, as a client
    without a resource layer returns it)."""
    return sum(len(name.encode()) + _value_size(value) for name, value in item.items())


def _value_size(value: dict[str, Any]) -> int:
    ((kind, v),) = value.items()
    if kind == "S":
        return len(v.encode())
    if kind == "B":
        return len(v)
    if kind == "N":
        digits = v.lstrip("-").replace(".", "").lstrip("0") or "0"
        return (len(digits) + 1) // 2 + 1
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "M":
        return 3 + sum(len(k.encode()) + _value_size(x) + 1 for k, x in v.items())
    if kind == "L":
        return 3 + sum(_value_size(x) + 1 for x in v)
    return sum(len(x.encode()) if isinstance(x, str) else len(x) for x in v)  # SS, NS, BS


def _item_size(payload: dict[str, Any]) -> int:
    """The size of the item a DynamoDB request names, as moto holds it now (0 if absent)."""
    key = payload.get("Key")
    if key is None and "Item" in payload:
        key = {k: payload["Item"][k] for k in ("pk", "sk") if k in payload["Item"]}
    if not key:
        return 0
    return _size_of(payload["TableName"], key)


def _size_of(table: str, key: dict[str, Any]) -> int:
    """The size of the item at ``key``, as moto holds it now (0 if absent)."""
    from moto.dynamodb.models import dynamodb_backends

    try:
        item = dynamodb_backends[ACCOUNT][REGION].get_item(table, key)
    except Exception:
        return 0
    return int(item.size()) if item is not None else 0


class MotoAws:
    """moto with the deployed layout: the runs table (pk/sk, TTL) and the chunk bucket.

    ``clients()`` makes a fresh (DynamoDB, S3) client pair, as another Lambda would have; every
    pair is attached to :attr:`meter` unless ``meter=None`` is given.
    """

    def __init__(self) -> None:
        self.meter = RequestMeter()
        self._mock: Any = None

    def __enter__(self) -> MotoAws:
        from moto import mock_aws

        for name, value in (
            ("AWS_DEFAULT_REGION", REGION),
            ("AWS_ACCESS_KEY_ID", "testing"),
            ("AWS_SECRET_ACCESS_KEY", "testing"),
            ("AWS_SESSION_TOKEN", "testing"),
        ):
            os.environ[name] = value
        self._mock = mock_aws()
        self._mock.start()
        ddb, s3 = self.clients(meter=None)
        create_runs_table(ddb, TABLE, ttl=True)
        s3.create_bucket(Bucket=BUCKET)
        return self

    def __exit__(self, *exc: object) -> None:
        self._mock.stop()

    def clients(self, meter: RequestMeter | str | None = "default") -> tuple[Any, Any]:
        """A new (DynamoDB, S3) client pair with the runtime's botocore configuration."""
        import boto3
        from durable_harness.aws.runtime import CLIENT_CONFIG

        ddb = boto3.client("dynamodb", region_name=REGION, config=CLIENT_CONFIG)
        s3 = boto3.client("s3", region_name=REGION, config=CLIENT_CONFIG)
        target = self.meter if meter == "default" else meter
        if isinstance(target, RequestMeter):
            target.attach(ddb)
            target.attach(s3)
        return ddb, s3

    def log(self, ddb: Any, s3: Any, **options: Any) -> Any:
        """The deployed chunk log on these clients."""
        from durable_harness.aws import DynamoChunkLog

        return DynamoChunkLog(TABLE, dynamodb_client=ddb, s3_client=s3, bucket=BUCKET, **options)

    def store(self, ddb: Any, s3: Any, **options: Any) -> Any:
        """The DynamoDB checkpoint store on these clients."""
        from durable_harness.aws import DynamoCheckpointStore

        return DynamoCheckpointStore(TABLE, client=ddb, s3_client=s3, bucket=BUCKET, **options)

    def put_log_direct(self, run_id: str, chunks: Sequence[str], per_item: int, gen: str = "0000000000000") -> None:
        """Store a chunk log straight into moto (no HTTP): builds big logs fast."""
        put_log_direct(TABLE, run_id, chunks, per_item, gen=gen)


def put_log_direct(
    table: str, run_id: str, chunks: Sequence[str], per_item: int, epoch: int = 1, gen: str = "0000000000000"
) -> None:
    """``chunks`` as ``DynamoChunkLog`` items of ``per_item`` chunks of generation ``gen`` (the
    default: a log without a run record), straight into moto's DynamoDB backend (no HTTP, no
    conditions): a 100k-chunk log in a second instead of 10k requests."""
    from durable_harness.aws.chunklog.items import chunk_key, encode_chunks
    from moto.dynamodb.models import dynamodb_backends

    backend = dynamodb_backends[ACCOUNT][REGION]
    for start in range(0, len(chunks), per_item):
        part = chunks[start : start + per_item]
        item = {"pk": {"S": run_id}, "sk": {"S": chunk_key(gen, start)}, "n": {"N": str(len(part))},
                "e": {"N": str(epoch)}, "w": {"S": "direct"}, "d": encode_chunks(part).attribute}  # fmt: skip
        backend.put_item(table, item)


def log_generation(ddb: Any, table: str, run_id: str) -> str:
    """The generation of a run's current chunk log (what the run record's creation wrote)."""
    found = ddb.query(
        TableName=table, KeyConditionExpression="pk = :p AND begins_with(sk, :c)", ScanIndexForward=False,
        ExpressionAttributeValues={":p": {"S": run_id}, ":c": {"S": "c#"}}, Limit=1,
    )["Items"]  # fmt: skip
    return str(found[0]["sk"]["S"].split("#")[1])


def text_delta(i: int) -> str:
    """A realistic text-delta chunk (what a model's token becomes), ~50 bytes."""
    return f'{{"type":"text-delta","id":"t0","delta":" word{i}"}}'


# --- a scripted agent -----------------------------------------------------------------------------


def scripted_tool_agent(
    *,
    steps: int,
    deltas: Sequence[int] | int,
    rate: float | None = None,
    ttft: float = 0.0,
    result_bytes: int = 200,
    final_text: bool = True,
) -> Any:
    """A ToolLoopAgent over a scripted model: each step streams text deltas and calls ``lookup``.

    With ``final_text`` the last step only answers (finish reason ``stop``); otherwise every step
    is a tool call plus its result and ``stop_when`` ends the turn after ``steps`` steps.
    ``rate`` paces the deltas (per second; None: as fast as the loop goes); ``ttft`` is the
    model's time to first token at each step. ``lookup`` returns about ``result_bytes`` of JSON.
    """
    from durable_harness import ToolLoopAgent, step_count_is
    from durable_harness.models.base import finish
    from durable_harness.models.scripted import FunctionModel
    from durable_harness.protocol import harness_parts as hp

    per_step = [deltas] * steps if isinstance(deltas, int) else list(deltas)

    async def step(request: Any, index: int) -> Any:
        if ttft:
            await asyncio.sleep(ttft)
        yield hp.TextStartPart(id=f"t{index}")
        for i in range(per_step[min(index, steps - 1)]):
            yield hp.TextDeltaPart(id=f"t{index}", delta=f" w{i}")
            await asyncio.sleep(1 / rate if rate else 0)
        yield hp.TextEndPart(id=f"t{index}")
        if final_text and index >= steps - 1:
            yield finish("stop", input_tokens=1000 + 100 * index, output_tokens=per_step[-1])
            return
        call_id = f"call_{index:03d}"
        raw = json.dumps({"query": f"question {index}", "limit": 5}, separators=(",", ":"))
        yield hp.ToolInputStartPart(id=call_id, tool_name="lookup")
        yield hp.ToolInputDeltaPart(id=call_id, delta=raw)
        yield hp.ToolInputEndPart(id=call_id)
        yield hp.ToolCallPart(tool_call_id=call_id, tool_name="lookup", input=raw)
        yield finish("tool-calls", input_tokens=1000 + 100 * index, output_tokens=per_step[index])

    return ToolLoopAgent(model=FunctionModel(step), tools=[lookup_tool(result_bytes)], stop_when=[step_count_is(steps)])


def lookup_tool(result_bytes: int = 200, on_call: Any = None) -> Any:
    """The benchmarks' ``lookup`` tool: returns about ``result_bytes`` of JSON for a ``query``
    (``on_call(query)`` first, when given: ``peers.py``'s crash test records each execution)."""
    from durable_harness import Tool

    async def lookup(args: dict[str, Any]) -> dict[str, Any]:
        if on_call is not None:
            on_call(args["query"])
        filler = "x" * max(0, result_bytes - 60)
        return {"query": args["query"], "answer": filler, "source": "bench"}

    return Tool(
        name="lookup",
        description="Look something up.",
        input_schema={"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}}},
        execute=lookup,
    )


def user_turn(text: str = "Go.") -> list[Any]:
    """The model messages of a one-message user turn."""
    from durable_harness.messages import TextPart, UserMessage

    return [UserMessage(content=[TextPart(text=text)])]


from tests.motoserver import MotoEndpoint as MotoEndpoint  # noqa: E402  (the tests use it too)
from tests.motoserver import create_runs_table  # noqa: E402
