"""Microseconds per ``update(256) + sample(256)`` of the torch sum tree against rlreplay's
NumPy/Numba :class:`~rlreplay.sampling.SumTree`, at 10^5 leaves.

Run with ``python benchmarks/torch_trees.py [--device cuda:0]`` (add ``PYTHONPATH=src`` if
rlreplay is not installed). Each iteration sets 256 random leaves to random priorities, then
draws 256 leaves (stratified) from 256 uniforms: for the torch tree, indices, priorities and
uniforms are tensors already on the device (as a device-resident training loop has them); for
the NumPy tree, NumPy arrays. The torch tree's time is measured with the device synchronised
after each timed batch of iterations, so queued work is counted. Both trees give the same
leaves for the same uniforms (checked once before timing).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
import torch

from rlreplay.sampling import SumTree
from rlreplay.sampling.torch_trees import TorchSumTree


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _us_per_call(call: Callable[[int], object], sync: Callable[[], None], seconds: float) -> float:
    """Microseconds per call, timing batches of 50 calls for at least ``seconds``."""
    for i in range(20):  # warm-up: compilation, allocator, caches
        call(i)
    sync()
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(50):
            call(calls)
            calls += 1
        sync()
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--device", default="cpu", help="torch device of the torch tree")
    parser.add_argument("--capacity", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=2.0, help="time per measurement")
    args = parser.parse_args()
    device = torch.device(args.device)
    capacity, batch = args.capacity, args.batch

    rng = np.random.default_rng(0)
    start = rng.random(capacity)
    ref = SumTree(capacity)
    ref.set(np.arange(capacity), start)
    tree = TorchSumTree(capacity, device)
    tree.set(np.arange(capacity), start)
    rounds = 64  # inputs rotate, so repeated calls do not find the same paths in cache
    idx = [rng.integers(0, capacity, batch) for _ in range(rounds)]
    vals = [rng.random(batch) for _ in range(rounds)]
    uni = [rng.random(batch) for _ in range(rounds)]
    t_idx = [torch.from_numpy(a).to(device) for a in idx]
    t_vals = [torch.from_numpy(a).to(device) for a in vals]
    t_uni = [torch.from_numpy(a).to(device) for a in uni]

    want = ref.sample(batch, np.random.default_rng(1))
    got = tree.sample(torch.from_numpy(np.random.default_rng(1).random(batch)).to(device))
    assert np.array_equal(got.cpu().numpy(), want), "the trees disagree"

    def numpy_step(i: int) -> None:
        ref.set(idx[i % rounds], vals[i % rounds])
        ref.sample(batch, rng)

    def torch_step(i: int) -> None:
        tree.set(t_idx[i % rounds], t_vals[i % rounds])
        tree.sample(t_uni[i % rounds])

    def torch_update(i: int) -> None:
        tree.set(t_idx[i % rounds], t_vals[i % rounds])

    def torch_sample(i: int) -> None:
        tree.sample(t_uni[i % rounds])

    print(
        f"update({batch}) + sample({batch}) at {capacity:,} leaves; torch {torch.__version__} "
        f"on {device}"
        + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else "")
    )
    rows = [
        ("rlreplay.SumTree (NumPy/Numba, host)", numpy_step, lambda: None),
        (f"TorchSumTree on {device}", torch_step, lambda: _sync(device)),
        (f"  of which update({batch})", torch_update, lambda: _sync(device)),
        (f"  of which sample({batch})", torch_sample, lambda: _sync(device)),
    ]
    for name, call, sync in rows:
        print(f"{name:<42} {_us_per_call(call, sync, args.seconds):9.1f} us/iter")


if __name__ == "__main__":
    main()
