"""Cost of the nnabla-rl front-end's buffers against nnabla-rl's own, per append and per loop.

nnabla-rl users append one experience at a time, ``buffer.append((s, a, r, non_terminal,
s_next, info))``, so the front-end's ``append`` is timed exactly so, for the plain
``ReplayBuffer`` (``plain``), ``RankBasedPrioritizedReplayBuffer`` (``rank``) and
``ProportionalPrioritizedReplayBuffer`` (``proportional``) and two experiences:

* **vec4**: ``s``, ``s_next`` float32 ``(4,)``, ``a`` float64 ``(1,)``, a float reward, a float
  ``non_terminal`` (episodes of 200 steps), ``info = {}``;
* **atari84**: ``s``, ``s_next`` uint8 ``(84, 84)`` frames (64 distinct ones, chained), ``a``
  int64 ``(1,)``.

Rows: ``append`` µs (4,000 or 20,000 appends; the front-end's plain and prioritized buffers
write their staged appends to rlreplay's core only when something reads the core, which
nothing here does: what they cost is the check, the copy and the tuple handed back), filling
a fresh buffer (``fill``) and appending to a full one (``wrapped``);
``sample(32)`` + ``update_priorities`` µs on a buffer of 4,000 (``--quick``) or 20,000
experiences; and a training loop (``loop``: 4 appends, then ``sample(32)`` +
``update_priorities``, which the plain buffers of both libraries ignore; µs per iteration),
for vec4 experiences, and for atari84 ones with the plain buffer; for the latter also on a
full buffer (``loop ..., full buffer``: capacity 500, so every append replaces the oldest
experience, as in a run longer than the capacity). The other buffers hold 100,000
experiences at most, so ``fill`` and the sample rows never fill it: memory a copying store
writes there is touched for the first time (page faults), which nnabla-rl, keeping references
to the benchmark's 64 frames, never does. The ``ratio`` column is nnabla-rl's time over
rlreplay's (above 1: the front-end is faster). Times are CPU time of this process
(``time.process_time``, so other load on the machine counts less), the median of
``--repeats`` runs, the garbage collector off while timing.

``--nnabla-rl-source DIR`` also times nnabla-rl's own classes side by side, loaded from an
unpacked source tree (e.g. ``nnabla_rl-0.16.0/nnabla_rl``) with ``nnabla`` stubbed (its
replay buffers need only ``nnabla_rl.random`` and a logger). nnabla-rl is never a dependency:
without the option only rlreplay is measured. The tree comes from the released package:
``pip download nnabla-rl==0.16.0 --no-deps`` then ``python -m zipfile -e <wheel> DIR``, and
pass ``DIR/nnabla_rl``.

Run: ``python benchmarks/bench_compat_nnabla_rl.py [--quick] [--repeats 7] [--json out.json]
[--nnabla-rl-source /path/to/nnabla_rl]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import statistics
import sys
import time
import types
from collections.abc import Callable
from typing import Any

import numpy as np

# Kernels compile in the untimed warm-up, never in the background during a timed window.
os.environ.setdefault("RLREPLAY_BACKGROUND_COMPILE", "0")


CAPACITY = 100_000
VARIANTS = ("plain", "rank", "proportional")


def experiences(kind: str, n: int) -> list[tuple[Any, ...]]:
    """``n`` chained experiences of ``kind`` (the same list for every library)."""
    rng = np.random.default_rng(0)
    out: list[tuple[Any, ...]] = []
    if kind == "vec4":
        s = rng.standard_normal(4).astype(np.float32)
        for t in range(n):
            s_next = rng.standard_normal(4).astype(np.float32)
            non_terminal = float((t + 1) % 200 != 0)
            out.append((s, rng.standard_normal(1), float(t), non_terminal, s_next, {}))
            s = s_next
        return out
    frames = [rng.integers(0, 255, (84, 84), np.uint8) for _ in range(64)]
    for t in range(n):
        a = np.array([t % 4])
        out.append((frames[t % 64], a, 1.0, 1.0, frames[(t + 1) % 64], {}))
    return out


def load_nnabla_rl(source: str) -> dict[str, Callable[[int], Any]]:
    """nnabla-rl's two prioritized buffers from an unpacked source tree (nnabla stubbed)."""
    nnabla = types.ModuleType("nnabla")
    nnabla.Variable = object  # type: ignore[attr-defined]
    sys.modules["nnabla"] = nnabla
    package = types.ModuleType("nnabla_rl")
    package.__path__ = [source]
    sys.modules["nnabla_rl"] = package
    logger = types.ModuleType("nnabla_rl.logger")
    logger.logger = logging.getLogger("nnabla_rl")  # type: ignore[attr-defined]
    sys.modules["nnabla_rl.logger"] = logger
    import nnabla_rl.random  # type: ignore[import-not-found]

    package.random = nnabla_rl.random  # type: ignore[attr-defined]
    from nnabla_rl.replay_buffer import ReplayBuffer  # type: ignore[import-not-found]
    from nnabla_rl.replay_buffers import (  # type: ignore[import-not-found]
        ProportionalPrioritizedReplayBuffer,
        RankBasedPrioritizedReplayBuffer,
    )

    return {
        "plain": lambda cap: ReplayBuffer(cap),
        "rank": lambda cap: RankBasedPrioritizedReplayBuffer(cap),
        "proportional": lambda cap: ProportionalPrioritizedReplayBuffer(cap),
    }


def rlreplay_buffers() -> dict[str, Callable[[int], Any]]:
    from rlreplay.compat.nnabla_rl.replay_buffer import ReplayBuffer
    from rlreplay.compat.nnabla_rl.replay_buffers import (
        ProportionalPrioritizedReplayBuffer,
        RankBasedPrioritizedReplayBuffer,
    )

    return {
        "plain": lambda cap: ReplayBuffer(cap),
        "rank": lambda cap: RankBasedPrioritizedReplayBuffer(cap),
        "proportional": lambda cap: ProportionalPrioritizedReplayBuffer(cap),
    }


def _timed(run: Callable[[], int]) -> float:
    """µs per unit of ``run`` (which returns its units), CPU time, the collector off."""
    gc.collect()
    gc.disable()
    try:
        t0 = time.process_time()
        units = run()
        return (time.process_time() - t0) / units * 1e6
    finally:
        gc.enable()


def time_appends(make: Callable[[int], Any], exps: list[Any], wrapped: bool) -> float:
    capacity = len(exps) // 2 if wrapped else CAPACITY
    buffer = make(capacity)
    if wrapped:
        for e in exps:
            buffer.append(e)
        len(buffer)

    def run() -> int:
        append = buffer.append
        for e in exps:
            append(e)
        len(buffer)
        return len(exps)

    return _timed(run)


def time_sampling(make: Callable[[int], Any], exps: list[Any], iterations: int) -> float:
    buffer = make(CAPACITY)
    for e in exps:
        buffer.append(e)
    errors = np.random.default_rng(1).random((iterations, 32))

    def run() -> int:
        for i in range(iterations):
            buffer.sample(32)
            buffer.update_priorities(errors[i])
        return iterations

    return _timed(run)


def time_loop(
    make: Callable[[int], Any], exps: list[Any], iterations: int, capacity: int = CAPACITY
) -> float:
    buffer = make(capacity)
    for e in exps[: len(exps) // 2]:
        buffer.append(e)
    errors = np.random.default_rng(2).random((iterations, 32))

    def run() -> int:
        k = len(exps) // 2
        for i in range(iterations):
            for _ in range(4):
                buffer.append(exps[k % len(exps)])
                k += 1
            buffer.sample(32)
            buffer.update_priorities(errors[i])
        return iterations

    return _timed(run)


def time_full_loop(make: Callable[[int], Any], exps: list[Any], iterations: int) -> float:
    """:func:`time_loop` on a buffer that is full (capacity 500, half the experiences
    appended before): every append replaces the oldest experience, as in a long run."""
    return time_loop(make, exps, iterations, capacity=min(500, max(1, len(exps) // 4)))


def measure(
    libs: dict[str, dict[str, Callable[[int], Any]]], quick: bool, repeats: int
) -> list[dict[str, Any]]:
    n = 4_000 if quick else 20_000
    rows: list[dict[str, Any]] = []
    for kind in ("vec4", "atari84"):
        exps = experiences(kind, n if kind == "vec4" else n // 2)
        for variant in VARIANTS:
            for name, wrapped in (("append fill", False), ("append wrapped", True)):
                row: dict[str, Any] = {"row": f"{kind} {variant} {name}"}
                for lib, makers in libs.items():
                    time_appends(makers[variant], exps[:500], wrapped)  # warm-up (Numba)
                    runs = [time_appends(makers[variant], exps, wrapped) for _ in range(repeats)]
                    row[lib] = statistics.median(runs)
                rows.append(row)
    # 256 iterations append 1,024 experiences (more than the full-buffer loop's capacity)
    iterations = 256
    for kind, variants in (("vec4", VARIANTS), ("atari84", ("plain",))):
        exps = experiences(kind, n if kind == "vec4" else n // 2)
        rows.extend(sample_rows(libs, kind, variants, exps, iterations, repeats))
    return rows


def sample_rows(
    libs: dict[str, dict[str, Callable[[int], Any]]],
    kind: str,
    variants: tuple[str, ...],
    exps: list[Any],
    iterations: int,
    repeats: int,
) -> list[dict[str, Any]]:
    """The ``sample(32)+update`` and ``loop`` rows of ``variants`` for one experience kind."""
    rows: list[dict[str, Any]] = []
    for variant in variants:
        for name, timer in (
            ("sample(32)+update", time_sampling),
            ("loop 4 appends+sample", time_loop),
            *(
                [("loop 4 appends+sample, full buffer", time_full_loop)]
                if (kind, variant) == ("atari84", "plain")
                else []
            ),
        ):
            row: dict[str, Any] = {"row": f"{kind} {variant} {name}"}
            for lib, makers in libs.items():
                timer(makers[variant], exps[:600], 2)  # warm-up (Numba)
                runs = [
                    timer(makers[variant], exps, iterations) for _ in range(max(3, repeats // 2))
                ]
                row[lib] = statistics.median(runs)
            rows.append(row)
    return rows


def report(rows: list[dict[str, Any]], libs: list[str]) -> str:
    ratio = "rlreplay" in libs and "nnabla-rl" in libs
    head = (
        "| workload (µs, median CPU time) | " + " | ".join(libs) + (" | ratio |" if ratio else " |")
    )
    lines = [head, "|" + "---|" * (len(libs) + 1 + ratio)]
    for row in rows:
        cells = [f"{row[lib]:.2f}" for lib in libs]
        if ratio:
            cells.append(f"{row['nnabla-rl'] / row['rlreplay']:.2f}")
        lines.append(f"| {row['row']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer appends (a smoke run)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", help="write the rows to this file")
    parser.add_argument("--nnabla-rl-source", help="nnabla_rl package directory to compare")
    args = parser.parse_args(argv)
    libs = {"rlreplay": rlreplay_buffers()}
    if args.nnabla_rl_source:
        libs["nnabla-rl"] = load_nnabla_rl(args.nnabla_rl_source)
    rows = measure(libs, args.quick, args.repeats)
    print(report(rows, list(libs)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "repeats": args.repeats, "quick": args.quick}, f, indent=1)


if __name__ == "__main__":
    main()
