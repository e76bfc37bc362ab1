"""AWS adapters of the ports: DynamoDB checkpoints and chunk log (S3 for large data), Step Functions, EventBridge.

Import this package only where botocore is available (the Lambda functions, tests with moto); the
local mode never needs it. The names below are imported on first use, so that importing one
module of the package (``aws.clients`` for a Bedrock model, say) does not import them all.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from ._errors import AwsRequestError
    from .checkpoints import DynamoCheckpointStore
    from .chunklog import DynamoChunkLog
    from .events import EventPublisher, StartRunRequest, parse_start_run_event, run_id_for_event, start_run_pattern
    from .runtime import AwsConfigError, AwsRuntime, build_runtime
    from .stepfunctions import StepFunctionsOrchestrator, execution_name

__getattr__ = lazy_exports(
    __name__,
    {
        "AwsConfigError": ".runtime",
        "AwsRequestError": "._errors",
        "AwsRuntime": ".runtime",
        "DynamoCheckpointStore": ".checkpoints",
        "DynamoChunkLog": ".chunklog",
        "EventPublisher": ".events",
        "StartRunRequest": ".events",
        "StepFunctionsOrchestrator": ".stepfunctions",
        "build_runtime": ".runtime",
        "execution_name": ".stepfunctions",
        "parse_start_run_event": ".events",
        "run_id_for_event": ".events",
        "start_run_pattern": ".events",
    },
)

__all__ = [
    "AwsConfigError",
    "AwsRequestError",
    "AwsRuntime",
    "DynamoCheckpointStore",
    "DynamoChunkLog",
    "EventPublisher",
    "StartRunRequest",
    "StepFunctionsOrchestrator",
    "build_runtime",
    "execution_name",
    "parse_start_run_event",
    "run_id_for_event",
    "start_run_pattern",
]
