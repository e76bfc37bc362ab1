"""X-Ray tracing of the Lambda handlers, loaded only when tracing is on.

Powertools' ``Tracer()`` imports the X-Ray SDK and patches botocore even when tracing is disabled,
which costs 150-250 ms of every cold start. The handlers therefore wrap themselves with
:func:`capture_lambda_handler`, which builds a ``Tracer`` only when :func:`tracing_enabled` (the
rule lives with the telemetry, whose X-Ray exporter it switches on too:
:func:`durable_harness.telemetry.base.tracing_enabled`).

Tracing is on under the rules Powertools' ``Tracer`` applies: inside Lambda, not under
``sam local``, and ``POWERTOOLS_TRACE_DISABLED`` not true. The template sets
``POWERTOOLS_TRACE_DISABLED: "true"`` unless its ``DetailedTracing`` parameter is ``true``, so by
default the X-Ray SDK is never loaded and X-Ray shows the segments Lambda records itself
(``Tracing: Active``). With tracing on, the handler's and every AWS call's subsegments are added,
and each run's slices, steps, model and tool calls (:mod:`durable_harness.telemetry.xray`); the
layer keeps the X-Ray SDK for that (as source only, so a traced cold start also compiles it).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from ..telemetry.base import TRACE_DISABLED_ENV, tracing_enabled  # the rule telemetry's X-Ray exporter follows too
from .runtime import AwsConfigError

__all__ = ["capture_lambda_handler", "tracing_enabled"]

F = TypeVar("F", bound=Callable[..., Any])


def capture_lambda_handler(handler: F, env: Mapping[str, str] = os.environ) -> F:
    """``handler`` traced by Powertools' ``Tracer`` when tracing is on; ``handler`` itself otherwise."""
    if not tracing_enabled(env):
        return handler
    try:
        import aws_xray_sdk  # type: ignore[import-untyped]  # noqa: F401  (Tracer would fail later, less clearly)
        from aws_lambda_powertools import Tracer
    except ImportError as exc:
        raise AwsConfigError(
            f"{TRACE_DISABLED_ENV}=false turns X-Ray tracing on, but the X-Ray SDK is missing ({exc}): "
            "install aws-lambda-powertools[tracer] in the layer (layers/harness/requirements.txt)"
        ) from exc
    return cast(F, Tracer().capture_lambda_handler(handler))
