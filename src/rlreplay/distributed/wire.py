"""A shard's sample reply: small ones as one ``bytes`` and a layout, cheap for Ray to move.

Ray pickles a returned :class:`~rlreplay.Batch` (a dozen arrays) through cloudpickle, about
0.2 ms a reply here whatever its size; a tuple of ``str``, ``int``, ``float`` and one
``bytes`` goes through its msgpack fast path instead. The driver reads the columns back as
read-only views of that ``bytes`` (no copy; the service's merge copies the rows it keeps).
Replies past :data:`PACK_LIMIT` bytes (Ray's inline size; e.g. image observations) stay a
dict of arrays: Ray moves those through its object store without copies, where one big
``bytes`` costs several copies (28 MB: 80-110 ms a call against 15-20 ms here).

A reply is ``(layout, payload, mass, smallest mass, error)``: ``layout`` names each column,
its dtype and its shape, the columns lying one after the other in ``payload`` (or ``payload``
is the dict of columns); ``error`` is the exception of priority updates that came with the
call (``None`` if none failed), so a failed update never fails the draw that carried it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from rlreplay import ShapeError

__all__ = ["PACK_LIMIT", "Layout", "Payload", "Reply", "pack_columns", "unpack_columns"]

Array = np.ndarray[Any, Any]
#: ``(name, dtype string, shape)`` per column, in payload order.
Layout = tuple[tuple[str, str, tuple[int, ...]], ...]
Payload = bytes | dict[str, Array]
#: ``(layout, payload, mass, smallest mass, error of the updates sent with the call)``.
Reply = tuple[Layout, Payload, float, float, BaseException | None]
#: Largest reply packed into one ``bytes`` (Ray returns up to 100 KiB inline).
PACK_LIMIT = 96 << 10


def pack_columns(columns: Mapping[str, Array], limit: int = PACK_LIMIT) -> tuple[Layout, Payload]:
    """``columns`` as a layout and one ``bytes`` (each column's C-order bytes in turn), or
    as the dict of arrays past ``limit`` bytes."""
    arrays = {name: np.ascontiguousarray(v) for name, v in columns.items()}
    layout = tuple((name, a.dtype.str, tuple(a.shape)) for name, a in arrays.items())
    if sum(a.nbytes for a in arrays.values()) > limit:
        return layout, arrays
    # One copy: bytes.join reads each array's buffer directly.
    payload = b"".join(a.reshape(-1).view(np.uint8).data for a in arrays.values())
    return layout, payload


def unpack_columns(layout: Any, payload: Payload) -> dict[str, Array]:
    """The columns of :func:`pack_columns`, as read-only views of ``payload``.

    ``layout`` may come back from Ray with lists for tuples (msgpack has only arrays).
    """
    if isinstance(payload, dict):
        return payload
    out: dict[str, Array] = {}
    offset = 0
    for name, dtype, shape in layout:
        dt = np.dtype(dtype)
        count = math.prod(shape)
        out[name] = np.frombuffer(payload, dt, count, offset).reshape(tuple(shape))
        offset += count * dt.itemsize
    if offset != len(payload):
        raise ShapeError(
            f"payload: expected {offset} bytes for the layout, got {len(payload)} bytes"
        )
    return out
