"""A streaming, read-only view of a checkpoint file: arrays mapped, never loaded whole.

:class:`rlreplay.checkpoint.file.CheckpointReader` checks the header (magic, version, sizes,
header checksum, every array entry); this view then maps each array of the data region with
:class:`numpy.memmap` (read-only), so a statistic over a column reads it from the page cache
chunk by chunk instead of allocating a copy of it. :meth:`CheckpointView.verify` hashes the
data region in bounded chunks and compares it with the stored checksum, the same check a load
makes, without loading anything.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np

from rlreplay.checkpoint.file import CheckpointReader

__all__ = ["CheckpointView", "Integrity", "slices_of_rows"]

Array = np.ndarray[Any, Any]
_CHUNK = 1 << 24  # bytes of a mapped column reduced at a time (views: nothing is copied)
_HASH_BLOCK = 1 << 20  # bytes read at a time to hash the data region


class Integrity(NamedTuple):
    """The result of :meth:`CheckpointView.verify`.

    Attributes:
        ok: Whether the data region's checksum matches.
        data_bytes: Bytes of the data region hashed.
        message: A sentence for people.
    """

    ok: bool
    data_bytes: int
    message: str


class CheckpointView:
    """Read-only mapped arrays and the header of a checkpoint.

    Args:
        path: The checkpoint file.

    Raises:
        CheckpointError: The file is missing, not a checkpoint, or has a corrupted header.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.reader = CheckpointReader(path)
        self.path = self.reader.path
        self.meta: dict[str, Any] = self.reader.meta
        self._entries = {e["name"]: e for e in self.reader.table}

    @property
    def names(self) -> list[str]:
        """The arrays' names, in file order."""
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def array(self, name: str) -> Array:
        """Array ``name`` mapped read-only from the file (no copy; pages load when read).

        Raises:
            KeyError: No array of that name.
        """
        entry = self._entries[name]
        dtype, shape = np.dtype(entry["dtype"]), tuple(entry["shape"])
        if entry["nbytes"] == 0:
            return np.zeros(shape, dtype)
        offset = self.reader.data_start + entry["offset"]
        mapped: Array = np.memmap(self.path, dtype=dtype, mode="r", offset=offset, shape=shape)
        return mapped

    def verify(self) -> Integrity:
        """Hash the data region in chunks and compare it with the stored checksum."""
        size = self.reader.data_size
        digest = hashlib.sha256()
        block = memoryview(bytearray(_HASH_BLOCK))  # one reused buffer: memory stays bounded
        with open(self.path, "rb") as f:
            f.seek(self.reader.data_start)
            left = size
            while left > 0:
                got = f.readinto(block[: min(left, _HASH_BLOCK)])
                if not got:
                    return Integrity(False, size - left, "truncated inside the array data")
                digest.update(block[:got])
                left -= got
            stored = f.read(32)
        if digest.digest() != stored:
            return Integrity(False, size, "data checksum mismatch (corrupted file)")
        return Integrity(True, size, "header and data checksums match")


def slices_of_rows(array: Array, rows: tuple[int, int], max_bytes: int = _CHUNK) -> Iterator[Array]:
    """Consecutive pieces of ``array[rows[0]:rows[1]]`` of at most about ``max_bytes`` each."""
    start, stop = rows
    row_bytes = max(1, array[:1].nbytes if array.shape[0] else 1)
    step = max(1, max_bytes // row_bytes)
    for a in range(start, stop, step):
        yield np.asarray(array[a : min(stop, a + step)])
