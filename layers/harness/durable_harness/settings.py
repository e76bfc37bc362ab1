"""Every environment setting of the harness, read once: :class:`Settings` and the table :data:`SETTINGS`.

A composition root (the local server, ``server/local.py``; each Lambda function, ``functions/*/app.py``
with ``aws/runtime.py``) makes one :class:`Settings` from the process environment at start-up and
builds everything from it: a bad value stops the start with a message naming the variable, not a
request later. The library parts that take an ``env`` mapping (authentication, the chat page, the
session transport) are given the same snapshot, :attr:`Settings.environ`.

:data:`SETTINGS` lists every variable anything in the repository reads or the template sets (the
harness's own, the agent file's, and those Lambda, Powertools and the Web Adapter read); the
"Settings" table of ``docs/operating.md`` is :func:`settings_table`, and ``tests/test_docs.py`` holds
the two, the template and the code's reads together.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from .errors import SettingsError

__all__ = ["DEFAULT_AGENT", "SETTINGS", "Setting", "Settings", "settings_table"]

DEFAULT_AGENT = "my_agent:build_agent"
_DAY = 86400


@dataclass(frozen=True)
class Setting:
    """One environment variable: its name, its default (as the docs show it), who reads it, what it does."""

    name: str
    default: str
    read_by: str
    meaning: str


_FN = "functions"  # every Lambda function (the template's Globals)
SETTINGS: tuple[Setting, ...] = (
    # --- the agent ---------------------------------------------------------------------------------
    Setting("AGENT", DEFAULT_AGENT, "all", "`module:attribute` of the agent: what loads it, and its runs' identity"),
    Setting("MODEL_ID", "demo", "`my_agent.py`", "the default agent's model (template: `ModelId`)"),
    Setting("SLICE_SECONDS", "600", "all", "time budget of one slice (template: `SliceSeconds`)"),
    Setting("TOOL_THREADS", "16", "all", "threads that run sync tools (1 to 1024)"),
    Setting("PUBLIC_URL", "(none: paths)", "slice function, local server", "base of the event URLs tools hand out"),
    Setting("TOOL_APPROVAL_SECRET", "(none: unsigned)", "all", "the approval signing secret(s), one per line"),
    Setting("TOOL_APPROVAL_SECRET_ARN", "(none)", _FN, "a Secrets Manager secret holding them (wins)"),
    Setting("OPENAI_API_KEY", "(none)", "models", "OpenAI's API key, for `openai:` models"),
    Setting("OPENAI_API_KEY_SECRET_ARN", "(none)", "models", "a secret holding it (template: `OpenAIApiKeySecretArn`)"),
    Setting("OPENAI_BASE_URL", "`https://api.openai.com/v1`", "models", "an OpenAI-compatible server"),
    Setting("ANTHROPIC_API_KEY", "(none)", "models", "Anthropic's API key, for `anthropic:` models"),
    Setting("ANTHROPIC_API_KEY_SECRET_ARN", "(none)", "models", "a secret holding it"),
    Setting("ANTHROPIC_BASE_URL", "`https://api.anthropic.com`", "models", "an Anthropic-compatible server"),
    Setting("SESSION_RUNTIME", "none", "all", "where persistent harness sessions run: `none` or `agentcore`"),
    Setting("AGENTCORE_RUNTIME_ARN", "(none)", "chat, slice", "with `agentcore`: the runtime of the sessions"),
    Setting("AGENTCORE_RUNTIME_QUALIFIER", "DEFAULT", "chat, slice", "with `agentcore`: its endpoint"),
    Setting("LONG_STEP_SECONDS", "1", "`my_agent.py`, demo", "how long the demo's slow tool takes"),
    Setting("NOTES_DIR", "/tmp/durable-harness-notes", "`my_agent.py`", "where the demo's note tool writes"),
    # --- the deployment ----------------------------------------------------------------------------
    Setting("RUNS_TABLE", "(none: the local kit)", _FN, "DynamoDB table of run records and chunk logs"),
    Setting("CHUNK_BUCKET", "(required with RUNS_TABLE)", _FN, "S3 bucket of sealed log segments and large data"),
    Setting("STATE_MACHINE_ARN", "(required with RUNS_TABLE)", _FN, "the run state machine"),
    Setting("EVENT_BUS_NAME", "(none: no events)", _FN, "bus of run lifecycle events"),
    Setting("RUN_TTL_DAYS", "30", _FN, "days a run's records live after their last write"),
    Setting("CHUNK_RETENTION_DAYS", "(none)", _FN, "days the chunk bucket keeps an object; caps the records' life"),
    Setting("AWS_LITE_CLIENTS", "1", _FN, "`0`: botocore clients instead of the lite ones (template: `LiteClients`)"),
    Setting("INLINE_FIRST_SLICE", "1", "chat function", "`0`: every slice runs in the slice function"),
    Setting("INLINE_HEARTBEAT_SECONDS", "30", "chat function", "how long the state machine waits for a heartbeat"),
    Setting("INLINE_HEARTBEAT_INTERVAL", "(a third of the above)", "chat function", "seconds between heartbeats"),
    Setting("STREAM_FLUSH_SECONDS", "0.07", "chat, slice", "the chunk log's group-commit interval"),
    Setting("STREAM_WINDOW_SECONDS", "840", "chat function", "how long one response streams before it ends"),
    Setting("STREAM_POLL_SECONDS", "0.05", "chat function", "how often a run written elsewhere is read"),
    Setting("AUTH_MODE", "`token` (local: `none`)", "chat function, local server", "`token`, `iam` or `none`"),
    Setting("AUTH_TOKENS_SECRET", "(none)", "chat function, local server", "a secret holding the token hashes"),
    Setting("AUTH_TOKEN_HASHES", "(none)", "chat function, local server", "`name:sha256` token hashes"),
    Setting("AUTH_IAM_PRINCIPAL", "caller", "chat function", "iam mode: key callers by `caller` or `role`"),
    Setting("AUTH_IAM_ALLOW_LOCAL", "(off)", "local server", "`1`: allow iam mode locally"),
    Setting("ALLOWED_ORIGINS", "*", "chat function", "CORS origins (the Function URL answers CORS)"),
    Setting("SERVE_WEB_PAGE", "1", "chat function, local server", "`0`: no chat page at `/`"),
    # --- the local server and the command line -----------------------------------------------------
    Setting("DATA_DIR", "`.data` (chat app: /tmp/durable-harness)", "local server", "folder of the embedded storage"),
    Setting("HOST", "127.0.0.1", "`durable-harness serve`", "address to listen on"),
    Setting("PORT", "8000", "`durable-harness` commands", "port to listen on, and the clients' default server"),
    Setting("DEMO_DELAY", "0.03", "`durable-harness serve`", "seconds between the demo model's chunks"),
    Setting("LOG_LEVEL", "info", "`durable-harness serve`", "the server's log level"),
    Setting("CHAT_URL", "http://127.0.0.1:$PORT", "`durable-harness` clients", "the server the clients talk to"),
    Setting("CHAT_TOKEN", "(none)", "`durable-harness` clients", "bearer token of the clients"),
    Setting("NO_COLOR", "(off)", "`durable-harness chat`", "set: no colours"),
    Setting("TERM", "(the terminal's)", "`durable-harness chat`", "`dumb`: no colours"),
    # --- set by Lambda, the template, or read by Powertools and the SDKs ---------------------------
    Setting("AWS_REGION", "(Lambda sets it)", _FN, "the Region of the clients"),
    Setting("AWS_DEFAULT_REGION", "(Lambda sets it)", _FN, "the Region, when `AWS_REGION` is not set"),
    Setting("AWS_ACCESS_KEY_ID", "(Lambda sets it)", "lite clients", "credentials"),
    Setting("AWS_SECRET_ACCESS_KEY", "(Lambda sets it)", "lite clients", "credentials"),
    Setting("AWS_SESSION_TOKEN", "(Lambda sets it)", "lite clients", "credentials"),
    Setting("AWS_ENDPOINT_URL", "(AWS's)", "all AWS clients", "one endpoint for every service (tests)"),
    Setting("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "(off)", "all AWS clients", "`true`: ignore the above"),
    Setting("AWS_LAMBDA_FUNCTION_NAME", "(Lambda sets it)", _FN, "set: running in Lambda (lite clients)"),
    Setting("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "1024", "chat function", "its memory, for the run API's cost"),
    Setting("AWS_EXECUTION_ENV", "(Lambda sets it)", "lite clients", "the runtime, in their `User-Agent`"),
    Setting("LAMBDA_TASK_ROOT", "(Lambda sets it)", _FN, "set: running in Lambda (telemetry)"),
    Setting("AWS_SAM_LOCAL", "(off)", _FN, "set by `sam local`: no X-Ray"),
    Setting("AWS_CHALICE_CLI_MODE", "(off)", _FN, "set by Chalice's local mode: no X-Ray"),
    Setting("_X_AMZN_TRACE_ID", "(Lambda sets it)", "lite clients", "the invocation's trace header, sent on"),
    Setting("AWS_DATA_PATH", "(the layer's)", "botocore", "where botocore finds its service models"),
    Setting("AWS_LWA_PORT", "8000", "chat function", "the port the Web Adapter forwards to"),
    Setting("AWS_LWA_INVOKE_MODE", "response_stream", "Web Adapter", "streamed responses"),
    Setting("AWS_LWA_READINESS_CHECK_PATH", "/health", "Web Adapter", "what the adapter waits for"),
    Setting("AWS_LAMBDA_EXEC_WRAPPER", "/opt/bootstrap", "Lambda", "starts the Web Adapter"),
    Setting("POWERTOOLS_SERVICE_NAME", "durable-harness", "Powertools", "the logs' and metrics' service"),
    Setting("POWERTOOLS_METRICS_NAMESPACE", "DurableHarness", "Powertools, telemetry", "set: CloudWatch metrics"),
    Setting("POWERTOOLS_LOG_LEVEL", "INFO", "Powertools", "the functions' log level"),
    Setting("POWERTOOLS_TRACE_DISABLED", "true", _FN, "`false`: X-Ray subsegments (template: `DetailedTracing`)"),
    Setting("OTEL_SDK_DISABLED", "(off)", "telemetry", "`true`: no OpenTelemetry spans"),
)
"""Every environment variable, in the order of the docs' table."""


def settings_table() -> str:
    """The Markdown table of :data:`SETTINGS` (``docs/operating.md``, "Settings")."""
    lines = ["| variable | default | read by | meaning |", "|---|---|---|---|"]
    lines += [f"| `{s.name}` | {s.default} | {s.read_by} | {s.meaning} |" for s in SETTINGS]
    return "\n".join(lines) + "\n"


_NAMES = frozenset(s.name for s in SETTINGS)


@dataclass(frozen=True)
class Settings:
    """The harness's settings, read from one snapshot of the environment (:meth:`from_env`)."""

    agent: str = DEFAULT_AGENT
    slice_seconds: float = 600.0
    public_url: str | None = None
    data_dir: str | None = None
    runs_table: str = ""
    """Empty: the local kit (embedded storage); set: the AWS runtime."""
    state_machine_arn: str = ""
    event_bus_name: str | None = None
    run_ttl_seconds: int = 30 * _DAY
    chunk_retention_seconds: int | None = None
    region: str | None = None
    inline_first_slice: bool = True
    inline_heartbeat_seconds: int = 30
    inline_heartbeat_interval: int | None = None
    stream_flush_seconds: float = 0.07
    stream_window_seconds: float = 840.0
    stream_poll_seconds: float = 0.05
    function_memory_mb: int = 1024
    environ: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    """The snapshot itself, for the parts that take an ``env`` mapping (never secrets' values: names)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """The settings of ``env`` (default: this process's environment, copied once).

        Raises :class:`~durable_harness.errors.SettingsError` naming a variable whose value is
        not what it must be.
        """
        snapshot = MappingProxyType(dict(os.environ if env is None else env))

        def text(name: str) -> str:
            return snapshot.get(name, "").strip()

        retention = text("CHUNK_RETENTION_DAYS")
        interval = text("INLINE_HEARTBEAT_INTERVAL")
        return cls(
            agent=snapshot.get("AGENT") or DEFAULT_AGENT,
            slice_seconds=_number(snapshot, "SLICE_SECONDS", 600.0),
            public_url=snapshot.get("PUBLIC_URL") or None,
            data_dir=snapshot.get("DATA_DIR") or None,
            runs_table=text("RUNS_TABLE"),
            state_machine_arn=text("STATE_MACHINE_ARN"),
            event_bus_name=text("EVENT_BUS_NAME") or None,
            run_ttl_seconds=_days(snapshot, "RUN_TTL_DAYS", 30),
            chunk_retention_seconds=_days(snapshot, "CHUNK_RETENTION_DAYS", 0) if retention else None,
            region=snapshot.get("AWS_REGION") or snapshot.get("AWS_DEFAULT_REGION") or None,
            inline_first_slice=snapshot.get("INLINE_FIRST_SLICE", "1") != "0",
            inline_heartbeat_seconds=_whole(snapshot, "INLINE_HEARTBEAT_SECONDS", 30),
            inline_heartbeat_interval=_whole(snapshot, "INLINE_HEARTBEAT_INTERVAL", 1) if interval else None,
            stream_flush_seconds=_number(snapshot, "STREAM_FLUSH_SECONDS", 0.07),
            stream_window_seconds=_number(snapshot, "STREAM_WINDOW_SECONDS", 840.0),
            stream_poll_seconds=_number(snapshot, "STREAM_POLL_SECONDS", 0.05),
            function_memory_mb=int(_number(snapshot, "AWS_LAMBDA_FUNCTION_MEMORY_SIZE", 1024)),
            environ=snapshot,
        )

    @property
    def deployed(self) -> bool:
        """True when the AWS runtime serves (``RUNS_TABLE`` set), False for the local kit."""
        return bool(self.runs_table)

    def required(self, name: str, meaning: str) -> str:
        """The value of the deployment setting ``name``; :class:`SettingsError` saying what it names if unset."""
        assert name in _NAMES, name  # every setting is in the table (tests/test_docs.py)
        value = self.environ.get(name, "").strip()
        if not value:
            raise SettingsError(f"environment variable {name} is not set: it must name {meaning}")
        return value


def _number(env: Mapping[str, str], name: str, default: float) -> float:
    """A non-negative number of ``env``; :class:`SettingsError` naming the variable."""
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise SettingsError(f"{name} must be a number, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise SettingsError(f"{name} must be a number of at least 0, got {text!r}")
    return value


def _whole(env: Mapping[str, str], name: str, default: int) -> int:
    """A positive whole number of seconds of ``env``; :class:`SettingsError` naming the variable."""
    text = env.get(name, "").strip() or str(default)
    if not text.isdigit() or int(text) < 1:
        raise SettingsError(f"{name} must be a whole number of seconds, at least 1, got {text!r}")
    return int(text)


def _days(env: Mapping[str, str], name: str, default: float) -> int:
    """A positive number of days of ``env``, in seconds; :class:`SettingsError` naming the variable."""
    text = env.get(name, "").strip() or str(default)
    try:
        seconds = int(float(text) * _DAY)
    except ValueError:
        raise SettingsError(f"{name} must be a number of days, got {text!r}") from None
    if seconds <= 0:
        raise SettingsError(f"{name} must be positive, got {text!r}")
    return seconds
