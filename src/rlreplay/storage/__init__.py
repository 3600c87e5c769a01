"""Storage of field data: column arrays and their memory, memmap or shared-memory backends."""

from rlreplay.storage.backends import Backend, MemmapBackend, MemoryBackend, make_backend
from rlreplay.storage.base import Storage
from rlreplay.storage.columns import Columns
from rlreplay.storage.shared import SharedBackend

__all__ = [
    "Backend",
    "Columns",
    "MemmapBackend",
    "MemoryBackend",
    "SharedBackend",
    "Storage",
    "make_backend",
]
