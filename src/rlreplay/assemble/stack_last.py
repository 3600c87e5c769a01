"""Frame stacks gathered with the stack axis last, straight from the frame column.

:func:`rlreplay.assemble.stack_frames` gathers stacks as ``(..., k, *frame)``: one frame after
another. Libraries whose observations are ``(*frame, k)`` (the frames of one pixel side by side,
as ReAgent's and Dopamine's states) then need a transposed copy, which NumPy makes one element at
a time. :func:`stack_frames_last` writes that layout directly, C-contiguous, reading each
stack's frames from the column rows themselves: no intermediate stack-first array.

Where the ``k`` elements of a pixel fill 2, 4 or 8 bytes (four uint8 frames: one ``uint32``) a
compiled kernel builds each pixel's word with shifts, ``word = sum_j frame_j[p] << (8 * itemsize
* j)``, and stores it once: on a little-endian machine byte ``b`` of the word is byte ``b`` in
memory, so frame ``j`` lands at offset ``j * itemsize`` of the pixel, the stack-last layout.
Other layouts go through a kernel that copies element by element. The values are the bytes of
the column, moved: nothing is converted.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numba
import numpy as np

__all__ = ["stack_frames_last"]

Array = np.ndarray[Any, Any]

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


# Each kernel: src (R, P) unsigned elements, rows (N, K) int64 rows of src (-1: a zero frame),
# zero (P,) zeros of src's dtype, out (N, P) unsigned words holding the K elements of a pixel,
# written in the stacks' order ``order`` (a permutation of range(N)). The frames are written
# out per stack length: the loop over pixels then compiles to vector instructions (a loop over
# the frames inside it does not).
@numba.njit(cache=True, nogil=True)
def _words2(
    src: Array, rows: Array, zero: Array, out: Array, order: Array, bits: int
) -> None:  # pragma: no cover - Numba
    s1 = np.uint64(bits)
    for n in order:
        a0 = src[rows[n, 0]] if rows[n, 0] >= 0 else zero
        a1 = src[rows[n, 1]] if rows[n, 1] >= 0 else zero
        for p in range(src.shape[1]):
            out[n, p] = np.uint64(a0[p]) | (np.uint64(a1[p]) << s1)


@numba.njit(cache=True, nogil=True)
def _words4(
    src: Array, rows: Array, zero: Array, out: Array, order: Array, bits: int
) -> None:  # pragma: no cover - Numba
    s1, s2, s3 = np.uint64(bits), np.uint64(2 * bits), np.uint64(3 * bits)
    for n in order:
        a0 = src[rows[n, 0]] if rows[n, 0] >= 0 else zero
        a1 = src[rows[n, 1]] if rows[n, 1] >= 0 else zero
        a2 = src[rows[n, 2]] if rows[n, 2] >= 0 else zero
        a3 = src[rows[n, 3]] if rows[n, 3] >= 0 else zero
        for p in range(src.shape[1]):
            out[n, p] = (
                np.uint64(a0[p])
                | (np.uint64(a1[p]) << s1)
                | (np.uint64(a2[p]) << s2)
                | (np.uint64(a3[p]) << s3)
            )


# Four one-byte frames (the Atari stack): 32-bit arithmetic, which vectorises twice as wide as
# the 64-bit one above (the same bytes).
@numba.njit(cache=True, nogil=True)
def _words4_bytes(
    src: Array, rows: Array, zero: Array, out: Array, order: Array
) -> None:  # pragma: no cover - Numba
    s1, s2, s3 = np.uint32(8), np.uint32(16), np.uint32(24)
    for n in order:
        a0 = src[rows[n, 0]] if rows[n, 0] >= 0 else zero
        a1 = src[rows[n, 1]] if rows[n, 1] >= 0 else zero
        a2 = src[rows[n, 2]] if rows[n, 2] >= 0 else zero
        a3 = src[rows[n, 3]] if rows[n, 3] >= 0 else zero
        for p in range(src.shape[1]):
            out[n, p] = (
                np.uint32(a0[p])
                | (np.uint32(a1[p]) << s1)
                | (np.uint32(a2[p]) << s2)
                | (np.uint32(a3[p]) << s3)
            )


@numba.njit(cache=True, nogil=True)
def _words8(
    src: Array, rows: Array, zero: Array, out: Array, order: Array, bits: int
) -> None:  # pragma: no cover - Numba
    for n in order:
        for p in range(src.shape[1]):
            word = np.uint64(0)
            for j in range(8):
                r = rows[n, j]
                if r >= 0:
                    word |= np.uint64(src[r, p]) << np.uint64(8 * j)
            out[n, p] = word


# Any other layout: out (N, P, K, Q) from src (R, P, Q), element by element.
@numba.njit(cache=True, nogil=True)
def _elements(src: Array, rows: Array, out: Array) -> None:  # pragma: no cover - Numba
    for n in range(rows.shape[0]):
        for j in range(rows.shape[1]):
            r = rows[n, j]
            for p in range(src.shape[1]):
                for q in range(src.shape[2]):
                    out[n, p, j, q] = src[r, p, q] if r >= 0 else 0


_WORDS = {2: _words2, 4: _words4, 8: _words8}  # by stack length (8: one-byte elements only)


def stack_frames_last(
    col: Array,
    base: Array,
    t: Array,
    ep_start: Array,
    k: int,
    C: int,
    zero_pad: bool,
) -> Array:
    """Frames ``t-k+1 .. t`` per sampled row with the stack axis last: shape
    ``t.shape + (*frame, k)``, a new C-contiguous array.

    The same values as ``np.moveaxis(stack_frames(col.__getitem__, base, t, ep_start, k, C,
    zero_pad), t.ndim, -1)`` (:func:`rlreplay.assemble.stack_frames`), written in that layout
    directly from the rows of ``col``.

    Args:
        col: The frame column, ``(rows, *frame)``: row ``base + tau % C`` holds frame ``tau``.
        base: First row of each sampled row's env (one per entry of ``t``'s last axis).
        t: Step of the newest frame of each stack; any shape whose last axis is the batch's
            (``(2, B)`` gathers the current and next stacks in one go).
        ep_start: First step of each sampled row's episode (frames before it are padding).
        k: Frames per stack (``>= 1``).
        C: Rows per env.
        zero_pad: Padding frames are zeros (else copies of the episode's first frame).

    Returns:
        The stacks, ``t.shape + col.shape[1:] + (k,)``.
    """
    pos = t[..., None] + np.arange(1 - k, 1)
    first = ep_start[:, None]
    rows = base[:, None] + np.maximum(pos, first) % C
    if zero_pad:
        rows[pos < first] = -1  # (rows are >= 0: -1 marks a zero frame)
    frame = col.shape[1:]
    out: Array = np.empty((*t.shape, *frame, k), col.dtype)
    n, size = rows.size // max(k, 1), math.prod(frame)
    if out.size == 0:
        return out
    src = np.asarray(col)  # a memmap's buffer, without the subclass
    rows = rows.reshape(n, k)
    item = src.dtype.itemsize
    if not src.flags.c_contiguous or src.dtype.hasobject or not src.dtype.isnative:
        return _by_numpy(src, rows, out)
    if sys.byteorder == "little" and item in _UINT and k in _WORDS and k * item in _UINT:
        flat = src.reshape(src.shape[0], size).view(_UINT[item])
        words = out.reshape(n, size * k).view(_UINT[k * item])
        zero = np.zeros(size, flat.dtype)
        # a row's current and next stacks one after the other: the frames they share (all
        # but m of them, for a window of m steps) are read while still in the cache
        order = np.arange(n).reshape(-1, t.shape[-1]).T.ravel()
        if k == 4 and item == 1:
            _words4_bytes(flat, rows, zero, words, order)
        else:
            _WORDS[k](flat, rows, zero, words, order, 8 * item)
        return out
    unit = next(u for u in (8, 4, 2, 1) if item % u == 0)
    elems = src.reshape(src.shape[0], size).view(np.uint8).reshape(src.shape[0], size, item)
    dest = out.reshape(n, size, k).view(np.uint8).reshape(n, size, k, item)
    _elements(elems.view(_UINT[unit]), rows, dest.view(_UINT[unit]))
    return out


def _by_numpy(src: Array, rows: Array, out: Array) -> Array:
    """The stacks by NumPy's fancy indexing (a column the kernels cannot read)."""
    n, k = rows.shape
    frames = src[np.maximum(rows, 0)]  # (n, k, *frame)
    frames[rows < 0] = 0
    out.reshape(n, *src.shape[1:], k)[...] = np.moveaxis(frames, 1, -1)
    return out
