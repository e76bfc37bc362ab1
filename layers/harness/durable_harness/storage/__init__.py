"""Storage adapters for the checkpoint store and chunk log ports (their contract: ``checkpoints``, ``chunks``).

Memory fakes for unit tests, SQLite and files for local mode; the AWS adapters live elsewhere.
Each is imported on first use: the Lambda functions import ``storage.health`` and must not load
SQLite or the file log with it.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .files import FileChunkLog
    from .memory import MemoryCheckpointStore, MemoryChunkLog
    from .sqlite import SqliteCheckpointStore

__getattr__ = lazy_exports(
    __name__,
    {
        "FileChunkLog": ".files",
        "MemoryCheckpointStore": ".memory",
        "MemoryChunkLog": ".memory",
        "SqliteCheckpointStore": ".sqlite",
    },
)

__all__ = [
    "FileChunkLog",
    "MemoryCheckpointStore",
    "MemoryChunkLog",
    "SqliteCheckpointStore",
]
