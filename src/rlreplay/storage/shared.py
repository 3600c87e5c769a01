"""Arrays in POSIX shared memory (``multiprocessing.shared_memory``), and the memory fences that
let processes publish writes to them.

The owner of a buffer creates one segment per array (:class:`SharedBackend`); writer processes
map them by name (:func:`map_segment`). Segment names start with ``rlr_`` so that a test (or an
operator) can find them in ``/dev/shm``.

Lifetime: the owner unlinks its segments when it closes or is collected (a ``weakref.finalize``).
If the owner is killed outright, :mod:`multiprocessing`'s resource tracker (a separate process
that outlives it) unlinks them. Writers map segments *without* registering them with a resource
tracker: Python 3.11 would otherwise unlink the owner's segments when a writer's tracker exits.

Memory ordering. NumPy writes are plain stores. A writer publishes them by storing a counter
after a full fence (:func:`store_release`); a reader loads the counter and then fences before
reading the data (:func:`load_acquire`). The fences are LLVM ``fence seq_cst`` instructions
(``mfence`` on x86, ``dmb ish`` on ARM), so the protocol holds on both architectures, not only
under x86's total store order. Aligned int64 loads and stores are single-copy atomic on both.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import secrets
import weakref
from multiprocessing import shared_memory
from typing import Any

import numba
import numpy as np
from numba.core import types
from numba.extending import intrinsic

from rlreplay.errors import ConfigError, ReplayClosed

__all__ = [
    "PREFIX",
    "MappedSegment",
    "SharedBackend",
    "fence",
    "load_acquire",
    "map_segment",
    "store_release",
]

Array = np.ndarray[Any, Any]

#: Every segment of every shared buffer has a name starting with this.
PREFIX = "rlr_"


@intrinsic
def _fence(typingctx: Any) -> Any:  # pragma: no cover - compiled
    """A full (sequentially consistent) memory fence."""
    sig = types.void()

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        builder.fence("seq_cst")
        return context.get_dummy_value()

    return sig, codegen


@numba.njit(cache=True)
def fence() -> None:  # pragma: no cover - compiled
    """A full memory fence (no load or store moves across it)."""
    _fence()  # type: ignore[call-arg]


@numba.njit(cache=True)
def store_release(arr: Array, i: int, j: int, value: int) -> None:  # pragma: no cover
    """Fence, then ``arr[i, j] = value``: every earlier store is visible before this one."""
    _fence()  # type: ignore[call-arg]
    arr[i, j] = value


@numba.njit(cache=True)
def store_then_fence(arr: Array, i: int, j: int, value: int) -> None:  # pragma: no cover
    """``arr[i, j] = value``, then fence: this store is visible before any later one."""
    arr[i, j] = value
    _fence()  # type: ignore[call-arg]


@numba.njit(cache=True)
def load_acquire(arr: Array, i: int, j: int) -> int:  # pragma: no cover - compiled
    """``arr[i, j]``, then fence: no later load is served before this one."""
    v = arr[i, j]
    _fence()  # type: ignore[call-arg]
    return v


@numba.njit(cache=True)
def fence_then_load(arr: Array, i: int, j: int) -> int:  # pragma: no cover - compiled
    """Fence, then ``arr[i, j]``: every earlier load completed before this one."""
    _fence()  # type: ignore[call-arg]
    v: int = arr[i, j]
    return v


class SharedBackend:
    """Zero-filled arrays, each in its own shared-memory segment, owned by this process.

    ``frozen`` is set once the arrays were handed to other processes (:meth:`segments`); a
    later reallocation (the final-observation ring growing) would leave them writing to a
    segment nobody reads, so it raises :class:`rlreplay.ConfigError` instead.
    """

    kind = "shared"

    def __init__(self) -> None:
        self.token = secrets.token_hex(5)
        self._segments: dict[str, shared_memory.SharedMemory] = {}
        self._layout: dict[str, tuple[str, tuple[int, ...], str]] = {}
        self._count = 0
        self.frozen = False
        # Unlink on collection too (the finalizer holds the segments, not this object).
        self._finalizer = weakref.finalize(self, _unlink_all, self._segments)

    def allocate(self, name: str, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Array:
        if name in self._segments and self.frozen:
            raise ConfigError(
                f"storage='shared': the array {name!r} would be reallocated after the buffer "
                "was shared; writer processes would keep writing the old one"
            )
        nbytes = max(1, int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)
        self._count += 1
        seg_name = f"{PREFIX}{self.token}_{self._count}"
        seg = shared_memory.SharedMemory(seg_name, create=True, size=nbytes)
        self.release(name)
        self._segments[name] = seg
        self._layout[name] = (seg_name, tuple(shape), np.dtype(dtype).str)
        # frombuffer holds an export of the segment's buffer for as long as the array (or a
        # view of it) lives, so the mapping cannot be closed under it (ndarray(buffer=...)
        # would not: it releases the export at once, and a later close() unmaps live arrays).
        count = int(np.prod(shape, dtype=np.int64))
        view = seg.buf
        assert view is not None  # a segment just created is mapped
        arr: Array = np.frombuffer(view, dtype, count).reshape(shape)
        return arr  # zero-filled: a new segment is (sparse) zeros

    def release(self, name: str) -> None:
        seg = self._segments.pop(name, None)
        self._layout.pop(name, None)
        if seg is not None:
            _unlink(seg)

    def segments(self) -> dict[str, tuple[str, tuple[int, ...], str]]:
        """``name -> (segment name, shape, dtype str)`` of every array; freezes the layout."""
        self.frozen = True
        return dict(self._layout)

    def flush(self) -> None:
        return None

    def close(self) -> None:
        """Unlink every segment; arrays already handed out stay readable until dropped (they
        hold their mapping), and the memory is freed with the last of them."""
        self._finalizer()


def _unlink(seg: shared_memory.SharedMemory) -> None:
    """Unlink ``seg``'s name and let go of it: the mapping is closed now if no array uses it,
    else when its last array is dropped (the arrays hold it through their buffer export)."""
    with contextlib.suppress(FileNotFoundError):
        seg.unlink()
    try:
        seg.close()
    except BufferError:  # arrays still use the mapping: they keep it alive
        _detach(seg)


def _detach(seg: shared_memory.SharedMemory) -> None:
    """Drop ``seg``'s own references to its mapping without closing it, and close its file
    descriptor, so that neither a later ``close()`` nor its finaliser can unmap memory that
    arrays still read (the mapping is freed with the last array's buffer export)."""
    own: Any = seg  # SharedMemory's private fields (POSIX): _fd, _buf, _mmap
    fd = getattr(own, "_fd", -1)
    if isinstance(fd, int) and fd >= 0:
        with contextlib.suppress(OSError):
            os.close(fd)
        own._fd = -1
    own._buf = None
    own._mmap = None


def _unlink_all(segments: dict[str, shared_memory.SharedMemory]) -> None:
    for seg in list(segments.values()):
        _unlink(seg)
    segments.clear()


class MappedSegment:
    """A segment created by another process, mapped here without a resource tracker.

    ``fd`` stays open for the life of the mapping: byte-range locks taken on it (writer
    ownership of envs) belong to this process and vanish with it, even on SIGKILL.
    """

    def __init__(self, name: str) -> None:
        import _posixshmem  # the module behind multiprocessing.shared_memory on POSIX

        try:
            self.fd = _posixshmem.shm_open("/" + name, os.O_RDWR, mode=0o600)
        except FileNotFoundError:
            raise ReplayClosed(
                f"attach: shared segment {name!r} does not exist (the owning buffer was closed "
                "or its process ended)"
            ) from None
        size = os.fstat(self.fd).st_size
        self.mmap = mmap.mmap(self.fd, size)
        self.name = name

    def array(self, shape: tuple[int, ...], dtype: str) -> Array:
        arr: Array = np.ndarray(shape, np.dtype(dtype), buffer=self.mmap)
        return arr

    def close(self) -> None:
        """Close the descriptor (releasing its locks); the mapping goes with its arrays."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def map_segment(name: str) -> MappedSegment:
    """Map the shared segment ``name`` (created by a :class:`SharedBackend`)."""
    return MappedSegment(name)
