"""The on-disk checkpoint format: one file, versioned, checksummed, written atomically.

Layout (all integers little-endian)::

    b"RLREPLAY"                  8 bytes magic
    version                      u32
    header length H              u64
    header                       H bytes of UTF-8 JSON: {"meta": ..., "arrays": [...]}
    sha256(header)               32 bytes
    zero padding to a 64-byte boundary
    array data                   each array's raw C-order bytes at its 64-byte aligned offset
    sha256(array data region)    32 bytes

The header lists every array's name, dtype, shape, offset and size. Writing streams array by
array (no second copy of the buffer in RAM) into a temporary file beside the target, flushes
and fsyncs it, then renames it over the target: a process killed mid-save leaves the previous
checkpoint intact. Reading checks the magic, version, file size and header checksum before
trusting the header, then streams each array straight into its destination (no second copy)
and checks the data checksum at the end. No pickle anywhere.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import struct
import uuid
from collections.abc import Callable, Mapping
from glob import escape as glob_escape
from pathlib import Path
from typing import Any

import numpy as np

from rlreplay.errors import CheckpointError

__all__ = ["FORMAT_VERSION", "CheckpointReader", "write_checkpoint"]

MAGIC = b"RLREPLAY"
FORMAT_VERSION = 1
_ALIGN = 64
_CHUNK = 1 << 24  # 16 MiB: bounded extra memory while streaming
_PREFIX = struct.Struct("<8sIQ")

Array = np.ndarray[Any, Any]


def _aligned(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


def _byte_view(arr: Array) -> memoryview:
    return np.ascontiguousarray(arr).data.cast("B")


def write_checkpoint(
    path: str | os.PathLike[str], meta: Mapping[str, Any], arrays: Mapping[str, Array]
) -> None:
    """Write ``meta`` (JSON-able) and ``arrays`` to ``path`` atomically.

    Raises:
        CheckpointError: ``path`` is a directory, or its directory does not exist.
    """
    target = Path(path)
    if target.is_dir():
        raise CheckpointError(f"path: {str(target)!r} is a directory; a checkpoint is one file")
    if not target.parent.is_dir():
        raise CheckpointError(f"path: directory {str(target.parent)!r} does not exist")
    table = []
    offset = 0
    for name, arr in arrays.items():
        table.append(
            {
                "name": name,
                "dtype": arr.dtype.str,
                "shape": list(arr.shape),
                "offset": offset,
                "nbytes": int(arr.nbytes),
            }
        )
        offset = _aligned(offset + int(arr.nbytes))
    header = json.dumps({"meta": meta, "arrays": table, "data_size": offset}).encode()
    _remove_dead_temporaries(target)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        with open(tmp, "wb") as f:
            f.write(_PREFIX.pack(MAGIC, FORMAT_VERSION, len(header)))
            f.write(header)
            f.write(hashlib.sha256(header).digest())
            f.write(b"\0" * (_aligned(f.tell()) - f.tell()))
            data_hash = hashlib.sha256()
            written = 0
            for entry, arr in zip(table, arrays.values(), strict=True):
                pad = entry["offset"] - written
                if pad:
                    f.write(b"\0" * pad)
                    data_hash.update(b"\0" * pad)
                view = _byte_view(arr)
                for start in range(0, len(view), _CHUNK):
                    chunk = view[start : start + _CHUNK]
                    f.write(chunk)
                    data_hash.update(chunk)
                written = entry["offset"] + entry["nbytes"]
            tail = offset - written
            f.write(b"\0" * tail)
            data_hash.update(b"\0" * tail)
            f.write(data_hash.digest())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(target.parent)


def _remove_dead_temporaries(target: Path) -> None:
    """Delete temporary files of saves to ``target`` whose process is gone (killed mid-save).

    A temporary file is named ``.<target>.tmp-<pid>-<random>``; one whose process still runs
    may be a save in progress and is left alone. A recycled pid only delays the cleanup.
    """
    for tmp in target.parent.glob(f".{glob_escape(target.name)}.tmp-*-*"):
        pid = tmp.name[len(target.name) + 6 :].partition("-")[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            tmp.unlink(missing_ok=True)
        except (PermissionError, OverflowError):  # another user's live process, or no pid
            continue


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class CheckpointReader:
    """Reads a checkpoint written by :func:`write_checkpoint`.

    Opening checks everything that can be checked cheaply (magic, version, sizes, header
    checksum); :meth:`read_into` streams the arrays and checks the data checksum.

    Args:
        path: The checkpoint file.

    Raises:
        CheckpointError: Missing file, wrong magic, unknown version, truncated file, or a
            corrupted header.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        where = f"checkpoint {str(self.path)!r}"
        if not self.path.is_file():
            raise CheckpointError(f"{where}: no such file")
        size = self.path.stat().st_size
        with open(self.path, "rb") as f:
            prefix = f.read(_PREFIX.size)
            if len(prefix) < _PREFIX.size:
                raise CheckpointError(f"{where}: truncated ({size} bytes, no header)")
            magic, version, hlen = _PREFIX.unpack(prefix)
            if magic != MAGIC:
                raise CheckpointError(f"{where}: not an rlreplay checkpoint (bad magic {magic!r})")
            if version != FORMAT_VERSION:
                raise CheckpointError(
                    f"{where}: format version {version}, this rlreplay reads version "
                    f"{FORMAT_VERSION}"
                )
            if _PREFIX.size + hlen + 32 > size:
                raise CheckpointError(f"{where}: truncated inside the header")
            header = f.read(hlen)
            if hashlib.sha256(header).digest() != f.read(32):
                raise CheckpointError(f"{where}: header checksum mismatch (corrupted file)")
        try:
            parsed = json.loads(header)
        except ValueError as exc:
            raise CheckpointError(f"{where}: unreadable header: {exc}") from exc
        self.data_start = _aligned(_PREFIX.size + hlen + 32)
        self.meta: dict[str, Any] = parsed["meta"]
        self.table: list[dict[str, Any]] = parsed["arrays"]
        data_size = int(parsed["data_size"])
        expected = self.data_start + data_size + 32
        if size != expected:
            raise CheckpointError(
                f"{where}: expected {expected} bytes, found {size} (truncated or padded file)"
            )
        self.data_size = data_size

    def read_into(
        self, destination: Callable[[str, np.dtype[Any], tuple[int, ...]], Array]
    ) -> None:
        """Stream every array into ``destination(name, dtype, shape)``'s returned array.

        The destination must be a C-contiguous array of exactly that dtype and shape.

        Raises:
            CheckpointError: Data checksum mismatch, or a destination that does not fit.
        """
        where = f"checkpoint {str(self.path)!r}"
        data_hash = hashlib.sha256()
        with open(self.path, "rb") as f:
            f.seek(self.data_start)
            pos = 0
            for entry in self.table:
                _skip(f, entry["offset"] - pos, data_hash)
                dtype = np.dtype(entry["dtype"])
                shape = tuple(entry["shape"])
                dest = destination(entry["name"], dtype, shape)
                if dest.dtype != dtype or dest.shape != shape or not dest.flags.c_contiguous:
                    raise CheckpointError(
                        f"{where}: array {entry['name']!r} is {dtype}{list(shape)}, the buffer "
                        f"expects {dest.dtype}{list(dest.shape)}"
                    )
                _read_exact(f, dest.data.cast("B") if dest.nbytes else None, data_hash)
                pos = entry["offset"] + entry["nbytes"]
            _skip(f, self.data_size - pos, data_hash)
            if data_hash.digest() != f.read(32):
                raise CheckpointError(f"{where}: data checksum mismatch (corrupted file)")


def _skip(f: io.BufferedReader, n: int, h: Any) -> None:
    if n:
        h.update(f.read(n))


def _read_exact(f: io.BufferedReader, view: memoryview | None, h: Any) -> None:
    if view is None:
        return
    for start in range(0, len(view), _CHUNK):
        chunk = view[start : start + _CHUNK]
        got = f.readinto(chunk)
        if got != len(chunk):
            raise CheckpointError("checkpoint: truncated inside the array data")
        h.update(chunk)
