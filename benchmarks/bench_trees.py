"""Throughput of the segment trees at capacity 1,000,000 with batches of 256.

Run with ``python benchmarks/bench_trees.py`` (add ``PYTHONPATH=src`` if rlreplay is not
installed). Prints calls per second and items per second of each operation, after a warm-up
that also triggers (or loads from cache) the Numba compilation.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from rlreplay.sampling import SumTree


def _rate(call: Callable[[], object], min_seconds: float) -> tuple[float, int]:
    """Returns ``(calls per second, calls timed)``, timing batches of calls for ``min_seconds``."""
    for _ in range(10):  # warm-up: compilation, caches
        call()
    calls, start = 0, time.perf_counter()
    elapsed = 0.0
    while elapsed < min_seconds:
        for _ in range(100):
            call()
        calls += 100
        elapsed = time.perf_counter() - start
    return calls / elapsed, calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacity", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=1.0, help="time per operation")
    args = parser.parse_args()
    capacity, batch = args.capacity, args.batch

    rng = np.random.default_rng(0)
    start = time.perf_counter()
    tree = SumTree(capacity)
    tree.set(np.arange(capacity), rng.random(capacity))
    print(f"SumTree(capacity={capacity:,}) filled in {time.perf_counter() - start:.3f} s")

    indices = [rng.integers(0, capacity, size=batch) for _ in range(64)]
    values = [rng.random(batch) for _ in range(64)]
    masses = [rng.random(batch) * tree.total for _ in range(64)]
    # Inputs rotate over 64 batches so that repeated calls do not find the same paths in cache.
    step = iter(range(1 << 62))

    def do_set() -> None:
        i = next(step) % 64
        tree.set(indices[i], values[i])

    def do_find() -> None:
        tree.find_prefix_sum(masses[next(step) % 64])

    def do_get() -> None:
        tree.get(indices[next(step) % 64])

    # ``set`` runs last: it changes the total, which the precomputed masses must not exceed.
    cases: list[tuple[str, Callable[[], object]]] = [
        (f"sample({batch}, stratified=True)", lambda: tree.sample(batch, rng)),
        (f"sample({batch}, stratified=False)", lambda: tree.sample(batch, rng, stratified=False)),
        (f"find_prefix_sum({batch} values)", do_find),
        (f"get({batch} indices)", do_get),
        (f"set({batch} random indices)", do_set),
    ]
    print(f"{'operation':<34} {'calls/s':>12} {'items/s':>14} {'us/call':>9}")
    for name, call in cases:
        per_second, _ = _rate(call, args.seconds)
        print(
            f"{name:<34} {per_second:>12,.0f} {per_second * batch:>14,.0f} {1e6 / per_second:>9.2f}"
        )


if __name__ == "__main__":
    main()
