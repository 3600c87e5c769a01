"""What every library worker shares: workload sizes, input data, timing, threads, memory.

A worker is run as ``python benchmarks/workers/<lib>_worker.py --workload W [--quick]
[--repeats N]`` by ``benchmarks/run.py``; it measures one workload of one library and prints
one JSON line (the last line of its stdout) holding the metrics, the thread counts and the
library's version. Workers never import each other, so a peer that fails to import only
spoils its own cells.

Timing model (the same for every library, so rates compare):

* a *window* calls the library in chunks until ``window`` seconds have passed; its rate is
  ``units / elapsed`` (units: transitions, adds, sequences or iterations);
* one warm-up chunk runs before the first window (Numba compilation, first-touch page
  faults of the first rows, import-time caches);
* a metric is the list of ``repeats`` window rates; ``run.py`` reports their median and spread.

Fill phases that are not themselves measured (topping a buffer up before sampling) may use a
library's bulk API; when a library has none, its per-step API is used.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

# Kernels compile in the untimed warm-up, never in the background during a timed window.
os.environ.setdefault("RLREPLAY_BACKGROUND_COMPILE", "0")


Array = np.ndarray[Any, Any]

OBS_DIM = 4  # CartPole-sized transitions (workloads 1, 2, 4)
SEQ_OBS_DIM = 64  # workload 5
FRAME = (84, 84)  # workload 3
STACK = 4
NUM_ENVS = 16
POOL = 4096  # rows of pre-generated input; step i uses row i % POOL (a power of two)
MASK = POOL - 1
EPISODE_END_P = 1 / 250  # chance that a step ends its episode (Atari: 1 / 1000)
# Every pool ends an episode at this step, inside every warm-up chunk (>= 32 steps), so that
# code paths that only run at episode ends (and their JIT compilation) are warm before timing.
WARM_END = 16
WORKLOADS = ("single", "vector", "atari", "per", "sequences")


class Unavailable(Exception):
    """The library has no public API for this workload (the reason is the message)."""


@dataclass(frozen=True)
class Sizes:
    """Problem sizes of one run; ``quick`` shrinks fills and windows, never capacities."""

    quick: bool
    repeats: int
    window: float  # seconds per timed window
    capacity: int = 1_000_000
    atari_capacity: int = 100_000
    single_fill: int = 1_000_000  # stored transitions before sample(256) is timed
    atari_fill: int = 100_000  # frames added (timed, in `repeats` equal segments)
    per_fill: int = 1_000_000  # transitions added by 16 envs (timed, in segments)
    seq_fill: int = 1_000_000  # transitions stored before sample_sequences is timed
    batch: int = 256
    atari_batch: int = 32
    seq_batch: int = 32
    seq_len: int = 80
    per_alpha: float = 0.6
    per_beta: float = 0.4


def sizes(quick: bool, repeats: int | None) -> Sizes:
    if quick:
        return Sizes(
            quick=True,
            repeats=repeats or 3,
            window=0.25,
            single_fill=100_000,
            atari_fill=12_000,
            per_fill=100_000,
            seq_fill=100_000,
        )
    return Sizes(quick=False, repeats=repeats or 5, window=1.0)


# ---------------------------------------------------------------------- input data
@dataclass(frozen=True)
class Steps:
    """A pool of pre-generated environment steps; step ``i`` is row ``i & MASK``.

    ``obs`` has ``POOL + 1`` rows so that ``obs[j + 1]`` is step ``j``'s next observation.
    ``action``/``reward``/``done`` are Python lists (what a gymnasium env and a policy hand
    a training loop each step); the ``*_arr`` twins feed bulk calls.
    """

    obs: Array
    action: list[int]
    reward: list[float]
    done: list[bool]
    action_arr: Array
    reward_arr: Array
    done_arr: Array


def single_steps(obs_shape: tuple[int, ...], dtype: Any, end_p: float = EPISODE_END_P) -> Steps:
    rng = np.random.default_rng(0)
    if np.dtype(dtype) == np.uint8:
        obs = rng.integers(0, 256, (POOL + 1, *obs_shape), np.uint8)
    else:
        obs = rng.random((POOL + 1, *obs_shape), np.float32)
    action = rng.integers(0, 6, POOL).astype(np.int64)
    reward = rng.random(POOL, np.float32)
    done = rng.random(POOL) < end_p
    done[WARM_END] = True
    return Steps(obs, action.tolist(), reward.tolist(), done.tolist(), action, reward, done)


@dataclass(frozen=True)
class VectorSteps:
    """A pool of 16-env steps: row ``j`` of every array is one step of all envs."""

    obs: Array  # (POOL + 1, E, *obs_shape)
    action: Array  # (POOL, E) int64
    reward: Array  # (POOL, E) float32
    done: Array  # (POOL, E) bool


def vector_steps(obs_shape: tuple[int, ...], num_envs: int = NUM_ENVS) -> VectorSteps:
    rng = np.random.default_rng(1)
    obs = rng.random((POOL + 1, num_envs, *obs_shape), np.float32)
    action = rng.integers(0, 6, (POOL, num_envs)).astype(np.int64)
    reward = rng.random((POOL, num_envs), np.float32)
    done = rng.random((POOL, num_envs)) < EPISODE_END_P
    done[WARM_END] = True
    return VectorSteps(obs, action, reward, done)


def stacked_frames(frames: Array) -> Array:
    """``out[j] = frames[j-3 .. j]`` (wrapping): what a frame-stacking env wrapper returns."""
    idx = (np.arange(frames.shape[0])[:, None] + np.arange(1 - STACK, 1)) % frames.shape[0]
    return frames[idx]


# ---------------------------------------------------------------------- timing
def _warm_up(chunk: Callable[[int], int], i: int) -> int:
    """The untimed first chunk (its own frame, so that profiles can leave it out)."""
    return chunk(i)


def timed_windows(
    chunk: Callable[[int], int], repeats: int, window: float, warmup: bool = True
) -> list[float]:
    """Rates of ``repeats`` windows; ``chunk(i)`` does one chunk of work, returns its units.

    ``i`` counts chunks over all windows (workers use it to index the input pool).
    """
    i = 0
    if warmup:
        _warm_up(chunk, i)
        i += 1
    rates = []
    for _ in range(repeats):
        units = 0
        t0 = time.perf_counter()
        while True:
            units += chunk(i)
            i += 1
            elapsed = time.perf_counter() - t0
            if elapsed >= window:
                break
        rates.append(units / elapsed)
    return rates


def timed_segments(chunk: Callable[[int], int], total: int, repeats: int) -> list[float]:
    """Rates of ``repeats`` consecutive segments that together do ``total`` units of work.

    Used for fills, whose size is part of the workload: every library does the same work.
    ``chunk(i)`` does chunk ``i`` and returns its units. Chunk 0 is an untimed warm-up that
    counts towards ``total``.
    """
    per = max(1, (total - _warm_up(chunk, 0)) // repeats)
    rates, i = [], 1
    for _ in range(repeats):
        units = 0
        t0 = time.perf_counter()
        while units < per:
            units += chunk(i)
            i += 1
        rates.append(units / (time.perf_counter() - t0))
    return rates


# ---------------------------------------------------------------------- environment facts
def rss_bytes() -> int:
    """Resident set size of this process now (Linux ``/proc``; psutil elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        import psutil

        return int(psutil.Process().memory_info().rss)


def thread_counts() -> dict[str, Any]:
    """Threads each runtime loaded in this worker would use (``None``: not loaded)."""
    out: dict[str, Any] = {}
    torch = sys.modules.get("torch")
    out["torch"] = torch.get_num_threads() if torch is not None else None
    numba = sys.modules.get("numba")
    out["numba"] = numba.get_num_threads() if numba is not None else None
    try:
        from threadpoolctl import threadpool_info

        out["blas"] = sorted(
            {f"{p.get('internal_api')}:{p.get('num_threads')}" for p in threadpool_info()}
        )
    except ImportError:
        out["blas"] = None
    env = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")
    out["env"] = {k: os.environ[k] for k in env if k in os.environ}
    return out


def warm_memory(nbytes: int) -> None:
    """Touch ``nbytes`` of fresh memory once, then free it.

    On a virtual machine the first touch of guest memory that was never used before also
    faults in the hypervisor (here ~20 us per 7 KB frame, ten times a normal page fault), and
    whether a buffer's pages were used before depends on what ran earlier: measured fills
    swung 10x between runs. Touching as much memory as the biggest buffer will use and
    freeing it gives every library guest pages that are already backed, so a fill still pays
    the kernel's ordinary page faults, but not the hypervisor's.
    """
    block = np.ones(nbytes, np.uint8)
    del block


# ---------------------------------------------------------------------- entry point
def warm_bytes(workload: str, quick: bool) -> int:
    """How much memory to warm: a little more than the biggest buffer of the row uses."""
    if workload == "atari":  # SB3 keeps 4-frame stacks: 2.8 GB full, 0.34 GB at a quick fill
        return (1 << 30) if quick else (3 << 30)
    return (256 << 20) if quick else (512 << 20)


Workload = Callable[[Sizes], dict[str, Any]]


def main(library: str, version: Callable[[], str], workloads: dict[str, Workload]) -> int:
    """Parse the worker's arguments, run one workload, print one JSON line.

    ``workloads`` maps a workload name to a function returning ``{metric: [rates...]}`` (and
    optional ``info`` facts); a missing name, or one raising :class:`Unavailable`, gives
    ``{"unavailable": reason}``; any other exception gives ``{"error": ...}``.
    """
    parser = argparse.ArgumentParser(description=f"{library} benchmark worker")
    parser.add_argument("--workload", required=True, choices=WORKLOADS)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args()
    sz = sizes(args.quick, args.repeats)
    result: dict[str, Any] = {"library": library, "workload": args.workload}
    try:
        result["version"] = version()
        fn = workloads.get(args.workload)
        if fn is None:
            raise Unavailable(f"{library} has no API for this workload")
        warm_memory(warm_bytes(args.workload, args.quick))
        result["metrics"] = fn(sz)
    except Unavailable as exc:
        result["unavailable"] = str(exc)
    except ImportError as exc:
        result["unavailable"] = f"not importable ({type(exc).__name__}: {exc})"[:300]
    except Exception as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"[:500]
        traceback.print_exc(file=sys.stderr)
    result["threads"] = thread_counts()
    print(json.dumps(result), flush=True)
    return 0
