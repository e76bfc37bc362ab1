"""Every error the library raises, at the bottom of the import graph.

Two families matter to whoever drives a slice:

* :class:`RetryableError` -- transient trouble (a throttled store, a dropped connection, a crash
  injected by a test). The orchestrator retries the slice from its last checkpoint.
* :class:`FatalError` -- retrying cannot help (bad input, a fenced-off writer, a run that does not
  exist). The slice stops; a run that cannot go on is finalized as failed.
"""

from __future__ import annotations


class HarnessError(Exception):
    """Base class of every error raised by ``durable_harness``."""


class RetryableError(HarnessError):
    """Transient failure: run the slice again from the last checkpoint.

    ``shown``: the message says nothing secret, so a run that fails after repeated errors of this
    kind tells the user why (e.g. a harness program that stays silent), not only that it failed.
    """

    shown: bool = False


class FatalError(HarnessError):
    """Permanent failure: running the same work again gives the same error."""


# --- protocol -------------------------------------------------------------------------------------


class ProtocolError(FatalError):
    """A chunk, stream part or message does not follow the wire protocol."""


class UnknownPartTypeError(ProtocolError):
    """A JSON object names a ``type`` the protocol does not define."""


# --- storage --------------------------------------------------------------------------------------


class StorageError(RetryableError):
    """A storage backend failed in a way that may succeed on retry."""


class RunNotFoundError(FatalError):
    """No run with this id exists."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id!r} not found")
        self.run_id = run_id


class RunExistsError(FatalError):
    """A run with this id was already created."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id!r} already exists")
        self.run_id = run_id


class FencedError(FatalError):
    """A writer holding a stale version or epoch tried to write; nothing was written.

    Raised when a newer slice of the same run has claimed it. The stale slice must stop.
    """


class LogConflictError(FencedError):
    """A chunk append did not start at the log's current end; nothing was written."""


class CorruptCheckpointError(FatalError):
    """A stored checkpoint cannot be read back: a record is malformed or does not apply to its state."""


class FormatVersionError(FatalError):
    """A stored run record, chunk log or data folder is in a storage format this release does not
    read (another release wrote it, or one from before format versions). The message names the
    format found, the one this release reads, and what to do."""

    def __init__(self, what: str, found: object, expected: int, remedy: str) -> None:
        shown = "none (written before format versions)" if found in (None, "", 0) else found
        super().__init__(
            f"{what} is in storage format {shown}, and this release reads format {expected}: it was"
            f" written by another release of durable-harness. {remedy}"
        )
        self.found = found
        self.expected = expected


# --- secrets --------------------------------------------------------------------------------------


class _SecretReadFailure(HarnessError):
    """A secret could not be read. The message names the secret and the AWS error code, never a value."""

    def __init__(self, secret_id: str, code: str) -> None:
        super().__init__(f"could not read the secret {secret_id}: {code}")
        self.secret_id = secret_id
        self.code = code


class SecretError(_SecretReadFailure, FatalError):
    """A secret does not exist, or this role may not read (or decrypt) it: reading again cannot help."""


class SecretUnavailableError(_SecretReadFailure, RetryableError):
    """Secrets Manager throttled the read or could not be reached: reading again may succeed."""


# --- agent and models -----------------------------------------------------------------------------


class ModelError(HarnessError):
    """A model call failed. ``retryable`` tells whether calling again may succeed.

    ``retry_after`` (seconds) is the provider's hint (``retry-after-ms`` / ``Retry-After``), if any.
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool = False,
        status_code: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status_code = status_code
        self.retry_after = retry_after


class RunTimeoutError(ModelError):
    """The run's total time limit (``Timeouts(total=...)``) passed: the run is aborted, not retried.

    Raised before a model call, while one streams, or instead of waiting out a retry's backoff
    past the deadline. The agent calls ``on_abort`` (not ``on_error``) for it.
    """


class OutputError(HarnessError):
    """The model's final answer does not parse as the agent's structured output; the run fails."""


class ToolError(HarnessError):
    """A tool could not run (unknown tool, invalid input); reported to the model as a result."""


class AgentConfigError(FatalError):
    """The agent definition is invalid (for example, two tools with one name)."""


class SettingsError(FatalError):
    """An environment setting is missing or invalid (:mod:`durable_harness.settings`); the message
    names the variable and what it must be. The AWS adapters know it as ``AwsConfigError``."""


class ApprovalSecretError(FatalError):
    """The approval signing secret is unusable (shorter than 32 bytes). The message names where it
    came from, never its value."""


class InvalidRequestError(FatalError):
    """A client request cannot be served as sent; ``code`` and the message say what to fix."""

    def __init__(self, message: str, *, code: str = "bad_request", status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.status = status


class OtherAgentError(InvalidRequestError):
    """The run belongs to another agent than this process's (its ``AGENT``): only a server of that
    agent drives it, continues it or answers its approvals (a 409); any server reads it."""

    def __init__(self, run_id: str, agent: str, mine: str) -> None:
        super().__init__(
            f"Run {run_id} belongs to the agent {agent!r}, and this server runs {mine!r}: continue it "
            f"(or answer its approvals) on a server started with AGENT={agent}.",
            code="other_agent",
            status=409,
        )
        self.run_id = run_id
        self.agent = agent


class MethodNotAllowedError(InvalidRequestError):
    """A 405: the route exists, not for this method; ``allow`` is the ``Allow`` header's value."""

    def __init__(self, method: str, allow: str) -> None:
        super().__init__(f"Method {method} is not allowed here; use {allow}.", code="method_not_allowed", status=405)
        self.allow = allow
