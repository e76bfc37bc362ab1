"""The deployed checkpoint store (D14): a run's head and its append-only records in the runs table.

:mod:`.store` holds the store, :mod:`.head` the head's fenced writes and expiry, :mod:`.records`
the record items, :mod:`.objects` the S3 objects of large records, :mod:`.listing` a principal's runs.
"""

from .store import DynamoCheckpointStore

__all__ = ["DynamoCheckpointStore"]
