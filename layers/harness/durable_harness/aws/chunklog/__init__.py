"""The deployed chunk log (D4): a DynamoDB hot tail in the runs table, sealed into S3 segments.

:mod:`.log` holds the protocol (appends, fencing, sealing), :mod:`.reader` the reads and their
caches, :mod:`.items` how its items look, :mod:`.segments` its S3 objects.
"""

from .log import DynamoChunkLog

__all__ = ["DynamoChunkLog"]
