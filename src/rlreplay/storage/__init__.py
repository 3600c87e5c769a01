"""Storage of field data: column arrays and their memory or memmap backends."""

from rlreplay.storage.backends import Backend, MemmapBackend, MemoryBackend, make_backend
from rlreplay.storage.columns import Columns

__all__ = ["Backend", "Columns", "MemmapBackend", "MemoryBackend", "make_backend"]
