"""Dopamine's checkpoint layout for the ReAgent buffer (private to the ReAgent front-end).

A checkpoint of iteration ``N`` is one gzipped ``.npy`` file per attribute,
``<name>_ckpt.N.gz``: ``$store$_<element>`` per storage element (one row per slot),
``add_count``, ``invalid_range``, ``_is_valid`` and ``_is_padding`` (and the prioritized
buffer's ``sum_tree``, pickled as ReAgent pickles it: :mod:`._pickled`). Every other file is a
plain array, written and read without pickle. Loading replays the rows into a fresh core in
ring order (:func:`replay_rows`). Public attributes a user attached to the buffer are saved and
restored as ReAgent does (:func:`attribute_files`, :func:`read_attributes`).
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import pickle
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from rlreplay import CheckpointError
from rlreplay.compat.reagent import _elements
from rlreplay.compat.reagent._errors import NotFoundError
from rlreplay.compat.reagent._pickled import RestrictedUnpickler
from rlreplay.compat.reagent._ranges import store
from rlreplay.compat.reagent._slots import write_padding, write_step
from rlreplay.compat.reagent._state import BufferState, shape_type

__all__ = [
    "CHECKPOINT_DURATION",
    "PADDING_FILE",
    "STORE_FILENAME_PREFIX",
    "attribute_files",
    "check_rows",
    "complex_elements",
    "filename",
    "initialize_from_files",
    "leading_padding",
    "load_files",
    "read_array",
    "padding_slots",
    "read_attributes",
    "stored_elements",
    "replay_rows",
    "store_arrays",
    "write_arrays",
]

Array = np.ndarray[Any, Any]

#: Prefix of the checkpoint files of stored arrays (cannot collide with attribute names).
STORE_FILENAME_PREFIX = "$store$_"
#: A checkpoint file is deleted when one this many iterations newer is written.
CHECKPOINT_DURATION = 4
#: The front-end's file of padding slots (ReAgent writes none: see :func:`leading_padding`).
PADDING_FILE = "_is_padding"


def filename(checkpoint_dir: str | os.PathLike[str], name: str, suffix: Any) -> str:
    """The path of attribute ``name``'s file for iteration ``suffix``."""
    return os.path.join(os.fspath(checkpoint_dir), f"{name}_ckpt.{suffix}.gz")


def write_arrays(
    checkpoint_dir: str | os.PathLike[str], iteration_number: int, arrays: dict[str, Array | bytes]
) -> None:
    """Write each array to its gzipped file (via a temporary name); drop stale iterations.

    An array is written as ``.npy`` without pickle; ``bytes`` are written as they are (the
    prioritized buffer's ``sum_tree``, pickled as ReAgent pickles it). ``checkpoint_dir``
    must exist.
    """
    for name, arr in arrays.items():
        path = filename(checkpoint_dir, name, iteration_number)
        tmp = path + ".tmp"
        with open(tmp, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb") as out:
            if isinstance(arr, bytes):
                out.write(arr)
            else:
                np.save(out, arr, allow_pickle=False)
        os.replace(tmp, path)
        stale = iteration_number - CHECKPOINT_DURATION
        if stale >= 0:
            with contextlib.suppress(FileNotFoundError):
                os.remove(filename(checkpoint_dir, name, stale))


def read_array(path: str) -> Array:
    """One gzipped ``.npy`` array; pickled content is refused, never unpickled."""
    try:
        with open(path, "rb") as f, gzip.GzipFile(fileobj=f, mode="rb") as infile:
            out: Array = np.load(infile, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise CheckpointError(
            f"{path}: expected a gzipped NumPy array written without pickle; {exc}"
        ) from None
    return out


def stored_elements(
    checkpoint_dir: str | os.PathLike[str], suffix: Any
) -> list[tuple[str, tuple[int, ...], np.dtype[Any]]]:
    """``(name, shape, dtype)`` of each ``$store$_<name>`` file of iteration ``suffix``.

    The base four first, then the others by name. Only each file's ``.npy`` header is read.
    For a buffer that infers its elements and is loaded before its first add.
    """
    head, tail = STORE_FILENAME_PREFIX, f"_ckpt.{suffix}.gz"
    names = [
        f[len(head) : -len(tail)]
        for f in os.listdir(checkpoint_dir)
        if f.startswith(head) and f.endswith(tail)
    ]
    base = ["observation", "action", "reward", "terminal"]
    out = []
    for name in base + sorted(n for n in names if n not in base):
        path = filename(checkpoint_dir, STORE_FILENAME_PREFIX + name, suffix)
        if name not in names:
            raise FileNotFoundError(f"Missing file: {path}")
        try:
            with open(path, "rb") as f, gzip.GzipFile(fileobj=f, mode="rb") as infile:
                version = np.lib.format.read_magic(infile)
                read = (
                    np.lib.format.read_array_header_1_0
                    if version == (1, 0)
                    else np.lib.format.read_array_header_2_0
                )
                shape, _, dtype = read(infile)
        except (ValueError, OSError, EOFError) as exc:
            raise CheckpointError(f"{path}: expected a gzipped NumPy array; {exc}") from None
        if dtype.hasobject or len(shape) < 1:
            raise CheckpointError(f"{path}: expected one row per slot, got {dtype}{shape}")
        out.append((name, tuple(shape[1:]), np.dtype(dtype)))
    return out


def initialize_from_files(
    buf: BufferState, checkpoint_dir: str | os.PathLike[str], suffix: Any
) -> None:
    """Fix an inferring buffer's elements from a checkpoint's ``$store$`` files."""
    if not os.path.isdir(checkpoint_dir):
        raise NotFoundError(f"Missing checkpoint directory: {checkpoint_dir}")
    try:
        found = stored_elements(checkpoint_dir, suffix)
    except FileNotFoundError as exc:
        raise NotFoundError(str(exc)) from None
    elements, inferred = _elements.from_files(buf, found)
    _elements.setup(buf, elements, inferred, final=True)


def load_files(
    buf: BufferState, checkpoint_dir: str | os.PathLike[str], suffix: Any
) -> Array | None:
    """Read, check and replay the files into ``buf``; the validity mask (``None`` if absent)."""
    names = buf._required_files()
    paths = {n: filename(checkpoint_dir, n, suffix) for n in names}
    missing = [p for p in paths.values() if not os.path.exists(p)]
    if missing:
        raise NotFoundError(f"Missing file(s): {missing}")
    data: dict[str, Array] = {}
    for name, path in paths.items():
        data.update(buf._read_file(name, path))
    valid_path = filename(checkpoint_dir, "_is_valid", suffix)
    valid = read_array(valid_path) if os.path.exists(valid_path) else None
    padding_path = filename(checkpoint_dir, PADDING_FILE, suffix)
    if os.path.exists(padding_path):
        data[PADDING_FILE] = _check_mask(PADDING_FILE, read_array(padding_path), buf)
    rows, add_count = buf._check_loaded(data, valid)
    buf._reset()
    buf._complex_store = complex_elements(buf.get_storage_signature(), data)
    buf._replay_rows(rows, add_count, data)
    return valid


def store_arrays(buf: BufferState) -> dict[str, Array | bytes]:
    """Attribute name -> array, in Dopamine's layout (store arrays per slot, scalars)."""
    arrays: dict[str, Array | bytes] = {}
    for name, rows in store(buf).items():
        arrays[STORE_FILENAME_PREFIX + name] = rows
    arrays["add_count"] = np.array(buf._add_count, np.int64)
    arrays["invalid_range"] = buf.invalid_range
    arrays["_is_valid"] = buf._is_valid.copy()
    arrays[PADDING_FILE] = padding_slots(buf)
    return arrays


def padding_slots(buf: BufferState) -> Array:
    """The slots holding a padding row: written (``add_count`` reached them), holding no step."""
    cap = buf._replay_capacity
    written = np.arange(cap) < buf._add_count
    out: Array = written & (buf._slot_id < 0)
    return out


def _check_mask(name: str, mask: Array, buf: BufferState) -> Array:
    cap = buf._replay_capacity
    if mask.shape != (cap,) or mask.dtype != np.bool_:
        raise CheckpointError(f"{name}: expected ({cap},) bool, got {mask.dtype}{mask.shape}")
    return mask


def check_rows(
    signature: Sequence[shape_type], cap: int, data: dict[str, Array], valid: Array | None
) -> tuple[dict[str, Array], int]:
    """Per-element rows (cast to the element dtypes) and ``add_count`` of loaded files.

    An array with more than ``cap`` rows of the element's shape loads its first ``cap`` rows:
    0.1 loads it as it is and then reads and writes only rows ``index % replay_capacity``, so
    the others are never used. Any other shape is refused (deliberate difference 12: 0.1
    loads it and every later ``add`` raises, or stores and samples another shape).

    Raises:
        rlreplay.CheckpointError: An array of the wrong shape or dtype.
    """
    rows = {}
    for e in signature:
        arr = data[STORE_FILENAME_PREFIX + e.name]
        if arr.ndim == 1 + len(e.shape) and arr.shape[1:] == tuple(e.shape) and len(arr) > cap:
            arr = arr[:cap]  # the rows 0.1 ever reads or writes
        if arr.shape != (cap, *e.shape):
            raise CheckpointError(
                f"{e.name}: expected shape {(cap, *e.shape)} (or more rows), "
                f"the checkpoint has {arr.shape}"
            )
        kind = np.dtype(e.type).kind
        if arr.dtype.kind not in "biufc" or kind not in "biuf":
            raise CheckpointError(f"{e.name}: cannot read dtype {arr.dtype} as {e.type}")
        if e.name == "terminal" or kind == "b":
            rows[e.name] = _flags(arr, np.dtype(e.type))
        else:
            # 0.1 loads the array as it is and casts on sampling (astype): the same values. A
            # complex array's astype keeps the real part (its ComplexWarning is raised at each
            # sample, as 0.1 raises it there: complex_elements).
            rows[e.name] = (arr.real if arr.dtype.kind == "c" else arr).astype(e.type, copy=False)
    count = data["add_count"]
    if count.shape != () or count.dtype.kind not in "iu" or int(count) < 0:
        raise CheckpointError(f"add_count: expected an int >= 0, got {count!r}")
    if valid is not None and (valid.shape != (cap,) or valid.dtype != np.bool_):
        raise CheckpointError(f"_is_valid: expected ({cap},) bool, got {valid.dtype}{valid.shape}")
    return rows, int(count)


def _flags(arr: Array, dtype: np.dtype[Any]) -> Array:
    """Terminal (or bool) rows of a loaded array: non-zero stays non-zero.

    0.1 reads these rows with ``astype(np.bool)`` (any non-zero value, imaginary parts too,
    ends the window; no warning), so a value the plain cast would turn to 0 (``0.25``,
    ``0.5j``, NaN) becomes 1; every other value is cast as NumPy's ``astype`` casts it.
    """
    nonzero = arr != 0
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
        out: Array = arr.astype(dtype)
    out[nonzero & (out == 0)] = 1
    return out


def complex_elements(signature: Sequence[shape_type], data: dict[str, Array]) -> frozenset[str]:
    """Elements whose loaded array is complex and is cast to a number type on sampling.

    0.1 keeps such an array in ``_store`` as it is (every later ``add`` writes into it), and
    every sample casts it with ``astype(element.type)``: a ``ComplexWarning`` per returned
    element read from it. Terminal and bool elements are read with ``astype(np.bool)``,
    which does not warn.
    """
    return frozenset(
        e.name
        for e in signature
        if data[STORE_FILENAME_PREFIX + e.name].dtype.kind == "c"
        and e.name != "terminal"
        and np.dtype(e.type).kind != "b"
    )


def replay_rows(
    buf: BufferState, rows: dict[str, Array], add_count: int, data: dict[str, Array]
) -> None:
    """Rebuild the core and the slot bookkeeping from per-slot rows, oldest first.

    Which rows are padding: the ``stack_size - 1`` rows after each terminal (before a later
    row) and at the very start, as ``add`` writes them; in a wrapped ring also the first rows
    of the oldest, cut episode (:func:`leading_padding`).

    Raises:
        rlreplay.CheckpointError: The checkpoint's ``_is_padding`` mask is not one that
            ``add`` can write for these rows.
    """
    cap, k = buf._replay_capacity, buf._stack_size
    if add_count <= cap:
        order = np.arange(add_count)
        pad = k - 1  # the first add of all wrote padding rows
    else:
        order = (np.arange(cap) + add_count) % cap  # wrapped: the oldest row is at the cursor
        pad = leading_padding(buf, rows, data, order)
    buf._add_count = add_count - order.size
    signature = buf.get_add_args_signature()
    for slot in order.tolist():
        if pad > 0:
            write_padding(buf)
            pad -= 1
            continue
        values = [buf._loaded_value(rows, data, e.name, slot) for e in signature]
        write_step(buf, buf._convert_step(values), values)
        if values[3]:
            pad = k - 1
    saved = data.get(PADDING_FILE)
    if saved is not None and not np.array_equal(saved, padding_slots(buf)):
        raise CheckpointError(
            f"{PADDING_FILE}: expected the padding slots add writes for these rows, "
            f"{np.flatnonzero(padding_slots(buf)).tolist()}; the checkpoint has "
            f"{np.flatnonzero(saved).tolist()}"
        )


def leading_padding(
    buf: BufferState, rows: dict[str, Array], data: dict[str, Array], order: Array
) -> int:
    """How many of a wrapped ring's oldest rows are padding rows.

    The rows before the ring's first terminal are one episode cut by the wrap: the last
    ``j <= stack_size - 1`` of its padding rows, then its steps. Every row after them is
    told apart by the terminals; these ``j`` are not: a padding row is all zeros, and so may
    be a step. The front-end's checkpoints name them (the ``_is_padding`` file). For a
    checkpoint without it (ReAgent's), the oldest rows whose every added value is zero
    (priority included), at most ``stack_size - 1`` of them, are taken as padding: exact
    unless a step whose values are all zero comes first after the cut.
    """
    k = buf._stack_size
    saved = data.get(PADDING_FILE)
    j = 0
    if saved is not None:
        while j < order.size and saved[order[j]]:
            j += 1
        if j > max(k - 1, 0):  # stack_size 0 writes no padding rows either
            raise CheckpointError(
                f"{PADDING_FILE}: expected at most stack_size - 1 = {k - 1} padding rows "
                f"before the oldest step, the checkpoint has {j}"
            )
        return j
    signature = buf.get_add_args_signature()
    while j < min(k - 1, order.size):
        slot = int(order[j])
        values = (buf._loaded_value(rows, data, e.name, slot) for e in signature)
        if any(np.any(np.asarray(v) != 0) for v in values):
            break
        j += 1
    return j


def attribute_files(buf: BufferState) -> dict[str, Array | bytes]:
    """The public attributes a user attached to ``buf``, as ReAgent checkpoints them.

    ReAgent's ``_return_checkpointable_elements`` saves every member of ``__dict__`` whose
    name does not start with ``_``: an array with ``np.save(allow_pickle=False)`` (an object
    array then raises ``ValueError``, as there), anything else with ``pickle.dump``. The
    front-end keeps no public attribute of its own, so these are the user's.
    """
    out: dict[str, Array | bytes] = {}
    for name, value in vars(buf).items():
        if not name.startswith("_"):
            out[name] = value if isinstance(value, np.ndarray) else pickle.dumps(value)
    return out


def read_attributes(
    buf: BufferState, checkpoint_dir: str | os.PathLike[str], suffix: Any
) -> dict[str, Any]:
    """The saved values of ``buf``'s public attributes (ReAgent's load of them).

    As ReAgent, every public attribute the buffer has *now* must have its file, read as an
    array if the attribute is one and unpickled otherwise. Unpickling is restricted (no
    arbitrary code on load): builtin values and containers and NumPy arrays and scalars load,
    any other class is refused.

    Raises:
        NotFoundError: An attribute's file is missing (checked before anything is read).
        rlreplay.CheckpointError: A file that is not what the attribute needs, or a pickle
            naming another global.
    """
    current = {n: v for n, v in vars(buf).items() if not n.startswith("_")}
    paths = {n: filename(checkpoint_dir, n, suffix) for n in current}
    missing = [p for p in paths.values() if not os.path.exists(p)]
    if missing:
        raise NotFoundError(f"Missing file(s): {missing}")
    values: dict[str, Any] = {}
    for name, path in paths.items():
        if isinstance(current[name], np.ndarray):
            values[name] = read_array(path)
            continue
        with open(path, "rb") as f, gzip.GzipFile(fileobj=f, mode="rb") as infile:
            data = infile.read()
        try:
            values[name] = RestrictedUnpickler(io.BytesIO(data)).load()
        except CheckpointError as exc:
            raise CheckpointError(f"{path}: attribute {name!r}: {exc}") from None
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as exc:
            raise CheckpointError(
                f"{path}: attribute {name!r}: expected a pickled value, got {exc!r}"
            ) from None
    return values
