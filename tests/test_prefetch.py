"""Prefetch hints change nothing a kernel computes (and never fault)."""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from rlreplay.codegen.prefetch import prefetch_address, prefetch_row


@numba.njit
def _sum_rows_prefetched(a: Any, rows: Any, address: int) -> float:  # pragma: no cover
    for i in range(rows.shape[0]):
        prefetch_row(a, rows[i])
    prefetch_address(address)
    total = 0.0
    for i in range(rows.shape[0]):
        total += a[rows[i], 0]
    return total


def test_prefetching_rows_and_addresses_leaves_results_unchanged() -> None:
    a = np.arange(40.0).reshape(10, 4)
    rows = np.array([3, 0, 9, 3], np.int64)
    assert _sum_rows_prefetched(a, rows, a.ctypes.data) == a[rows, 0].sum()
    assert _sum_rows_prefetched(a, rows, 0) == a[rows, 0].sum()  # an unmapped address: a hint
