"""``Generator.choice(n, size, replace=False)`` for less: the same numbers from a Numba kernel.

nnabla-rl draws its uniform sample with ``drng.choice(max_index, size=num_samples,
replace=False)``. For the sizes of a training loop (32 of a few thousand) NumPy spends most of
that call around the draw itself (arguments, the hash set it allocates). Its algorithm
(``Generator.choice`` without ``p``, ``shuffle=True``), when ``n <= 10000`` or
``size <= n // 50``:

1. Floyd's sampling: for ``j`` in ``n - size .. n - 1``, ``v = bounded(j)`` (uniform on
   ``[0, j]``); result ``k`` is ``v``, or ``j`` if ``v`` was chosen before (``j`` never was:
   every earlier candidate is at most ``j - 1``). One draw per ``j`` either way.
2. A Fisher-Yates shuffle of the results: for ``i`` in ``size - 1 .. 1``, swap positions ``i``
   and ``bounded(i)``.

``bounded(r)`` is NumPy's ``random_bounded_uint64(state, 0, r, 0, False)``: ``0`` without a draw
for ``r == 0``; for ``0 < r < 2**32 - 1``, Lemire's multiply-and-reject on 32-bit outputs of
the bit generator's ``next_uint32`` (which buffers the second half of each 64-bit output).
:func:`choice_without_replacement` makes these calls of the bit generator's own
``next_uint32`` (its C function, reached through ``ctypes``), so both the numbers and the
generator's state afterwards are NumPy's, bit for bit (checked against ``Generator.choice``
over many seeds and sizes: ``tests/compat/test_nnabla_rl_choice.py``). Any other case (a bit
generator other than ``PCG64``, ``n >= 2**31``, NumPy's other branch, ``size <= 0``) calls
``Generator.choice`` itself.

The kernel calls a C function whose address it holds, so Numba compiles it in each process
(it cannot be cached on disk), then checks it against ``Generator.choice`` on a few draws (a
NumPy that draws otherwise keeps its own call). It compiles in a daemon thread once
:data:`GENERAL_FIRST` draws have been made (``RLREPLAY_BACKGROUND_COMPILE=0`` in the
environment: in the first draw, in the caller's thread), ``Generator.choice`` drawing until
it is ready. Both give the same numbers.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import numba
import numpy as np

__all__ = ["GENERAL_FIRST", "choice_without_replacement", "kernel_ready"]

Array = np.ndarray[Any, Any]

#: Draws made by ``Generator.choice`` before the kernel is compiled in the background (a
#: short script never pays for the compilation).
GENERAL_FIRST = 64
#: NumPy's branch: Floyd's algorithm unless ``n > _TAIL_N and size > n // _CUTOFF``.
_TAIL_N, _CUTOFF = 10000, 50
#: Largest ``n`` the kernel takes: every bound below 2**32 - 1 (NumPy's 32-bit path).
_MAX_N = 2**31 - 1

# The C function PCG64 draws 32 bits with (the same one for every PCG64 instance).
_next_uint32 = np.random.PCG64(0).ctypes.next_uint32
_U32 = np.uint64(0xFFFFFFFF)


@numba.njit(inline="always")
def _bounded(state: int, r: np.uint64) -> np.int64:  # pragma: no cover - compiled
    """NumPy's ``buffered_bounded_lemire_uint32(state, r)``: uniform on ``[0, r]``, ``0 < r``.

    ``m = u * (r + 1)`` for a 32-bit draw ``u``: its high word is the result, accepted unless
    its low word falls below ``2**32 mod (r + 1)`` (then biased; drawn again).
    """
    excl = r + np.uint64(1)
    m = np.uint64(_next_uint32(state)) * excl
    low = m & _U32
    if low < excl:
        threshold = (_U32 - r) % excl
        while low < threshold:
            m = np.uint64(_next_uint32(state)) * excl
            low = m & _U32
    return np.int64(m >> np.uint64(32))


@numba.njit
def _floyd(state: int, n: int, size: int) -> Array:  # pragma: no cover - compiled
    """``size`` distinct values of ``[0, n)``: NumPy's Floyd's sampling, then its shuffle."""
    out = np.empty(size, np.int64)
    for k in range(size):
        j = n - size + k
        v = np.int64(0) if j == 0 else _bounded(state, np.uint64(j))
        for i in range(k):  # chosen before: take j (size is small: a scan beats a hash set)
            if out[i] == v:
                v = np.int64(j)
                break
        out[k] = v
    for i in range(size - 1, 0, -1):
        swap = _bounded(state, np.uint64(i))
        out[i], out[swap] = out[swap], out[i]
    return out


_kernel: Callable[[int, int, int], Array] | None = None
_last: tuple[Any, int] = (None, 0)  # the last PCG64 drawn from and its state's address
_draws = 0  # draws made by Generator.choice before the kernel was ready
_started = threading.Lock()  # held for ever by the first thread that starts the compilation


def _compile() -> None:
    global _kernel
    dispatcher: Any = _floyd
    try:
        # the types of its calls (an address below 2**63, Python ints); nothing else compiles
        dispatcher.compile((numba.int64, numba.int64, numba.int64))
        dispatcher.disable_compile()
        if not _agrees(dispatcher):  # pragma: no cover - a NumPy that draws otherwise
            return
    except Exception:  # pragma: no cover - Generator.choice goes on drawing
        return
    _kernel = dispatcher


def _agrees(kernel: Any) -> bool:
    """Whether the kernel draws what this NumPy's ``Generator.choice`` draws (both branches'
    edges, a buffered half word), so that a NumPy whose algorithm differs keeps its own."""
    for seed, n, size in ((0, 1, 1), (1, 33, 32), (2, 4000, 32), (3, 10000, 500), (4, 10001, 200)):
        mine, numpy = np.random.default_rng(seed), np.random.default_rng(seed)
        mine.integers(2**16, dtype=np.uint32)
        numpy.integers(2**16, dtype=np.uint32)
        got = kernel(mine.bit_generator.ctypes.state_address, n, size)
        if not np.array_equal(got, numpy.choice(n, size=size, replace=False)):
            return False
        if mine.bit_generator.state != numpy.bit_generator.state:
            return False
    return True


def kernel_ready() -> bool:
    """Whether draws go through the kernel (compiled in this process)."""
    return _kernel is not None


def _start() -> None:
    """Compile the kernel: now (``RLREPLAY_BACKGROUND_COMPILE=0``) or in a daemon thread."""
    global _draws
    _draws += 1
    background = os.environ.get("RLREPLAY_BACKGROUND_COMPILE", "1") != "0"
    if background and _draws < GENERAL_FIRST:
        return
    if not _started.acquire(blocking=False):
        return  # compiling (or compiled) already
    if background:
        threading.Thread(target=_compile, name="rlreplay-nnabla-rl-choice", daemon=True).start()
    else:
        _compile()


def choice_without_replacement(rng: np.random.Generator, n: int, size: int) -> Array:
    """``rng.choice(n, size=size, replace=False)``: the same int64 array, the same generator
    state afterwards (see the module docstring for when the kernel draws).

    Args:
        rng: The generator (its bit generator's lock is held while the kernel draws, as
            NumPy holds it).
        n: Population ``[0, n)``.
        size: How many distinct values.

    Example:
        >>> import numpy as np
        >>> a, b = np.random.default_rng(7), np.random.default_rng(7)
        >>> bool((choice_without_replacement(a, 100, 5) == b.choice(100, 5, replace=False)).all())
        True
    """
    kernel = _kernel
    if kernel is None:
        _start()
        kernel = _kernel
    bits = rng.bit_generator
    if (
        kernel is None
        or type(bits) is not np.random.PCG64
        or type(n) is not int
        or type(size) is not int
        or not 0 < size <= n <= _MAX_N
        or (n > _TAIL_N and size > n // _CUTOFF)
    ):
        out: Array = rng.choice(n, size=size, replace=False)
        return out
    global _last
    last_bits, address = _last
    if bits is not last_bits:
        address = bits.ctypes.state_address
        _last = (bits, address)
    with bits.lock:
        return kernel(address, n, size)
