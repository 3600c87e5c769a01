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

An array may be written from, and read into, runs of rows of a larger array (:class:`Rows`):
a buffer's checkpoint holds only the rows that hold data, without gathering them into a copy.

Versions: 1 (rlreplay 0.1.0) and 2 (per-slot arrays hold only the rows of stored steps; the
container is the same). The reader accepts both and says which it read (``version``); what the
arrays mean is the writer's business (:mod:`rlreplay.buffer.state`).

Both show a tqdm progress bar counted in bytes for large checkpoints when stderr is a terminal
(``progress=``; see :mod:`rlreplay.io.progress`, imported only then).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import itertools
import json
import os
import struct
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from glob import escape as glob_escape
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from rlreplay.errors import CheckpointError

__all__ = ["FORMAT_VERSION", "READ_VERSIONS", "CheckpointReader", "Rows", "write_checkpoint"]

MAGIC = b"RLREPLAY"
FORMAT_VERSION = 2  # what write_checkpoint writes
READ_VERSIONS = (1, 2)  # what CheckpointReader reads
_ALIGN = 64
_CHUNK = 1 << 24  # 16 MiB: bounded extra memory while streaming
_GATHER = 1 << 14  # Rows: runs of fewer bytes are copied in gathered chunks (see Rows.pieces)
_PREFIX = struct.Struct("<8sIQ")

Array = np.ndarray[Any, Any]


def _aligned(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


def _byte_view(arr: Array) -> memoryview:
    return np.ascontiguousarray(arr).data.cast("B")


class Rows(NamedTuple):
    """Runs of rows of ``array`` seen as one array: ``concatenate([array[a:b] for a, b in
    runs])``, written from and read into ``array`` in place (no gathered copy).

    Attributes:
        array: A C-contiguous array (a memmap too).
        runs: int64 ``(n, 2)``: ``[start, stop)`` row ranges of ``array``, in file order, each
            within ``0 .. len(array)``.
    """

    array: Array
    runs: Array

    @property
    def dtype(self) -> np.dtype[Any]:
        out: np.dtype[Any] = self.array.dtype
        return out

    @property
    def shape(self) -> tuple[int, ...]:
        rows = int((self.runs[:, 1] - self.runs[:, 0]).sum()) if self.runs.shape[0] else 0
        return (rows, *self.array.shape[1:])

    def pieces(self) -> Iterator[tuple[int, int] | Array]:
        """The rows in file order, piece by piece: ``(start, stop)`` for a run of at least
        :data:`_GATHER` bytes, else the row numbers of consecutive smaller runs (at most
        :data:`_CHUNK` bytes of them), copied through one gathered array. Many small runs (a
        ring per env, many envs) then cost one write and one hash update per chunk, not per
        run."""
        runs = self.runs
        if not runs.shape[0]:
            return
        row_bytes = self.dtype.itemsize
        for n in self.array.shape[1:]:
            row_bytes *= int(n)
        nbytes = (runs[:, 1] - runs[:, 0]) * row_bytes
        big = nbytes >= _GATHER
        # Stretches of consecutive big runs or of consecutive small ones (vectorised: a ring
        # per env makes thousands of runs).
        edges = [0, *(np.flatnonzero(big[1:] != big[:-1]) + 1).tolist(), runs.shape[0]]
        for a, b in itertools.pairwise(edges):
            if big[a]:
                yield from (tuple(run) for run in runs[a:b].tolist())
                continue
            # Small runs in groups of about _CHUNK bytes (a group ends where the running total
            # crosses a multiple of _CHUNK).
            group = (np.cumsum(nbytes[a:b]) - 1) // _CHUNK
            cuts = [0, *(np.flatnonzero(group[1:] != group[:-1]) + 1).tolist(), b - a]
            for c, d in itertools.pairwise(cuts):
                yield _rows_of(runs[a + c : a + d])


def _rows_of(r: Array) -> Array:
    """The row numbers of ``[start, stop)`` runs ``r`` (``(n, 2)``), in order."""
    size = r[:, 1] - r[:, 0]
    # Row p of the result (counted from the run's first, at offset cumsum - size) is
    # start + p - offset.
    out: Array = np.repeat(r[:, 0] - (np.cumsum(size) - size), size)
    out += np.arange(out.shape[0], dtype=np.int64)
    return out


def _blocks(arr: Array | Rows) -> Iterator[Array]:
    """The bytes of ``arr`` in order, as contiguous arrays (views, or gathered chunks)."""
    if not isinstance(arr, Rows):
        yield arr
        return
    items = _row_items(arr.array)
    for piece in arr.pieces():
        yield arr.array[piece[0] : piece[1]] if isinstance(piece, tuple) else items[piece]


def _row_items(array: Array) -> Array:
    """A 1-D view of ``array`` whose items are its rows as opaque bytes (``array`` itself if
    it is 1-D or has empty rows): gathering and scattering rows through it is one fancy index
    of fixed-size items, many times faster than NumPy's n-d path for small rows."""
    row_bytes = array.dtype.itemsize * int(np.prod(array.shape[1:]))
    if array.ndim == 1 or row_bytes == 0:
        return array
    base = np.asarray(array)  # a memmap's buffer, without the subclass
    items: Array = base.reshape(base.shape[0], -1).view(np.dtype((np.void, row_bytes)))[:, 0]
    return items


def _nbytes(arr: Array | Rows) -> int:
    count = 1
    for n in arr.shape:
        count *= int(n)
    return count * arr.dtype.itemsize


def write_checkpoint(
    path: str | os.PathLike[str],
    meta: Mapping[str, Any],
    arrays: Mapping[str, Array | Rows],
    *,
    progress: bool | None = None,
) -> None:
    """Write ``meta`` (JSON-able) and ``arrays`` to ``path`` atomically.

    Args:
        path: The checkpoint file.
        meta: JSON-able header data.
        arrays: Name -> array (or :class:`Rows` of one), written in this order.
        progress: A progress bar (tqdm): ``None`` for large data when stderr is a terminal.

    Raises:
        CheckpointError: ``path`` is a directory, or its directory does not exist.
        ImportError: ``progress=True`` without tqdm.
    """
    from rlreplay.io.progress import byte_progress  # (in here: rlreplay.io is a layer above)

    target = Path(path)
    if target.is_dir():
        raise CheckpointError(f"path: {str(target)!r} is a directory; a checkpoint is one file")
    if not target.parent.is_dir():
        raise CheckpointError(f"path: directory {str(target.parent)!r} does not exist")
    table: list[dict[str, Any]] = []
    offset = 0
    for name, arr in arrays.items():
        table.append(
            {
                "name": name,
                "dtype": arr.dtype.str,
                "shape": list(arr.shape),
                "offset": offset,
                "nbytes": _nbytes(arr),
            }
        )
        offset = _aligned(offset + _nbytes(arr))
    header = json.dumps({"meta": meta, "arrays": table, "data_size": offset}).encode()
    _remove_dead_temporaries(target)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    bar = byte_progress(offset, f"save {target.name}", progress)  # of the data region's bytes
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
                    bar.update(pad)
                for block in _blocks(arr):
                    if not block.nbytes:
                        continue
                    view = _byte_view(block)
                    for start in range(0, len(view), _CHUNK):
                        chunk = view[start : start + _CHUNK]
                        f.write(chunk)
                        data_hash.update(chunk)
                        bar.update(len(chunk))
                written = entry["offset"] + entry["nbytes"]
            tail = offset - written
            f.write(b"\0" * tail)
            data_hash.update(b"\0" * tail)
            bar.update(tail)
            f.write(data_hash.digest())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        bar.close()
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
        progress: A progress bar (tqdm) in :meth:`read_into`: ``None`` for large data when
            stderr is a terminal.

    Raises:
        CheckpointError: Missing file, wrong magic, unknown version, truncated file, or a
            corrupted header.
        ImportError: ``progress=True`` without tqdm.
    """

    def __init__(self, path: str | os.PathLike[str], *, progress: bool | None = None) -> None:
        from rlreplay.io.progress import require_tqdm  # (in here: rlreplay.io is a layer above)

        require_tqdm(progress)  # an ImportError now, not a CheckpointError while loading
        self.path = Path(path)
        self.progress = progress
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
            if version not in READ_VERSIONS:
                raise CheckpointError(
                    f"{where}: format version {version}, this rlreplay reads versions "
                    f"{', '.join(map(str, READ_VERSIONS))} (a newer rlreplay wrote it?)"
                )
            if _PREFIX.size + hlen + 32 > size:
                raise CheckpointError(f"{where}: truncated inside the header")
            header = f.read(hlen)
            if hashlib.sha256(header).digest() != f.read(32):
                raise CheckpointError(f"{where}: header checksum mismatch (corrupted file)")
        try:
            parsed = json.loads(header)
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            raise CheckpointError(f"{where}: unreadable header: {exc}") from None
        self.version: int = version
        self.data_start = _aligned(_PREFIX.size + hlen + 32)
        self.size = size
        if not isinstance(parsed, dict) or set(parsed) != {"meta", "arrays", "data_size"}:
            raise CheckpointError(f"{where}: header must hold exactly meta, arrays and data_size")
        meta, table, data_size = parsed["meta"], parsed["arrays"], parsed["data_size"]
        if not isinstance(meta, dict) or not isinstance(table, list):
            raise CheckpointError(f"{where}: header meta must be an object, arrays a list")
        if _as_count(data_size) is None:
            raise CheckpointError(f"{where}: data_size must be an integer >= 0; got {data_size!r}")
        expected = self.data_start + data_size + 32
        if size != expected:
            raise CheckpointError(
                f"{where}: expected {expected} bytes, found {size} (truncated or padded file)"
            )
        self.meta: dict[str, Any] = meta
        self.table: list[dict[str, Any]] = [
            _check_entry(where, i, entry, data_size) for i, entry in enumerate(table)
        ]
        end, names = 0, set()
        for entry in self.table:
            if entry["offset"] < end or entry["name"] in names:
                raise CheckpointError(
                    f"{where}: array {entry['name']!r} overlaps the one before it or repeats a "
                    "name (offsets must grow, names be unique)"
                )
            end = entry["offset"] + entry["nbytes"]
            names.add(entry["name"])
        self.data_size: int = data_size

    def require_fit(self, what: str, count: Any, item_bytes: int) -> int:
        """``count`` (from the header) as an int, if ``count`` items of ``item_bytes`` fit the file.

        A loader calls this for every count of the header that sizes an allocation (a
        capacity, a number of final records), with the fewest bytes one item takes in a valid
        file, before it allocates anything: a hostile header then fails before any allocation
        larger than the file.

        Raises:
            CheckpointError: ``count`` is not an integer ``>= 0``, or the items would take
                more bytes than the whole file.
        """
        where = f"checkpoint {str(self.path)!r}"
        if _as_count(count) is None:
            raise CheckpointError(f"{where}: {what} must be an integer >= 0; got {count!r}")
        if count * item_bytes > self.size:
            raise CheckpointError(
                f"{where}: {what} {count} would take {count * item_bytes} bytes, more than the "
                f"whole file ({self.size} bytes): the header is inconsistent"
            )
        return int(count)

    def require_data_only(self, config: Mapping[str, Any]) -> None:
        """Refuse a configuration that names storage or code (only a caller's overrides may).

        Raises:
            CheckpointError: ``config`` holds ``storage``, ``path`` or ``transforms``.
        """
        named = sorted(_NEVER_FROM_FILE & set(config))
        if named:
            raise CheckpointError(
                f"checkpoint {str(self.path)!r}: the configuration names {named}, which a "
                "checkpoint never holds (pass them to rlreplay.load)"
            )

    def require_same(self, what: str, stored: Any, rebuilt: Any) -> None:
        """Refuse a header value that the buffer built from it would not write back as is.

        A value that a loader coerced (a string where a number belongs, a float for an int)
        or ignored makes the file something :func:`write_checkpoint` never wrote. Only the
        keys the file has are compared, so a later rlreplay may add keys to what it writes.

        Raises:
            CheckpointError: ``stored`` and ``rebuilt`` differ as JSON.
        """
        if _canonical(stored) != _canonical(_project(rebuilt, stored)):
            raise CheckpointError(
                f"checkpoint {str(self.path)!r}: the {what} in the header is not what a buffer "
                f"built from it holds: {stored!r} != {rebuilt!r}"
            )

    @contextmanager
    def loading(self) -> Iterator[None]:
        """Turns any error of building a buffer from this file into a :class:`CheckpointError`.

        Every value of a checksummed header has been checked for its type and range where the
        format defines it; the configuration and state are checked by the constructors and
        loaders they go to, whose errors (a ``ConfigError``, a ``KeyError`` for a missing key, a
        ``TypeError`` for a value of the wrong type) all mean "this file is not a valid
        checkpoint" here.
        """
        try:
            yield
        except CheckpointError:
            raise
        except Exception as exc:
            raise CheckpointError(
                f"checkpoint {str(self.path)!r}: inconsistent contents "
                f"({type(exc).__name__}: {exc})"
            ) from exc

    def read_into(
        self, destination: Callable[[str, np.dtype[Any], tuple[int, ...]], Array | Rows]
    ) -> None:
        """Stream every array into ``destination(name, dtype, shape)``'s returned array.

        The destination must be a C-contiguous array of exactly that dtype and shape, or
        :class:`Rows` of one with that dtype and shape (filled run by run).

        Raises:
            CheckpointError: Data checksum mismatch, or a destination that does not fit.
        """
        from rlreplay.io.progress import byte_progress  # (in here: rlreplay.io is a layer above)

        where = f"checkpoint {str(self.path)!r}"
        data_hash = hashlib.sha256()
        bar = byte_progress(self.data_size, f"load {self.path.name}", self.progress)
        with open(self.path, "rb") as f, contextlib.closing(bar):
            f.seek(self.data_start)
            pos = 0
            for entry in self.table:
                _skip(f, entry["offset"] - pos, data_hash, bar)
                dtype = np.dtype(entry["dtype"])
                shape = entry["shape"]
                dest = destination(entry["name"], dtype, shape)
                base = dest.array if isinstance(dest, Rows) else dest
                if dest.dtype != dtype or dest.shape != shape or not base.flags.c_contiguous:
                    raise CheckpointError(
                        f"{where}: array {entry['name']!r} is {dtype}{list(shape)}, the buffer "
                        f"expects {dest.dtype}{list(dest.shape)}"
                    )
                if not isinstance(dest, Rows):
                    _read_exact(f, dest.data.cast("B") if dest.nbytes else None, data_hash, bar)
                else:
                    for piece in dest.pieces():
                        _read_rows(f, dest.array, piece, data_hash, bar)
                pos = entry["offset"] + entry["nbytes"]
            _skip(f, self.data_size - pos, data_hash, bar)
            if data_hash.digest() != f.read(32):
                raise CheckpointError(f"{where}: data checksum mismatch (corrupted file)")


def _project(rebuilt: Any, stored: Any) -> Any:
    """``rebuilt`` restricted to the dict keys ``stored`` has (recursively)."""
    if isinstance(stored, dict) and isinstance(rebuilt, Mapping):
        return {k: _project(rebuilt.get(k), v) for k, v in stored.items()}
    return rebuilt


def _canonical(value: Any) -> str:
    """``value`` as sorted JSON (tuples as lists), to compare two values as JSON."""
    return json.dumps(value, sort_keys=True, default=repr)


def _as_count(value: Any) -> int | None:
    """``value`` if it is a JSON integer ``>= 0`` (not a bool), else ``None``."""
    if type(value) is int and value >= 0:
        return value
    return None


# Constructor arguments that are never data: only the caller of load may give them.
_NEVER_FROM_FILE = frozenset({"storage", "path", "transforms"})

# Array dtypes a checkpoint may hold: plain numbers and booleans (never objects, structured or
# subarray dtypes, which could make reading write pointers or allocate more than stated).
_PLAIN_KINDS = frozenset("biufc")
_MAX_NDIM = 32


def _check_entry(where: str, i: int, entry: Any, data_size: int) -> dict[str, Any]:
    """One array entry of the header, checked against itself and the data region.

    Returns the entry with ``shape`` as a tuple; raises :class:`CheckpointError` on anything
    another writer than :func:`write_checkpoint` could have put there.
    """
    if not isinstance(entry, dict) or set(entry) != {"name", "dtype", "shape", "offset", "nbytes"}:
        raise CheckpointError(
            f"{where}: array entry {i} must hold name, dtype, shape, offset, nbytes"
        )
    name, dtype_str, shape = entry["name"], entry["dtype"], entry["shape"]
    offset, nbytes = _as_count(entry["offset"]), _as_count(entry["nbytes"])
    if not isinstance(name, str) or not isinstance(dtype_str, str) or len(dtype_str) > 8:
        raise CheckpointError(f"{where}: array entry {i} has a bad name or dtype")
    try:
        dtype = np.dtype(dtype_str)
    except (TypeError, ValueError, SyntaxError):
        raise CheckpointError(
            f"{where}: array {name!r} has an unknown dtype {dtype_str!r}"
        ) from None
    if dtype.kind not in _PLAIN_KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise CheckpointError(f"{where}: array {name!r} has dtype {dtype_str!r}; only numbers")
    if (
        not isinstance(shape, list)
        or len(shape) > _MAX_NDIM
        or any(_as_count(n) is None for n in shape)
    ):
        raise CheckpointError(f"{where}: array {name!r} has a bad shape {shape!r}")
    count = 1
    for n in shape:
        count *= n  # Python ints: no overflow
    if offset is None or nbytes is None or offset % _ALIGN:
        raise CheckpointError(f"{where}: array {name!r} has a bad offset or size")
    if count * dtype.itemsize != nbytes or offset + nbytes > data_size:
        raise CheckpointError(
            f"{where}: array {name!r} ({dtype_str}{shape}) does not fit its {nbytes} bytes at "
            f"offset {offset} of a {data_size}-byte data region"
        )
    return {"name": name, "dtype": dtype_str, "shape": tuple(shape), "offset": offset,
            "nbytes": nbytes}  # fmt: skip


def _skip(f: io.BufferedReader, n: int, h: Any, bar: Any) -> None:
    """Hash the next ``n`` bytes (padding) without holding more than a chunk of them."""
    while n > 0:
        chunk = f.read(min(n, _CHUNK))
        if not chunk:
            raise CheckpointError("checkpoint: truncated inside the array data")
        h.update(chunk)
        bar.update(len(chunk))
        n -= len(chunk)


def _read_rows(
    f: io.BufferedReader, array: Array, piece: tuple[int, int] | Array, h: Any, bar: Any
) -> None:
    """Read one of :meth:`Rows.pieces` into ``array``: a run in place, gathered rows through a
    chunk-sized array scattered into their rows."""
    if isinstance(piece, tuple):
        block = array[piece[0] : piece[1]]
        _read_exact(f, block.data.cast("B") if block.nbytes else None, h, bar)
        return
    items = _row_items(array)
    rows = np.empty(piece.shape[0], items.dtype)
    _read_exact(f, rows.data.cast("B") if rows.nbytes else None, h, bar)
    items[piece] = rows


def _read_exact(f: io.BufferedReader, view: memoryview | None, h: Any, bar: Any) -> None:
    if view is None:
        return
    for start in range(0, len(view), _CHUNK):
        chunk = view[start : start + _CHUNK]
        got = f.readinto(chunk)
        if got != len(chunk):
            raise CheckpointError("checkpoint: truncated inside the array data")
        h.update(chunk)
        bar.update(got)
