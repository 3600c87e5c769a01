"""Checkpoint size and speed: ``save`` / ``load`` of an empty, a 1%-full and a full buffer.

Run: ``python benchmarks/bench_checkpoint.py [--capacity N] [--obs 84,84] [--repeats R]``.
Prints a Markdown table: for each fill, the file's size, the buffer's arrays (what a file
holding every array whole takes) and the median time of ``save`` and of ``rlreplay.load``
over the repeats (min-max), with the rate in MB of file per second. The buffer holds ``obs``
frames (uint8) and an int64 action, one env, episodes of 500 steps. The files go to a
temporary directory (``--dir``), which needs room for one full checkpoint.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import rlreplay as rr

# Kernels compile in the untimed warm-up, never in the background during a timed window.
os.environ.setdefault("RLREPLAY_BACKGROUND_COMPILE", "0")


def filled(capacity: int, obs: tuple[int, ...], steps: int) -> rr.ReplayBuffer:
    """A buffer of ``capacity`` with ``steps`` steps added (in chunks of 1000)."""
    fields = {"obs": rr.Field(obs, np.uint8), "action": rr.Field((), np.int64)}
    buf = rr.ReplayBuffer(capacity, fields, seed=0)
    T = 1000
    frames = np.random.default_rng(0).integers(0, 255, (T, *obs), np.uint8)
    values = {"obs": frames, "action": np.ones(T, np.int64), "reward": np.ones(T, np.float32),
              "next_obs": frames, "terminated": np.arange(T) % 500 == 499,
              "truncated": np.zeros(T, bool)}  # fmt: skip
    for start in range(0, steps, T):
        n = min(T, steps - start)
        buf.extend(**{k: v[:n] for k, v in values.items()})
    return buf


def arrays_bytes(buf: rr.ReplayBuffer) -> int:
    """Bytes of the buffer's state arrays: what a file holding each of them whole takes."""
    return sum(a.nbytes for a in buf._state.arrays().values())  # (live views: no copy)


def timed(fn: object, repeats: int) -> tuple[float, float, float]:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times), max(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--capacity", type=int, default=100_000)
    parser.add_argument("--obs", default="84,84", help="frame shape, e.g. 84,84")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--fills", default="0,0.01,1", help="fractions of capacity")
    parser.add_argument("--dir", default=None, help="where the files go (default: a tmp dir)")
    args = parser.parse_args(argv)
    obs = tuple(int(n) for n in args.obs.split(","))
    print(
        f"rlreplay {rr.__version__} | Python {platform.python_version()} | "
        f"NumPy {np.__version__} | {os.cpu_count()} CPUs | {platform.processor() or '?'}"
    )
    print(f"capacity {args.capacity:,}, obs {obs} uint8; median of {args.repeats} (min-max)\n")
    print("| fill | file | arrays | save s (MB/s) | load s (MB/s) |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = Path(tmp) / "b.ckpt"
        for fill in (float(f) for f in args.fills.split(",")):
            buf = filled(args.capacity, obs, int(fill * args.capacity))
            buf.save(path)  # warm-up (page cache, first-call costs)
            rr.load(path).close()
            save = timed(lambda b=buf: b.save(path), args.repeats)
            load = timed(lambda: rr.load(path).close(), args.repeats)
            size = path.stat().st_size
            mb = size / 1e6
            print(
                f"| {fill:.0%} | {mb:,.3f} MB | {arrays_bytes(buf) / 1e6:,.1f} MB | "
                f"{save[0]:.3f} ({save[1]:.3f}-{save[2]:.3f}; {mb / save[0]:,.0f}) | "
                f"{load[0]:.3f} ({load[1]:.3f}-{load[2]:.3f}; {mb / load[0]:,.0f}) |",
                flush=True,
            )
            buf.close()
            path.unlink()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
