"""Storage adapters for the checkpoint store and chunk log ports, and the group-commit writer.

Memory fakes for unit tests, SQLite and files for local mode; the AWS adapters live elsewhere.
"""

from .files import FileChunkLog
from .memory import MemoryCheckpointStore, MemoryChunkLog
from .sqlite import SqliteCheckpointStore
from .writer import ChunkWriter

__all__ = [
    "ChunkWriter",
    "FileChunkLog",
    "MemoryCheckpointStore",
    "MemoryChunkLog",
    "SqliteCheckpointStore",
]
