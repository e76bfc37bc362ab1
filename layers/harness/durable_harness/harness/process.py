"""``ProcessHarness``: any program as a harness, over JSON lines on stdin and stdout (protocol version 1).

One process per slice. The runner writes the first line (``start`` or ``continue``, with
``"protocol": 1`` and the run's ``callOptions``), then reads harness stream parts and
``checkpoint`` control lines from the program's stdout (``heartbeat`` lines only say it is alive);
stderr goes to the log. Host tools (the agent file's tools, named in a ``tool-call`` that is not
``providerExecuted``) are run here and their results written back on stdin. At a slice point the
runner writes ``stop``; the program may write one last checkpoint and must exit within the grace
period (10 s by default). After ``finish`` it gets the same grace to write its last checkpoint
(with the turn's ``output``) and exit. A program that outlives its grace, or writes nothing for
``idle_timeout_seconds``, is killed with its whole process group (:mod:`.programs`). The program
gets a minimal environment. See ``docs/harness.md`` for the whole protocol.

The state the runner checkpoints wraps the program's own::

    {"program": <the program's last checkpoint state>,
     "hostResults": [<host tool results since that checkpoint>],
     "awaitingHost": [<host calls paused for approval>]}

Host results since the program's last checkpoint are sent again right after ``continue`` (so a
program that checkpoints after a host ``tool-call`` always resumes waiting for its result), and a
host call whose result is recorded is never run again.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from ..approvals import DEFAULT_SECRET_ARN_ENV, DEFAULT_SECRET_ENV, ApprovalSecret
from ..errors import AgentConfigError, OutputError
from ..ids import new_id
from ..output import ArrayOutput, ObjectOutput, Output, as_output
from .bridge.registry import clean_stale
from .bridge.transport import SessionSpec, SessionTransport, check_session_runtime, transport_factory
from .hosttools import HostTools
from .interface import CancelNotice, HarnessOptions, TurnRequest, validate_call_options
from .process_turn import MAX_LINE_BYTES, PROTOCOL_VERSION, HarnessExitedError, HarnessIdleError, ProcessTurn
from .programs import ProgramRegistry, default_registry_dir, program_env
from .session_turn import SessionTurn, cancel_session

DEFAULT_STOP_GRACE_SECONDS = 10.0
"""How long a program may take to exit after ``stop`` (or ``finish``) before it is killed."""
DEFAULT_IDLE_TIMEOUT_SECONDS = 600.0
"""How long a program may write nothing (not even a ``heartbeat``) before it is killed."""
DEFAULT_SESSION_IDLE_SECONDS = 900.0
"""How long a persistent session may go unused before its bridge ends it."""
HIDDEN_ENV = frozenset({DEFAULT_SECRET_ENV, DEFAULT_SECRET_ARN_ENV, "AUTH_TOKEN_HASHES", "AUTH_TOKENS_SECRET"})
"""The server's own secrets: ``env`` may not name them."""


class ProcessHarness:
    """Run a program as the harness (``AGENT=module:attr`` names it like any agent).

    * ``command``: the program and its arguments (no shell);
    * ``cwd``, ``env``: its working folder, and its environment beyond ``PATH``, ``HOME``,
      ``LANG`` and ``TZ`` (the server's): a value of None passes the server's own value on;
    * ``tools``: host tools (``durable_harness.tool``) the program may call; the runner runs them
      with their timeouts and approvals, and checkpoints each result;
    * ``builtin_tools``: names of the program's own tools, for ``tool-call`` validation (None: any
      name is accepted);
    * ``stop_grace_seconds``: how long the program may take to exit after ``stop`` or ``finish``;
    * ``idle_timeout_seconds``: how long it may write nothing before it is killed and the slice
      retried from the last checkpoint;
    * ``call_options``: a pydantic model validating the request's call options (the client's
      extra ``body`` fields), sent as ``callOptions``; without one they are sent as they came;
    * ``output``: the turn's structured output (an ``Output`` or a pydantic model), validating
      the ``output`` of the program's checkpoint after ``finish``;
    * ``registry_dir``: where each run's program pid is recorded (see :mod:`.programs`);
    * ``session``: ``"slice"`` (a process per slice, from the last checkpoint: protocol 1) or
      ``"persistent"`` (one process per session, living across slices and turns in a bridge:
      protocol 2; see :mod:`.session_turn`); ``destroy_on_finish``: end the session when a turn
      finishes or fails; ``session_idle_seconds``: end it after that long unused;
      ``sessions_dir``: where local bridges register (default: the server's data folder).
    """

    def __init__(
        self,
        command: Sequence[str],
        cwd: str | Path | None = None,
        env: Mapping[str, str | None] | None = None,
        *,
        tools: Sequence[Any] = (),
        builtin_tools: Collection[str] | None = None,
        stop_grace_seconds: float = DEFAULT_STOP_GRACE_SECONDS,
        idle_timeout_seconds: float = DEFAULT_IDLE_TIMEOUT_SECONDS,
        call_options: type[BaseModel] | None = None,
        output: Output | type[BaseModel] | None = None,
        registry_dir: str | Path | None = None,
        send_reasoning: bool = True,
        allow_system_in_messages: bool = False,
        approval_secret: ApprovalSecret | None = None,
        session: Literal["slice", "persistent"] = "slice",
        destroy_on_finish: bool = False,
        session_idle_seconds: float = DEFAULT_SESSION_IDLE_SECONDS,
        sessions_dir: str | Path | None = None,
    ) -> None:
        if not command or not all(isinstance(part, str) and part for part in command):
            raise AgentConfigError("ProcessHarness needs a command: a non-empty list of non-empty strings")
        if stop_grace_seconds <= 0:
            raise AgentConfigError("stop_grace_seconds must be positive")
        if idle_timeout_seconds <= 0:
            raise AgentConfigError("idle_timeout_seconds must be positive")
        if hidden := sorted(HIDDEN_ENV & set(env or {})):
            raise AgentConfigError(f"env may not pass the server's secrets to the program: {', '.join(hidden)}")
        if call_options is not None and not (isinstance(call_options, type) and issubclass(call_options, BaseModel)):
            raise AgentConfigError(f"call_options must be a pydantic model class, not {call_options!r}")
        if session not in ("slice", "persistent"):
            raise AgentConfigError(f'session must be "slice" or "persistent", not {session!r}')
        if session_idle_seconds <= 0:
            raise AgentConfigError("session_idle_seconds must be positive")
        if session == "persistent":
            check_session_runtime()  # deployed without a session runtime: refused here, at start-up
        self.session = session
        self.destroy_on_finish = destroy_on_finish
        self.session_idle_seconds = session_idle_seconds
        self.sessions_dir = Path(sessions_dir) if sessions_dir is not None else None
        self.command = list(command)
        self.cwd = str(cwd) if cwd is not None else None
        self.env = dict(env or {})
        self.host = HostTools(tools)
        self.stop_grace_seconds = stop_grace_seconds
        self.idle_timeout_seconds = idle_timeout_seconds
        self.call_options = call_options
        self.output = as_output(output)
        self.registry = ProgramRegistry(registry_dir)
        names = None if builtin_tools is None else {*builtin_tools, *self.host.names}
        self._options = HarnessOptions(
            tool_names=names,
            send_reasoning=send_reasoning,
            allow_system_in_messages=allow_system_in_messages,
            approval_secret=approval_secret,
            has_output=self.output is not None,
            replays_tail=session == "persistent",  # a slice that died is read again from its cursor
            wants_session_state=True,  # a later turn's start line carries it
        )

    @property
    def options(self) -> HarnessOptions:
        """Tool names, reasoning, system messages and approval secret, as configured."""
        return self._options

    def create_session(self, session_id: str | None = None) -> str:
        """The session id (the program gets it in every first line)."""
        return session_id or new_id("sess")

    def open(self, request: TurnRequest) -> ProcessTurn:
        """Start the program for one slice (slice mode), or reach its session (persistent)."""
        if self.session == "persistent":
            return SessionTurn(self, request)
        return ProcessTurn(self, request)

    def bind_data_dir(self, data_dir: str | Path) -> None:
        """The local server's data folder: persistent sessions' bridges register in it (unless
        ``sessions_dir`` was given)."""
        if self.sessions_dir is None:
            self.sessions_dir = Path(data_dir) / "sessions"
        if self.session == "persistent":  # bridges a dead server left behind: end them now
            clean_stale(self.sessions_dir)

    async def transport(self, spec: SessionSpec) -> SessionTransport:
        """The session's connection, from the deployment's factory (locally: ``find_or_start``)."""
        folder = self.sessions_dir or default_registry_dir().parent / "sessions"
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        return await transport_factory(folder)(spec)

    async def on_cancel(self, notice: CancelNotice) -> None:
        """Slice mode: nothing to release (no process outlives its slice). Persistent: the
        program gets ``cancel``; one that does not end the turn within the grace is killed."""
        if self.session == "persistent":
            await cancel_session(self, notice)

    def parse_call_options(self, raw: Mapping[str, Any]) -> dict[str, Any] | None:
        """``raw`` validated by ``call_options``; without a model, passed on as the client sent it
        (JSON): the program gets them as ``callOptions`` either way (None when there are none)."""
        if self.call_options is not None:
            return validate_call_options(self.call_options, raw)
        return dict(raw) or None

    def run_result(self, state: Any) -> dict[str, Any]:
        """Nothing of its own: the runner assembles the text, steps and messages from what it recorded."""
        return {}

    def child_env(self) -> dict[str, str]:
        """The program's environment: ``PATH``, ``HOME``, ``LANG``, ``TZ`` and what ``env`` names."""
        return program_env(self.env)

    def check_output(self, value: Any) -> Any:
        """The program's ``output`` validated by ``output`` (as is without one); OutputError if it does not fit."""
        spec = self.output
        if spec is None:
            return value
        if isinstance(spec, ArrayOutput):
            text = json.dumps({"elements": value})
        elif isinstance(value, str) and not isinstance(spec, ObjectOutput):
            text = value
        else:
            text = json.dumps(value)
        try:
            return spec.parse(text)
        except OutputError as exc:
            raise OutputError(f"The harness program's output does not fit the agent's output: {exc}") from None


__all__ = [
    "DEFAULT_IDLE_TIMEOUT_SECONDS",
    "DEFAULT_SESSION_IDLE_SECONDS",
    "DEFAULT_STOP_GRACE_SECONDS",
    "HIDDEN_ENV",
    "MAX_LINE_BYTES",
    "PROTOCOL_VERSION",
    "HarnessExitedError",
    "HarnessIdleError",
    "ProcessHarness",
    "ProcessTurn",
]
