"""Where column arrays live: process memory or memory-mapped files.

A backend only allocates and releases arrays; what the arrays mean is the columns' business.
"""

from __future__ import annotations

import fcntl
import os
import weakref
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from rlreplay.errors import ConfigError

__all__ = ["Backend", "MemmapBackend", "MemoryBackend", "make_backend"]

Array = np.ndarray[Any, Any]


class Backend(Protocol):
    """Allocates zero-filled arrays by name."""

    kind: str

    def allocate(self, name: str, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Array:
        """A zero-filled array; a later call with the same name replaces the earlier one."""
        ...

    def release(self, name: str) -> None:
        """Drop the array allocated under ``name`` (after it was replaced or is no longer used)."""
        ...

    def flush(self) -> None:
        """Make written data durable where that means anything."""
        ...

    def close(self) -> None:
        """Flush and release what the backend holds besides the arrays (files, locks)."""
        ...


class MemoryBackend:
    """NumPy arrays in process memory (``np.zeros``: pages become resident only when written)."""

    kind = "memory"

    def allocate(self, name: str, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Array:
        return np.zeros(shape, dtype)

    def release(self, name: str) -> None:
        return None

    def flush(self) -> None:
        return None

    def close(self) -> None:
        return None


class MemmapBackend:
    """Arrays backed by files in a directory, so a buffer can be larger than RAM.

    The files are working storage, never a checkpoint: they hold no index, and a new buffer on
    the directory deletes files left by a buffer that is gone. One live buffer per directory:
    an exclusive lock on ``rlreplay.lock`` makes a second one raise ``ConfigError``. Use
    :meth:`ReplayBuffer.save` for checkpoints; :func:`rlreplay.load` can stream a checkpoint
    straight into a memmap buffer.
    """

    kind = "memmap"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            self._lock_file = open(self.path / "rlreplay.lock", "a+b")  # noqa: SIM115
        except OSError as exc:
            raise ConfigError(
                f"path: cannot create memmap directory {str(self.path)!r}: {exc}"
            ) from exc
        try:
            # One live buffer per directory: a second one would overwrite the first's files.
            # The lock goes with this object (and with the process), never blocks.
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._lock_file.close()
            raise ConfigError(
                f"path: {str(self.path)!r} is the working directory of another live memmap "
                "buffer; give each buffer its own directory"
            ) from None
        # Release the lock when this backend is collected, even if close() was never called.
        self._finalizer = weakref.finalize(self, self._lock_file.close)
        # Files left by a buffer that is gone (its process died) are working files, not data.
        for stale in self.path.glob("rlreplay-*.bin"):
            stale.unlink(missing_ok=True)
        self._files: dict[str, Path] = {}
        self._arrays: dict[str, np.memmap[Any, Any]] = {}
        self._generation = 0

    def allocate(self, name: str, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Array:
        if int(np.prod(shape, dtype=np.int64)) * dtype.itemsize == 0:
            return np.zeros(shape, dtype)  # mmap cannot map an empty file
        self._generation += 1
        file = self.path / f"rlreplay-{name}-{self._generation}.bin"
        arr: np.memmap[Any, Any] = np.memmap(file, dtype=dtype, mode="w+", shape=shape)
        old = self._files.get(name)
        self._files[name] = file
        self._arrays[name] = arr
        if old is not None:
            old.unlink(missing_ok=True)
        # A plain-ndarray view (the mapping stays alive through .base): gathers from it are
        # ordinary arrays rather than np.memmap instances detached from any file.
        return arr.view(np.ndarray)

    def release(self, name: str) -> None:
        arr = self._arrays.pop(name, None)
        file = self._files.pop(name, None)
        if arr is not None:
            arr.flush()
        if file is not None:
            file.unlink(missing_ok=True)

    def flush(self) -> None:
        for arr in self._arrays.values():
            arr.flush()

    def close(self) -> None:
        """Flush the files and release the directory (the arrays stay readable)."""
        self.flush()
        self._finalizer()


def make_backend(storage: str, path: str | os.PathLike[str] | None) -> Backend:
    """The backend named by ``storage`` (``"memory"``, ``"memmap"`` with ``path``, ``"shared"``)."""
    if storage == "memory":
        if path is not None:
            raise ConfigError("path: only used with storage='memmap'; got storage='memory'")
        return MemoryBackend()
    if storage == "memmap":
        if path is None:
            raise ConfigError("path: storage='memmap' needs path=DIR for its working files")
        return MemmapBackend(path)
    if storage == "shared":
        if path is not None:
            raise ConfigError("path: only used with storage='memmap'; got storage='shared'")
        from rlreplay.storage.shared import SharedBackend

        return SharedBackend()
    raise ConfigError(
        f"storage: expected 'memory', 'memmap' or 'shared' (or 'torch' for rr.ReplayBuffer and "
        f"rr.PrioritizedReplayBuffer), got {storage!r}"
    )
