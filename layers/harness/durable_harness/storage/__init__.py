"""Storage adapters for the checkpoint store and chunk log ports, and the group-commit writer.

Memory fakes for unit tests, SQLite and files for local mode; the AWS adapters live elsewhere.
Each is imported on first use: the Lambda functions import a few helpers of this package
(``storage.writer``, ``storage.health``) and must not load SQLite or the file log with them.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .files import FileChunkLog
    from .memory import MemoryCheckpointStore, MemoryChunkLog
    from .sqlite import SqliteCheckpointStore
    from .writer import ChunkWriter

__getattr__ = lazy_exports(
    __name__,
    {
        "ChunkWriter": ".writer",
        "FileChunkLog": ".files",
        "MemoryCheckpointStore": ".memory",
        "MemoryChunkLog": ".memory",
        "SqliteCheckpointStore": ".sqlite",
    },
)

__all__ = [
    "ChunkWriter",
    "FileChunkLog",
    "MemoryCheckpointStore",
    "MemoryChunkLog",
    "SqliteCheckpointStore",
]
