"""Loading the agent an ``AGENT`` spec (``module:attribute``) names: what every mode's composition
root does first (``server/local.py``'s ``local_kit``, ``aws/runtime.py``'s ``function_parts``).
A spec that cannot be loaded stops the start with what to fix, never a traceback."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from typing import Any

from .errors import AgentConfigError
from .harness.interface import Harness
from .settings import DEFAULT_AGENT

__all__ = ["load_agent"]


def load_agent(spec: str, **kwargs: Any) -> Harness:
    """The agent (any :class:`~durable_harness.harness.Harness`) named by ``"module:attribute"``,
    called first if it is a factory."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise SystemExit(f"--agent must look like 'package.module:name', got {spec!r}")
    # The working folder, as `python -m` and uvicorn's --app-dir have it: the `durable-harness`
    # script (sys.path[0] is its bin/ folder) then finds an agent file there too. Appended, so an
    # installed module of the same name wins. From the repository, the editable install's path has
    # layers/harness (the demo my_agent.py); in the Lambda layer it shares /opt/python with the package.
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    if spec == DEFAULT_AGENT and importlib.util.find_spec(module_name) is None:
        raise SystemExit(
            f"cannot load agent {spec!r}: no {module_name}.py here. The default agent is the repository's "
            f"layers/harness/{module_name}.py; with the package installed from a wheel, write your own "
            f"{module_name}.py with a build_agent() in the working folder, or set AGENT=module:attribute"
        )
    try:
        target = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise SystemExit(f"cannot load agent {spec!r}: {exc}") from exc
    try:
        agent = target if isinstance(target, Harness) or not callable(target) else target(**kwargs)
    except AgentConfigError as exc:  # e.g. a bad MODEL_ID: what to fix, not a traceback
        raise SystemExit(f"cannot build agent {spec!r}: {exc}") from None
    if not isinstance(agent, Harness):
        raise SystemExit(
            f"{spec!r} is not an agent: it must be (or build) a durable_harness.harness.Harness "
            f"(an Agent, a ProcessHarness, a PydanticAIHarness, ...), got {type(agent).__name__}"
        )
    return agent
