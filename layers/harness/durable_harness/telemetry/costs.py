"""What a run costs on AWS: the list prices and the per-run arithmetic, in one place.

The benchmark scripts (``bench/storage_cost.py``, ``bench/deployed_wiring.py``) price the requests
they count under moto with these; the deployed chat function prices a run from what the run
recorded (:func:`estimate_run_cost`, the ``cost`` of ``GET /api/runs/{id}``). Model tokens are not
priced: the kit has no model price table.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..ports import StoredRun
    from .view import RunView

PRICE_DATE = "2026-12-01"
PRICES = {
    "s3_put_per_1k": 0.005,  # S3 Standard PUT/COPY/POST/LIST, us-east-1
    "s3_get_per_1k": 0.0004,  # S3 Standard GET (and all other requests)
    # DynamoDB on-demand since the November 2024 price cut (the list in issue 10)
    "ddb_wru_per_m": 0.625,  # per million write request units (1 KB each)
    "ddb_rru_per_m": 0.125,  # per million read request units (4 KB strongly consistent, half eventually)
    "ddb_storage_gb_month": 0.25,  # DynamoDB Standard table class, per GB-month
    "s3_storage_gb_month": 0.023,  # S3 Standard, first 50 TB, per GB-month
    "sfn_transition_per_1k": 0.025,  # Step Functions Standard state transitions
    "lambda_gb_s_arm64": 0.0000133334,  # Lambda arm64 duration, per GB-second
    "lambda_request_per_m": 0.20,  # Lambda requests, per million
    # Lambda bills the INIT phase of on-demand functions as duration since 2025-08-01 (same GB-s rate).
    "lambda_init_gb_s_arm64": 0.0000133334,
    "cw_logs_ingest_per_gb": 0.50,  # CloudWatch Logs ingestion, Standard log class
    "cw_logs_storage_gb_month": 0.03,  # CloudWatch Logs storage (compressed), per GB-month
    "xray_traces_per_m": 5.00,  # X-Ray traces recorded, per million (100,000 a month free)
    "secrets_api_per_10k": 0.05,  # Secrets Manager API calls, per 10,000
    "secret_per_month": 0.40,  # Secrets Manager, per secret and month
}
"""AWS list prices (us-east-1, arm64) as of :data:`PRICE_DATE`: check them against the live pricing pages."""

# --- what a run costs besides its requests and compute: assumptions, printed with each table ---

COLD_START_SHARE = 0.05
"""Invocations that start a new environment (a steady load keeps most warm; a first request or a
burst starts new ones). Each such start bills its INIT and reads its secrets once."""
INIT_SECONDS = {"ChatFunction": 0.6, "SliceFunction": 0.5, "FinalizerFunction": 0.5, "TriggerFunction": 0.5}
"""Billed INIT per cold start: the handler's import (``cold_start.py``: 175-283 ms) plus the runtime's and,
for the chat function, the Web Adapter's start. The REPORT line's Init Duration is the measured one."""
LOG_BYTES_PER_INVOCATION = 2_000
"""CloudWatch Logs ingested per invocation: START, END and REPORT lines and the handler's structured lines
(the state machine logs errors only)."""
TRACES_PER_RUN = 2
"""X-Ray traces recorded per run, every request sampled (the default rule samples fewer): the chat POST's
and the execution's (its Lambda invocations join the execution's trace)."""
SECRETS_PER_ENVIRONMENT = 2
"""Secrets a new environment reads (the approval key, the tokens or a provider key), cached after that."""
SFN_FIXED = 3
"""State transitions of a run's execution besides its slices: Init, Defaults and the terminal state."""
SFN_PER_SLICE = 2
"""State transitions per slice: the slice's task (RunSlice, or AwaitChatSlice for the chat function's) + Route."""


def lambda_compute(memory_mb: float, seconds: float) -> float:
    """Dollars of ``seconds`` of a function of ``memory_mb`` (arm64 duration)."""
    return memory_mb / 1024 * seconds * PRICES["lambda_gb_s_arm64"]


def lambda_requests(invocations: float) -> float:
    """Dollars of ``invocations`` Lambda requests."""
    return invocations * PRICES["lambda_request_per_m"] / 1e6


def sfn_transitions(slices: int) -> int:
    """State transitions of a run of ``slices`` slices in one execution."""
    return SFN_FIXED + SFN_PER_SLICE * slices


def sfn_dollars(transitions: float) -> float:
    """Dollars of ``transitions`` Step Functions Standard state transitions."""
    return transitions * PRICES["sfn_transition_per_1k"] / 1000


def request_dollars(*, s3_put: float = 0, s3_get: float = 0, wru: float = 0, rru: float = 0) -> dict[str, float]:
    """Dollars of S3 requests (PUT class, GET class) and DynamoDB capacity units, by category."""
    return {
        "s3_put": s3_put * PRICES["s3_put_per_1k"] / 1000,
        "s3_get": s3_get * PRICES["s3_get_per_1k"] / 1000,
        "ddb_write": wru * PRICES["ddb_wru_per_m"] / 1e6,
        "ddb_read": rru * PRICES["ddb_rru_per_m"] / 1e6,
    }


@dataclass(frozen=True)
class Overhead:
    """A run's INIT billing, logs, traces and secret reads, under the assumptions above."""

    invocations: int
    init_gb_s: float
    secret_reads: float
    init: float
    logs: float
    xray: float
    secrets: float


def overhead(invocations: Mapping[str, float], memory: Mapping[str, float]) -> Overhead:
    """The :class:`Overhead` of a run of ``invocations`` per function (``memory`` in MB per function)."""
    p = PRICES
    cold = {fn: n * COLD_START_SHARE for fn, n in invocations.items()}
    init = sum(n * INIT_SECONDS.get(fn, 0.5) * memory.get(fn, 512) / 1024 for fn, n in cold.items())
    total = int(sum(invocations.values()))
    reads = sum(cold.values()) * SECRETS_PER_ENVIRONMENT
    return Overhead(
        invocations=total,
        init_gb_s=init,
        secret_reads=reads,
        init=init * p["lambda_init_gb_s_arm64"],
        logs=total * LOG_BYTES_PER_INVOCATION / 1024**3 * p["cw_logs_ingest_per_gb"],
        xray=TRACES_PER_RUN * p["xray_traces_per_m"] / 1e6,
        secrets=reads * p["secrets_api_per_10k"] / 1e4,
    )


def overhead_rows(invocations: Mapping[str, float], memory: Mapping[str, float]) -> list[tuple[str, float]]:
    """The per-run rows of INIT billing, CloudWatch Logs, X-Ray and Secrets Manager for a run of
    ``invocations`` per function (``memory`` in MB per function), under the assumptions above."""
    o = overhead(invocations, memory)
    return [
        (f"Lambda INIT ({COLD_START_SHARE:.0%} of {o.invocations} invocations cold, {o.init_gb_s:.3f} GB-s)", o.init),
        (f"CloudWatch Logs ingestion ({LOG_BYTES_PER_INVOCATION:,} B per invocation)", o.logs),
        (f"X-Ray ({TRACES_PER_RUN} traces recorded, all sampled)", o.xray),
        (f"Secrets Manager ({o.secret_reads:.2f} GetSecretValue calls)", o.secrets),
    ]


def overhead_note() -> str:
    """What :func:`overhead_rows` assumes, and the monthly costs that are not per run."""
    p = PRICES
    return (
        f"  INIT, logs, X-Ray and secrets: {COLD_START_SHARE:.0%} of invocations start cold (INIT "
        f"{', '.join(f'{k[:-8].lower()} {v:g} s' for k, v in INIT_SECONDS.items())}), {LOG_BYTES_PER_INVOCATION:,} B "
        f"of logs per invocation, {TRACES_PER_RUN} traces per run; not per run: each secret "
        f"${p['secret_per_month']:.2f}/month (the generated approval key, plus any you pass), log storage "
        f"${p['cw_logs_storage_gb_month']}/GB-month (LogRetentionDays)"
    )


def price_banner() -> str:
    """The prices used, with their date, as printed by the cost scripts."""
    p = PRICES
    return (
        f"AWS list prices (us-east-1) as of {PRICE_DATE} -- list prices to check against the live pricing pages:\n"
        f"  S3 PUT/COPY/POST/LIST ${p['s3_put_per_1k']}/1k, S3 GET ${p['s3_get_per_1k']}/1k; "
        f"DynamoDB on-demand write ${p['ddb_wru_per_m']}/million WRU (1 KB), "
        f"read ${p['ddb_rru_per_m']}/million RRU (4 KB strongly consistent, half that eventually consistent);\n"
        f"  Step Functions Standard ${p['sfn_transition_per_1k']}/1k transitions; "
        f"Lambda arm64 ${p['lambda_gb_s_arm64']}/GB-s (INIT too, since 2025-08-01) + "
        f"${p['lambda_request_per_m']}/million requests;\n"
        f"  CloudWatch Logs ${p['cw_logs_ingest_per_gb']}/GB ingested; X-Ray ${p['xray_traces_per_m']}/million traces; "
        f"Secrets Manager ${p['secrets_api_per_10k']}/10k calls + ${p['secret_per_month']}/secret-month"
    )


# --- a recorded run's estimate ----------------------------------------------------------------------


@dataclass(frozen=True)
class RunRecord:
    """What a run recorded that its cost follows from (the run API's fields of the same meaning)."""

    slices: int
    slice_times: list[tuple[int, float]]
    """When each slice began: (log index of its first chunk, epoch seconds)."""
    chunk_times: list[tuple[int, float]]
    """When the timed chunks (step boundaries, tool calls, approvals) were written."""
    chunk_count: int
    steps: int
    record_writes: int
    """Writes of the run record: its version (create, claims and checkpoints each bump it)."""
    state_bytes: int


def run_record(checkpoint: StoredRun, state: RunView, chunk_count: int) -> RunRecord:
    """The :class:`RunRecord` of a run's checkpoint, its state (parsed from it) and its log's length."""
    return RunRecord(
        slices=state.slices,
        slice_times=list(state.slice_times),
        chunk_times=list(state.chunk_times),
        chunk_count=chunk_count,
        steps=len(state.steps),
        record_writes=checkpoint.version,
        state_bytes=len(checkpoint.state.encode()),
    )


@dataclass(frozen=True)
class DeployedFunctions:
    """The deployed functions a run's cost depends on (template.yaml's figures by default)."""

    chat_mb: int = 1024
    slice_mb: int = 512
    flush_seconds: float = 0.07
    """The chunk log's group-commit interval (``STREAM_FLUSH_SECONDS``)."""
    inline_first_slice: bool = True
    """The chat function runs a run's first slice itself (``INLINE_FIRST_SLICE``, decision D14)."""


def slice_seconds(record: RunRecord) -> list[float]:
    """How long each slice lasted, as recorded: until the next slice began, and for the last one
    until its last timed chunk (the end of a slice is not recorded itself)."""
    out: list[float] = []
    for i, (index, began) in enumerate(record.slice_times):
        if i + 1 < len(record.slice_times):
            out.append(max(0.0, record.slice_times[i + 1][1] - began))
        else:
            last = max((at for at_index, at in record.chunk_times if at_index >= index), default=began)
            out.append(max(0.0, last - began))
    return out


def estimate_run_cost(record: RunRecord, functions: DeployedFunctions = DeployedFunctions()) -> dict[str, Any]:
    """A run's estimated AWS cost in USD, by part, with the price date and its basis (what was
    recorded and what was estimated from it). Model tokens are not priced."""
    durations = slice_seconds(record)
    slices = max(record.slices, len(durations))
    chat_slices = 1 if functions.inline_first_slice and slices else 0
    chat_s = sum(durations[:chat_slices])
    slice_s = sum(durations[chat_slices:])
    invocations = {"ChatFunction": 1, "SliceFunction": slices - chat_slices}
    memory = {"ChatFunction": functions.chat_mb, "SliceFunction": functions.slice_mb}
    # One flush per group-commit interval of streaming, plus one at each timed boundary, never
    # more than there are chunks.
    streamed = sum(durations)
    flushes = min(record.chunk_count, math.ceil(streamed / functions.flush_seconds) + len(record.chunk_times))
    followed = flushes if chat_slices == 0 else round(flushes * slice_s / streamed) if streamed else 0
    # A record write moves the head (1 KB) and appends a delta; the deltas add up to about the state.
    record_wru = 2 * record.record_writes + math.ceil(record.state_bytes / 1024)
    loads = slices  # each slice loads the run record, strongly consistent
    record_rru = loads * max(1, math.ceil(record.state_bytes / 4096))
    requests = request_dollars(
        s3_put=1,  # the log sealed into one S3 segment at the end
        wru=flushes + record_wru,
        rru=followed * 0.5 + record_rru,  # the chat function's Query per flush of another function's slice
    )
    o = overhead(invocations, memory)
    lambda_usd = (lambda_compute(functions.chat_mb, chat_s) + lambda_compute(functions.slice_mb, slice_s)
                  + lambda_requests(sum(invocations.values())) + o.init)  # fmt: skip
    parts = {
        "lambda": lambda_usd,
        "stepFunctions": sfn_dollars(sfn_transitions(slices)),
        "dynamodb": requests["ddb_write"] + requests["ddb_read"],
        "s3": requests["s3_put"] + requests["s3_get"],
        "logsAndTracing": o.logs + o.xray + o.secrets,
    }
    return {
        "usd": sum(parts.values()),
        "parts": parts,
        "priceDate": PRICE_DATE,
        "basis": {
            "recorded": {
                "slices": slices,
                "chunks": record.chunk_count,
                "steps": record.steps,
                "recordWrites": record.record_writes,
                "stateBytes": record.state_bytes,
            },
            "estimated": {
                "chatFunctionSeconds": round(chat_s, 3),
                "sliceFunctionSeconds": round(slice_s, 3),
                "flushes": flushes,
                "stateTransitions": sfn_transitions(slices),
                "invocations": invocations,
            },
            "notes": [
                f"Lambda arm64: the chat function at {functions.chat_mb} MB runs "
                + ("the first slice" if chat_slices else "no slice")
                + f", the slice function at {functions.slice_mb} MB the others.",
                "Slice durations come from when each slice began and its last timed chunk (a slice's end "
                "is not recorded); the chat function's time following a run that others drive is not counted.",
                f"Chunk-log flushes are not recorded: estimated as one per {functions.flush_seconds:g} s of "
                "streaming plus one per timed chunk, at most one per chunk, 1 WRU each.",
                "Run-record writes are the record's version; each is taken as 2 WRU plus the state's size in KB "
                "once (the appended deltas).",
                f"INIT, logs, X-Ray and secrets: {COLD_START_SHARE:.0%} of invocations cold, "
                f"{LOG_BYTES_PER_INVOCATION:,} B of logs per invocation, {TRACES_PER_RUN} traces per run.",
                "Model tokens are not priced (no model price table in the kit); EventBridge events and "
                "storage per month are not counted.",
            ],
        },
    }
