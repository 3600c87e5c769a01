"""The versioned, checksummed, atomically written checkpoint file.

Owns the on-disk format: a header of metadata and a table of named arrays. Knows nothing of
what the arrays mean: every part of a buffer gives and takes its own.
"""

from rlreplay.checkpoint.file import (
    FORMAT_VERSION,
    READ_VERSIONS,
    CheckpointReader,
    Rows,
    write_checkpoint,
)

__all__ = ["FORMAT_VERSION", "READ_VERSIONS", "CheckpointReader", "Rows", "write_checkpoint"]
