"""``first_chunk.py``'s first chunk, stage by stage: the tables it prints and its MISSED rows' ``why`` (issue 20).

* **Local kit**: a :class:`~_stages.StageProbe` on the kit served in the benchmark's process, with
  three more stages than ``relay_latency.py`` prints (:data:`LOCAL_STAGES`): the slice's trip
  split where it loads the run and appends ``start``, and the model server's arrival time (its
  ``GET /requests``; ``time.monotonic``, the clock ``perf_counter`` reads on Linux too).
* **Deployed wiring**: every AWS request the chat function sends is labelled with the library
  functions that sent it (:func:`label_callers`: the innermost one of the runner, server or chunk
  writer, and the one that made the request), so each storage request before the model request
  says what it is for; the first delta's flush (its ``PutItem``) splits the relay.
"""

from __future__ import annotations

import sys
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from _common import busy_ms, item_kind, median
from _stages import LABELS, StageProbe

START = '"type":"start"'  # the `start` chunk (not start-step)
LOCAL_STAGES = ("received", "created", "leased", "loaded", "claimed", "started", "model request", "delta",
                "durable", "signalled", "read", "sent", "client")  # fmt: skip
LOCAL_LABELS = LABELS | {
    "created": "run created (SQLite insert; worker trip 1)",
    "leased": "its lease taken (the same trip)",
    "loaded": "slice's trip: run loaded (worker trip 2)",
    "claimed": "claimed, log opened (run folder, fence file)",
    "started": "`start` appended (the same trip)",
    "model request": "the model server received the request",
}


def probe_kit(probe: StageProbe, kit: Any) -> Any:
    """``probe`` on a local kit with :data:`LOCAL_STAGES`' extra marks; returns the ASGI app to serve."""
    app = probe.attach(kit)
    probe.after(kit.store, "load", "loaded", lambda *_: "created" in probe.current)  # the slice's, not an earlier one
    probe.after(kit.log, "append", "started", lambda _r, _id, _s, chunks, _e: any(START in c for c in chunks))
    return app


def local_why(local: dict[str, Any], rows: Sequence[Sequence[Any]], stages: Sequence[str]) -> str:
    """The local TTFC's reason: the kit's time before the model request and after it against the
    direct request's, with the probe's ``rows`` (label, at, step) of ``stages`` on either side."""
    kit, direct = local["kit"], local["direct"]
    names = list(kit)[1:]  # before the model request, the model, the relay
    k, d = ({s: median(p[s]) for s in names} for p in (kit, direct))
    split = stages.index("model request") + 1
    reached = [s for s in stages if any(s in t for t in local["_probe"].turns)]
    steps = dict(zip(reached, rows, strict=True))
    before = ", ".join(f"{steps[s][0]} {steps[s][2]:.1f}" for s in reached if stages.index(s) < split)
    after = ", ".join(f"{steps[s][0]} {steps[s][2]:.1f}" for s in reached if stages.index(s) > split)
    b, m, r = names
    return (f"{k[b] - d[b]:+.1f} ms before the model request (kit {k[b]:.1f}, direct {d[b]:.1f} ms; p50 ms per "
            f"stage: {before}); the model {k[m] - d[m]:+.1f} ms; the relay {k[r] - d[r]:+.1f} ms (kit {k[r]:.1f}, "
            f"direct {d[r]:.1f}: {after})")  # fmt: skip


# --- deployed -------------------------------------------------------------------------------------

_PURPOSE = ("durable_harness.runner", "durable_harness.server", "durable_harness.chunks", "durable_harness.functions")


def library_caller() -> str:
    """``purpose: maker`` of the request being sent from this thread: the innermost library function of
    the runner, server or chunk writer on the stack, and the innermost library function (the adapter's)."""
    maker = purpose = None
    frame = sys._getframe(1)
    while frame is not None:
        module = str(frame.f_globals.get("__name__", ""))
        if module.startswith("durable_harness"):
            maker = maker or frame.f_code.co_qualname
            if module.startswith(_PURPOSE):
                purpose = frame.f_code.co_qualname
                break
        frame = frame.f_back  # type: ignore[assignment]
    if purpose is None or purpose == maker:
        return maker or "?"
    return f"{purpose}: {maker}"


def label_callers(meter: Any) -> None:
    """Label each request ``meter`` counts with :func:`library_caller` too (after its own label and ``@``)."""
    own = meter._label
    meter._label = lambda: f"{own() if own is not None else ''}@{library_caller()}"


def _key(request: Any) -> str:
    return f"{request.op} {item_kind(request)}".strip() + f" ({request.label.split('@', 1)[-1]})"


def deployed_breakdown(result: dict[str, Any]) -> dict[str, Any]:
    """Per kit turn of :func:`first_chunk.ttfc` (deployed): the storage requests before the model
    request by kind and caller, the time outside them, and the relay split at the first delta's flush."""
    turns = result["_turns"]
    counts: dict[str, list[int]] = defaultdict(lambda: [0] * len(turns))
    ms: dict[str, list[float]] = defaultdict(lambda: [0.0] * len(turns))
    outside, wait, put, rest = [], [], [], []
    for i, t in enumerate(turns):
        before = [r for r in t["requests"] if t["sent"] <= r.at <= t["arrived"]]
        for r in before:
            counts[_key(r)][i] += 1
            ms[_key(r)][i] += r.ms
        outside.append((t["arrived"] - t["sent"]) * 1000 - busy_ms(before, {r.op for r in before}))
        flushes = sorted((r for r in t["requests"] if "|append" in r.label and r.at >= t["emit"]), key=lambda r: r.at)
        if flushes:  # the delta's: the first append sent after its emission
            f = flushes[0]
            wait.append((f.at - t["emit"]) * 1000)
            put.append(f.ms)
            rest.append((t["received"] - f.at) * 1000 - f.ms)

    def first_sent(key: str) -> float:
        return min((r.at - t["sent"] for t in turns for r in t["requests"] if _key(r) == key), default=0.0)

    rows = []
    for key, n in sorted(counts.items(), key=lambda kv: first_sent(kv[0])):
        took = [v for v in ms[key] if v]
        rows.append([key, sum(n) / len(turns), f"{sum(1 for x in n if x)}/{len(turns)}", median(took) if took else 0.0])
    return {"rows": rows, "outside": median(outside), "wait": median(wait) if wait else None,
            "put": median(put) if put else None, "rest": median(rest) if rest else None}  # fmt: skip


def deployed_why(result: dict[str, Any], b: dict[str, Any]) -> str:
    """The deployed TTFC's reason, from :func:`deployed_breakdown`'s figures ``b``."""
    kit, direct = result["kit"], result["direct"]
    bm, m, r = list(kit)[1:]
    k, d = ({s: median(p[s]) for s in (bm, m, r)} for p in (kit, direct))
    requests = ", ".join(f"{key} x{n:g} {at:.1f} ms" for key, n, _, at in b["rows"])
    relay = "no flush after the delta was emitted"
    if b["wait"] is not None:
        relay = (f"the first delta waited {b['wait']:.1f} ms for its flush, whose PutItem took {b['put']:.1f} ms, "
                 f"then {b['rest']:.1f} ms to the client")  # fmt: skip
    return (f"{k[bm] - d[bm]:+.1f} ms before the model request (kit {k[bm]:.1f}, direct {d[bm]:.1f}): per turn "
            f"{requests}; {b['outside']:.1f} ms outside requests; the model {k[m] - d[m]:+.1f} ms; the relay "
            f"{k[r] - d[r]:+.1f} ms (kit {k[r]:.1f}, direct {d[r]:.1f}): {relay}")  # fmt: skip


def counts_of(turns: list[dict[str, Any]]) -> list[Counter[str]]:
    """Per turn, the storage requests sent before the model request, by operation."""
    return [Counter(r.op for r in t["requests"] if t["sent"] <= r.at <= t["arrived"]) for t in turns]
