"""Throughput of the segment trees at capacity 1,000,000 with batches of 256.

Run with ``python benchmarks/bench_trees.py`` (add ``PYTHONPATH=src`` if rlreplay is not
installed). Prints calls per second and items per second of each operation, after a warm-up
that also triggers (or loads from cache) the Numba compilation.

A second section times the prioritized sampler's priority layer (:class:`Priorities`: sum and
min trees over the slots) on the shapes of the prioritized benchmark: 16 envs filling 1,000,000
slots, ``draw(256)`` with weights, ``update`` of the 256 slots drawn, and one 16-env write.
``--skip-priorities`` leaves it out.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from rlreplay.sampling import SumTree
from rlreplay.sampling.priorities import Priorities


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
    parser.add_argument("--skip-priorities", action="store_true", help="trees only")
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
    if not args.skip_priorities:
        _bench_priorities(capacity, batch, args.seconds)


def _bench_priorities(capacity: int, batch: int, seconds: float) -> None:
    """Times ``Priorities.draw``/``update``/``on_write`` as the prioritized buffer calls them."""
    envs, alpha, beta = 16, 0.6, 0.4
    env_capacity = capacity // envs
    prios = Priorities(envs, env_capacity, alpha=alpha, variant="proportional", sort_interval=None)
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    env_base = np.arange(envs, dtype=np.int64) * env_capacity
    empty = np.empty(0, np.int64)
    for t in range(env_capacity):  # fill: one write of 16 rows per step, all sampleable
        rows = env_base + t
        prios.on_write(empty, rows, 1.0, rows)
    print(
        f"\nPriorities({envs} envs x {env_capacity:,} slots) filled in "
        f"{time.perf_counter() - start:.3f} s"
    )
    lo = np.zeros(envs, np.int64)
    values = [np.abs(rng.normal(size=batch)) for _ in range(64)]
    stale = np.zeros(batch, bool)
    step = iter(range(1 << 62))
    position = iter(range(1 << 62))

    def do_draw() -> None:
        prios.draw(batch, rng, True, beta, lo)

    def do_draw_update() -> None:
        env, t, _, _ = prios.draw(batch, rng, True, beta, lo)
        prios.update(
            env * env_capacity + t % env_capacity, stale, values[next(step) % 64], None, 1e-6
        )

    def do_write() -> None:
        rows = env_base + next(position) % env_capacity  # overwrite: remove, write, add back
        prios.on_write(rows, rows, 1.0, rows)

    cases: list[tuple[str, Callable[[], object], int]] = [
        (f"draw({batch}) with weights", do_draw, batch),
        (f"draw({batch}) + update({batch})", do_draw_update, batch),
        (f"on_write({envs} envs)", do_write, envs),
    ]
    print(f"{'Priorities operation':<34} {'calls/s':>12} {'items/s':>14} {'us/call':>9}")
    for name, call, items in cases:
        per_second, _ = _rate(call, seconds)
        print(
            f"{name:<34} {per_second:>12,.0f} {per_second * items:>14,.0f} {1e6 / per_second:>9.2f}"
        )


if __name__ == "__main__":
    main()
