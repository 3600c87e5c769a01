"""Core buffer throughput: per-step add, extend, 16-env add and sample(256).

Run: ``python benchmarks/bench_core.py [--quick]``. Prints a Markdown table: for each
transition kind (a CartPole-sized one and 84x84 uint8 Atari frames with ``frame_stack=4``) the
median rate over repeats and the spread (min-max). Rates are per transition.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import rlreplay as rr

# Kernels compile in the untimed warm-up, never in the background during a timed window.
os.environ.setdefault("RLREPLAY_BACKGROUND_COMPILE", "0")


Array = np.ndarray[Any, Any]


def kinds(quick: bool) -> dict[str, dict[str, Any]]:
    return {
        "cartpole": {
            "fields": {"obs": rr.Field((4,), np.float32), "action": rr.Field((), np.int64)},
            "capacity": 1_000_000,
            "frame_stack": 1,
            "obs": lambda n: np.random.default_rng(0).random((n, 4), np.float32),
        },
        "atari": {
            "fields": {"obs": rr.Field((84, 84), np.uint8), "action": rr.Field((), np.int64)},
            "capacity": 50_000 if quick else 100_000,
            "frame_stack": 4,
            "obs": lambda n: np.random.default_rng(0).integers(0, 255, (n, 84, 84), np.uint8),
        },
    }


def make(kind: dict[str, Any], num_envs: int = 1) -> rr.ReplayBuffer:
    return rr.ReplayBuffer(
        kind["capacity"], kind["fields"], num_envs=num_envs, frame_stack=kind["frame_stack"],
        seed=0,
    )  # fmt: skip


def per_step_add(kind: dict[str, Any], n: int) -> float:
    buf = make(kind)
    obs = kind["obs"](64)
    t0 = time.perf_counter()
    for i in range(n):
        o = obs[i & 63]
        end = i % 500 == 499
        buf.add(obs=o, action=1, reward=1.0, next_obs=o, terminated=end, truncated=False)
    return n / (time.perf_counter() - t0)


def extend(kind: dict[str, Any], n: int) -> float:
    buf = make(kind)
    T = 1000
    obs = kind["obs"](T)
    te = (np.arange(T) % 500) == 499
    values = {"obs": obs, "action": np.ones(T, np.int64), "reward": np.ones(T, np.float32),
              "next_obs": obs, "terminated": te, "truncated": np.zeros(T, bool)}  # fmt: skip
    t0 = time.perf_counter()
    for _ in range(max(1, n // T)):
        buf.extend(**values)
    return max(1, n // T) * T / (time.perf_counter() - t0)


def vector_add(kind: dict[str, Any], n: int, E: int = 16) -> float:
    buf = make(kind, E)
    obs = kind["obs"](E)
    rng = np.random.default_rng(1)
    ends = rng.random((64, E)) < 1 / 500
    act, rew, no = np.ones(E, np.int64), np.ones(E, np.float32), np.zeros(E, bool)
    steps = max(1, n // E)
    t0 = time.perf_counter()
    for i in range(steps):
        buf.add(obs=obs, action=act, reward=rew, next_obs=obs, terminated=ends[i & 63],
                truncated=no)  # fmt: skip
    return steps * E / (time.perf_counter() - t0)


def sample(kind: dict[str, Any], n: int, batch: int = 256) -> float:
    buf = make(kind)
    fill = min(kind["capacity"], 100_000)
    T = 1000
    obs = kind["obs"](T)
    te = (np.arange(T) % 500) == 499
    values = {"obs": obs, "action": np.ones(T, np.int64), "reward": np.ones(T, np.float32),
              "next_obs": obs, "terminated": te, "truncated": np.zeros(T, bool)}  # fmt: skip
    for _ in range(fill // T):
        buf.extend(**values)
    calls = max(1, n // batch)
    t0 = time.perf_counter()
    for _ in range(calls):
        buf.sample(batch)
    return calls * batch / (time.perf_counter() - t0)


def measure(fn: Callable[[], float], repeats: int) -> tuple[float, float, float]:
    fn()  # warm-up: Numba compilation, page faults
    rates = [fn() for _ in range(repeats)]
    return statistics.median(rates), min(rates), max(rates)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer steps and repeats")
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 5)
    scale = 1 if args.quick else 4
    print(
        f"rlreplay {rr.__version__} | Python {platform.python_version()} | "
        f"NumPy {np.__version__} | {os.cpu_count()} CPUs | {platform.processor() or '?'}"
    )
    print(f"median of {repeats} repeats (min-max)\n")
    print("| transition | workload | rate |")
    print("|---|---|---|")
    for name, kind in kinds(args.quick).items():
        atari = name == "atari"
        rows = {
            "per-step add (adds/s)": lambda k=kind: per_step_add(k, 20_000 * scale),
            "extend, T=1000 (transitions/s)": lambda k=kind: extend(k, 40_000 * scale),
            "16-env add (transitions/s)": lambda k=kind: vector_add(k, 80_000 * scale),
            "sample(256) (transitions/s)": lambda k=kind, a=atari: sample(
                k, (25_600 if a else 256_000) * scale
            ),
        }
        for label, fn in rows.items():
            med, lo, hi = measure(fn, repeats)
            print(f"| {name} | {label} | {med:,.0f} ({lo:,.0f}-{hi:,.0f}) |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
