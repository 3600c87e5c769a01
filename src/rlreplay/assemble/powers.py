"""Powers of ``gamma`` for the n-step windows of the assembler's and the samplers' kernels.

The float32 and float64 rows are computed once per ``(gamma, n, reward dtype)`` so that every
path (NumPy, the window kernel, the one-call kernels) multiplies rewards by exactly the same
numbers, and so gives bit-identical sums.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

__all__ = ["reward_powers"]

Array = np.ndarray[Any, Any]


@numba.njit(cache=True)
def _fill_powers(gamma: float, powers: Array) -> None:  # pragma: no cover - compiled
    for j in range(powers.shape[1]):
        powers[0, j] = np.float32(gamma**j)
        powers[1, j] = np.float32(gamma**j)


def reward_powers(gamma: float, n: int, reward_dtype: np.dtype[Any]) -> Array:
    """``(2, n + 1)`` powers of ``gamma`` for the kernels' n-step windows.

    Row 0 multiplies the rewards, row 1 is the discount (``float32(gamma ** m)``, float32
    values whatever the reward). For a float32 reward both rows are ``float32(gamma ** j)``
    (:func:`_fill_powers`); for a float64 reward row 0 is Python's ``gamma ** j`` in float64,
    so the sums are the NumPy path's (``(gamma ** j) * rew`` added in float64).
    """
    p32 = np.zeros((2, n + 1), np.float32)
    _fill_powers(float(gamma), p32)
    if reward_dtype == np.float32:
        return p32
    p64 = p32.astype(np.float64)
    p64[0] = [gamma**j for j in range(n + 1)]
    return p64
