"""AWS adapters of the ports: DynamoDB checkpoints and chunk log (S3 for large data), Step Functions, EventBridge.

Import this package only where boto3 is available (the Lambda functions, tests with moto); the
local mode never needs it.
"""

from ._errors import AwsRequestError
from .chunklog import DynamoChunkLog
from .dynamodb import DynamoCheckpointStore
from .events import EventPublisher, StartRunRequest, parse_start_run_event, run_id_for_event, start_run_pattern
from .runtime import AwsConfigError, AwsRuntime, build_runtime
from .stepfunctions import StepFunctionsOrchestrator, execution_name

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
