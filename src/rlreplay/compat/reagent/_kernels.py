"""Stacks with the stack axis last, copied C-contiguous fast (private to the ReAgent front-end).

ReAgent returns a state as ``(B, *observation_shape, stack_size)``: the frames of one pixel
side by side. The states and next states come so from the core
(``get_transitions(ids, stack_layout="last")``, C-contiguous); the other stacks the front-end
returns (``return_everything_as_stack``, read from the slots) are gathered as ``(B,
stack_size, *shape)``, one step after another, and the front-end returns C-contiguous
tensors, so each is a transposition of that gather. NumPy's strided copy moves one element at
a time (about 600 µs for 32 stacks of four 84x84 uint8 frames; 230 µs one frame at a time).

:func:`interleaved` does it with one machine word per pixel: the ``K`` frames' elements of a
pixel, ``itemsize`` bytes each, are exactly the ``K * itemsize`` bytes of the output at that
pixel, so where that is 2, 4 or 8 bytes the kernel builds the word with shifts
(``word = sum_f element_f << (8 * itemsize * f)``) and stores it once; on a little-endian
machine byte ``j`` of the word is byte ``j`` in memory, so frame ``f`` lands at offset ``f *
itemsize``, which is the stack-last layout. About 20 µs for the example above. The values are
the bytes of the input, moved: nothing is converted.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import numba
import numpy as np

__all__ = ["interleaved", "recycled_empty", "sequential_cdf"]

Array = np.ndarray[Any, Any]

#: unsigned integer dtype of each byte size a word or an element may have
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


# One kernel per stack length, the frames written out: the loop over pixels then compiles to
# vector instructions (a loop over the frames inside it does not, and runs 25x slower).
# src: (B, K, P) unsigned elements of `bits` bits; out: (B, P) unsigned words of K elements.
@numba.njit(cache=True, nogil=True)
def _pack2(src: Array, out: Array, bits: int) -> None:  # pragma: no cover - Numba
    s1 = np.uint64(bits)
    for b in range(src.shape[0]):
        for p in range(src.shape[2]):
            out[b, p] = np.uint64(src[b, 0, p]) | (np.uint64(src[b, 1, p]) << s1)


@numba.njit(cache=True, nogil=True)
def _pack4(src: Array, out: Array, bits: int) -> None:  # pragma: no cover - Numba
    s1, s2, s3 = np.uint64(bits), np.uint64(2 * bits), np.uint64(3 * bits)
    for b in range(src.shape[0]):
        for p in range(src.shape[2]):
            out[b, p] = (
                np.uint64(src[b, 0, p])
                | (np.uint64(src[b, 1, p]) << s1)
                | (np.uint64(src[b, 2, p]) << s2)
                | (np.uint64(src[b, 3, p]) << s3)
            )


@numba.njit(cache=True, nogil=True)
def _pack8(src: Array, out: Array, bits: int) -> None:  # pragma: no cover - Numba
    for b in range(src.shape[0]):
        for p in range(src.shape[2]):
            word = np.uint64(src[b, 0, p])
            word |= np.uint64(src[b, 1, p]) << np.uint64(8)
            word |= np.uint64(src[b, 2, p]) << np.uint64(16)
            word |= np.uint64(src[b, 3, p]) << np.uint64(24)
            word |= np.uint64(src[b, 4, p]) << np.uint64(32)
            word |= np.uint64(src[b, 5, p]) << np.uint64(40)
            word |= np.uint64(src[b, 6, p]) << np.uint64(48)
            word |= np.uint64(src[b, 7, p]) << np.uint64(56)
            out[b, p] = word


# Four one-byte frames (the Atari stack): the word is built in 32-bit arithmetic, which
# vectorises twice as wide as the 64-bit one above (about 16 µs against 23 µs for 32 stacks of
# four 84x84 uint8 frames; the same bytes).
@numba.njit(cache=True, nogil=True)
def _pack4_bytes(src: Array, out: Array) -> None:  # pragma: no cover - Numba
    s1, s2, s3 = np.uint32(8), np.uint32(16), np.uint32(24)
    for b in range(src.shape[0]):
        for p in range(src.shape[2]):
            out[b, p] = (
                np.uint32(src[b, 0, p])
                | (np.uint32(src[b, 1, p]) << s1)
                | (np.uint32(src[b, 2, p]) << s2)
                | (np.uint32(src[b, 3, p]) << s3)
            )


_PACK = {2: _pack2, 4: _pack4, 8: _pack8}  # by stack length (8: one-byte elements only)


def interleaved(stacked_last: Array, *, recycle: bool = False) -> Array | None:
    """``stacked_last`` (a stack-last view of a C-contiguous gather) as a C-contiguous copy.

    Args:
        stacked_last: ``(B, *shape, K)``, the view ``np.moveaxis(frames, 1, -1)`` of a
            C-contiguous ``(B, K, *shape)`` array ``frames``.
        recycle: Write into an array of :func:`recycled_empty` (for arrays handed to the
            caller only) instead of a new one.

    Returns:
        The same values, C-contiguous, or ``None`` where the word trick does not apply (the
        view is of another layout, ``K * itemsize`` is not 2, 4 or 8 bytes, a dtype that is not
        a plain number or bool, a big-endian machine): the caller copies another way.
    """
    arr = stacked_last
    if arr.ndim < 2 or arr.size == 0 or sys.byteorder != "little":
        return None
    k, item = arr.shape[-1], arr.dtype.itemsize
    if arr.dtype.kind not in "biuf" or k not in _PACK or k * item not in (2, 4, 8):
        return None
    frames = arr.transpose(0, arr.ndim - 1, *range(1, arr.ndim - 1))  # np.moveaxis(arr, -1, 1)
    if not frames.flags.c_contiguous or not arr.dtype.isnative:
        return None
    b = arr.shape[0]
    src = frames.view(_UINT[item]).reshape(b, k, -1)
    # owns its data, as a NumPy copy
    result: Array = (
        recycled_empty(arr.shape, arr.dtype) if recycle else np.empty(arr.shape, arr.dtype)
    )
    words = result.reshape(b, -1).view(_UINT[k * item])  # (B, P): one word per pixel
    if k == 4 and item == 1:
        _pack4_bytes(src, words)
    else:
        _PACK[k](src, words, 8 * item)
    return result


# ---------------------------------------------------------------- the uniform draw's cdf
@numba.njit(cache=True, nogil=True)
def sequential_cdf(k: int) -> Array:  # pragma: no cover - Numba
    """``c = np.cumsum(np.full(k, 1.0 / k)); c /= c[-1]``, bit for bit (``k >= 1``).

    The same float64 operations in the same order: ``1.0 / k``, the partial sums added one
    after another from the first (NumPy's ``add.accumulate``; without fast-math the compiler
    keeps that order), then each divided by the last. The loop's additions depend on each
    other, as NumPy's, but cost about a third of NumPy's accumulate per element.
    """
    x = 1.0 / np.float64(k)
    out = np.empty(k)
    s = 0.0
    for j in range(k):
        s += x
        out[j] = s
    last = out[k - 1]
    for j in range(k):
        out[j] = out[j] / last
    return out


# ---------------------------------------------------------------- recycled output arrays
def _dead_count() -> int:
    """What ``sys.getrefcount(pool[i])`` shows for an object only the list ``pool`` holds
    (measured: interpreters differ in whether the call's own reference counts)."""
    held = [object()]
    return sys.getrefcount(held[0])


_DEAD = _dead_count()
#: arrays kept per shape and dtype (a training loop holds one or two batches of two stacks)
_POOL_DEPTH = 6
_POOL_KEYS = 8  # shapes and dtypes kept at once (more: the pools start again)
#: most bytes the pools keep (arrays beyond are made and freed as np.empty's): six 0.9 MB
#: stacks for batches of 32 four-frame 84x84 stacks, none of a batch of 512 such stacks
_POOL_BYTES = 32 << 20
_POOLS: dict[tuple[tuple[int, ...], str], list[Array]] = {}
_pooled = [0]  # bytes the pools hold
_POOL_LOCK = threading.Lock()
#: reference counts tell "held by nobody else" only under the GIL
_RECYCLE = bool(getattr(sys, "_is_gil_enabled", lambda: True)())


def recycled_empty(shape: tuple[int, ...], dtype: np.dtype[Any]) -> Array:
    """``np.empty(shape, dtype)``, or an array of it made earlier that nothing else holds now.

    A batch of frame stacks is about a megabyte per stack. Made anew for each batch and
    freed with the caller's previous batch, such arrays go back to the operating system
    (the C allocator trims its heap, or maps and unmaps them) and every page of the next one
    is a fresh page fault: in a training loop of adds and samples that made a sample of
    four-frame 84x84 stacks 5 to 8 times slower. The pool keeps the last few arrays of each
    shape and hands one out again once its reference count shows that only the pool holds
    it: no tensor, view or array of the caller's reaches it any more (``torch.from_numpy``
    holds the array while any tensor over its memory lives), so no result the caller still
    holds is ever overwritten. Its contents are undefined, as ``np.empty``'s.
    """
    if not _RECYCLE:
        return np.empty(shape, dtype)
    key = (shape, dtype.str)
    with _POOL_LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            if len(_POOLS) >= _POOL_KEYS:
                _POOLS.clear()
                _pooled[0] = 0
            pool = _POOLS[key] = []
        for i in range(len(pool)):
            if sys.getrefcount(pool[i]) == _DEAD:
                out = pool.pop(i)
                pool.append(out)  # the newest last
                return out
        out = np.empty(shape, dtype)
        if len(pool) >= _POOL_DEPTH:
            _pooled[0] -= pool.pop(0).nbytes  # (its holder keeps it alive while it needs it)
        if _pooled[0] + out.nbytes <= _POOL_BYTES:
            pool.append(out)
            _pooled[0] += out.nbytes
        return out
