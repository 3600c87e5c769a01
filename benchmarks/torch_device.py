"""Device replay: rlreplay.torch's buffers against TorchRL's on the same device.

Run: ``python benchmarks/torch_device.py [--device cuda:0] [--capacity N] [--envs E]
[--batch B] [--obs 84,84 --dtype uint8] [--iters N] [--compile] [--no-parallel]``.

One iteration is what a vectorised training loop does per env step: add one step of ``E``
envs (tensors already on the device), then sample a batch of ``B``; prioritized rows also
update the batch's priorities. TorchRL: ``TensorDictReplayBuffer(storage=
LazyTensorStorage(capacity, device=device))`` (prioritized: ``TensorDictPrioritizedReplayBuffer``)
extended with a TensorDict of the ``E`` transitions (``obs``, ``action``, ``reward``,
``done``, ``next/obs``: it stores the next observation, rlreplay does not). rlreplay.torch
also assembles n-step windows (``--n-step``) and tracks episodes; TorchRL samples stored rows.
Prints µs per iteration (median of 5 rounds after a warm-up) and the ratio TorchRL / rlreplay
(above 1: rlreplay is faster). On a GPU every round ends with ``torch.cuda.synchronize()``.
``--compile`` adds rows whose sample is :func:`rlreplay.torch.compiled_sampler` (on a
GPU with ``mode="reduce-overhead"``: a CUDA graph). ``--count-ops`` also prints how many torch
ops (views and other metadata-only ops left out: roughly the kernels a GPU launches) one
``add``, ``sample`` and ``update_priorities`` run, also with a rate limiter and after
``abandon_episode``.

The massively parallel rows follow (``--no-parallel`` leaves them out, ``--parallel-only``
runs only them): the same loop with
4,096 envs of ``float32[64]`` observations per add, a sample of 4,096, capacity 1,048,576 (256
steps per env), uniform and prioritized (+ update); of the options above only ``--device``,
``--n-step`` and ``--threads`` apply to them. Both buffers are filled to capacity before
timing (every timed add overwrites each env's oldest step); the pooled steps
(``--parallel-pool``, 4 by default: 8 MiB of observations) are drawn on the device itself, so
the timed loop moves nothing from the host. Reported per row: µs per iteration (median of 5
rounds of ``--parallel-iters``) and transitions per second (``4096 / µs per iteration``: 4,096
added and 4,096 sampled per iteration). rlreplay stores each observation once (plus the final
observations at episode ends, about 1 step in 100 here); TorchRL stores ``obs`` and
``next/obs`` (512 MiB at this capacity).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

import rlreplay as rr
import rlreplay.torch as rrt


def steps_pool(args: argparse.Namespace, n: int = 64) -> list[dict[str, torch.Tensor]]:
    """``n`` steps of ``E`` envs, on the device (episodes end now and then)."""
    g = torch.Generator().manual_seed(0)
    dtype = getattr(torch, args.dtype)
    E, obs = args.envs, args.obs

    def frames() -> torch.Tensor:
        if dtype.is_floating_point:
            return torch.randn((E, *obs), generator=g).to(dtype)
        return torch.randint(0, 255, (E, *obs), generator=g).to(dtype)

    out = []
    for _ in range(n):
        step = {
            "obs": frames(),
            "action": torch.randint(0, 6, (E,), generator=g),
            "reward": torch.randn(E, generator=g),
            "terminated": torch.rand(E, generator=g) < 0.01,
            "truncated": torch.zeros(E, dtype=torch.bool),
            "next_obs": frames(),
        }
        out.append({k: v.to(args.device) for k, v in step.items()})
    return out


def parallel_pool(args: argparse.Namespace) -> list[dict[str, torch.Tensor]]:
    """``args.parallel_pool`` steps of ``args.envs`` envs, drawn on the device itself."""
    dev = torch.device(args.device)
    g = torch.Generator(device=dev).manual_seed(0)
    E, obs = args.envs, args.obs
    kw: dict[str, Any] = {"generator": g, "device": dev}
    return [
        {
            "obs": torch.randn((E, *obs), **kw),
            "action": torch.randint(0, 6, (E,), **kw),
            "reward": torch.randn(E, **kw),
            "terminated": torch.rand(E, **kw) < 0.01,
            "truncated": torch.zeros(E, dtype=torch.bool, device=dev),
            "next_obs": torch.randn((E, *obs), **kw),
        }
        for _ in range(args.parallel_pool)
    ]


def ours(
    args: argparse.Namespace, prioritized: bool, compiled: bool = False
) -> Callable[[dict[str, Any]], None]:
    fields = {"obs": rr.Field(args.obs, np.dtype(args.dtype)), "action": rr.Field((), np.int64)}
    common = dict(num_envs=args.envs, n_step=args.n_step, device=args.device, seed=0)
    if prioritized:
        buf: Any = rrt.DevicePrioritizedReplayBuffer(args.capacity, fields, **common)
    else:
        buf = rrt.DeviceReplayBuffer(args.capacity, fields, **common)
    B = args.batch
    sample: Callable[[], Any] = lambda: buf.sample(B)  # noqa: E731
    if compiled:  # CUDA: one CUDA graph per call (a batch lives until the next call)
        mode = "reduce-overhead" if torch.device(args.device).type == "cuda" else None
        sample = rrt.compiled_sampler(buf, B, mode=mode)

    def step(s: dict[str, Any]) -> None:
        buf.add(**s)
        batch = sample()
        if prioritized:
            buf.update_priorities(batch["ids"], batch["reward"].abs().double() + 0.1)

    return step


#: Ops that make views or change metadata only (no kernel), left out of ``--count-ops``.
_VIEWS = frozenset(
    {"view", "slice", "select", "unbind", "detach", "as_strided", "expand", "reshape", "alias",
     "unsqueeze", "squeeze", "t", "transpose", "permute", "_unsafe_view", "split", "chunk",
     "_reshape_alias", "lift_fresh"}
)  # fmt: skip


def count_ops(
    args: argparse.Namespace, pool: list[dict[str, Any]], prioritized: bool,
    limited: bool = False, abandoned: bool = False,
) -> str:  # fmt: skip
    """Torch ops (views left out) of one ``add``, one ``sample`` and, when prioritized, one
    ``update_priorities``, on a buffer warmed up as :func:`timed` warms it (``limited``: with
    a rate limiter; ``abandoned``: after an ``abandon_episode`` of every env, one hole each)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.n = 0

        def __torch_dispatch__(self, func: Any, types: Any, a: Any = (), kw: Any = None) -> Any:
            if func.overloadpacket.__name__ not in _VIEWS:
                self.n += 1
            return func(*a, **(kw or {}))

    fields = {"obs": rr.Field(args.obs, np.dtype(args.dtype)), "action": rr.Field((), np.int64)}
    common = dict(num_envs=args.envs, n_step=args.n_step, device=args.device, seed=0)
    kind = rrt.DevicePrioritizedReplayBuffer if prioritized else rrt.DeviceReplayBuffer
    if limited:
        common["rate_limiter"] = rr.MinSize(1)
    buf: Any = kind(args.capacity, fields, **common)
    for i in range(max(64, 2 * args.batch // args.envs + 8)):
        buf.add(**pool[i % len(pool)])
        if abandoned and i == 8:
            for e in range(args.envs):
                buf.abandon_episode(e)
    counts = []
    with Count() as c:
        buf.add(**pool[0])
    counts.append(c.n)
    with Count() as c:
        batch = buf.sample(args.batch)
    counts.append(c.n)
    if prioritized:
        p = batch["reward"].abs().double() + 0.1
        with Count() as c:
            buf.update_priorities(batch["ids"], p)
        counts.append(c.n)
    return " / ".join(str(n) for n in counts)


def torchrl(args: argparse.Namespace, prioritized: bool) -> Callable[[dict[str, Any]], None]:
    from tensordict import TensorDict
    from torchrl.data import (
        LazyTensorStorage,
        TensorDictPrioritizedReplayBuffer,
        TensorDictReplayBuffer,
    )

    storage = LazyTensorStorage(args.capacity, device=args.device)
    if prioritized:
        rb: Any = TensorDictPrioritizedReplayBuffer(
            alpha=0.6, beta=0.4, storage=storage, batch_size=args.batch
        )
    else:
        rb = TensorDictReplayBuffer(storage=storage, batch_size=args.batch)

    def step(s: dict[str, Any]) -> None:
        td = TensorDict(
            {
                "obs": s["obs"], "action": s["action"], "reward": s["reward"],
                "done": s["terminated"] | s["truncated"],
                "next": {"obs": s["next_obs"]},
            },
            batch_size=[args.envs], device=args.device,
        )  # fmt: skip
        rb.extend(td)
        batch = rb.sample()
        if prioritized:
            batch.set("td_error", batch["reward"].abs() + 0.1)
            rb.update_tensordict_priority(batch)

    return step


def timed(
    step: Callable[[dict[str, Any]], None], pool: list[dict[str, Any]], args: Any,
    warmup: int | None = None,
) -> float:  # fmt: skip
    """Median µs per iteration over 5 rounds of ``args.iters``, after a warm-up of ``warmup``
    iterations (default: enough of the buffer to sample)."""
    cuda = torch.device(args.device).type == "cuda"
    if warmup is None:
        warmup = max(64, 2 * args.batch // args.envs + 8)
    for i in range(warmup):
        step(pool[i % len(pool)])
    rounds = []
    for _ in range(5):
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        for i in range(args.iters):
            step(pool[i % len(pool)])
        if cuda:
            torch.cuda.synchronize()
        rounds.append((time.perf_counter() - start) / args.iters * 1e6)
    return float(statistics.median(rounds))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda:0" if torch.cuda.is_available() else "cpu")
    p.add_argument("--capacity", type=int, default=100_000)
    p.add_argument("--envs", type=int, default=16)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--obs", default="8", help="comma-separated observation shape")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--n-step", type=int, default=1)
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--count-ops", action="store_true", help="also print torch ops per call")
    p.add_argument(
        "--parallel", action=argparse.BooleanOptionalAction, default=True,
        help="also time 4,096 envs x float32[64], sample 4,096, capacity 1,048,576 (default)",
    )  # fmt: skip
    p.add_argument("--parallel-only", action="store_true", help="only the massively parallel rows")
    p.add_argument("--parallel-iters", type=int, default=50, help="iterations per round there")
    p.add_argument("--parallel-pool", type=int, default=4, help="pooled steps there")
    p.add_argument(
        "--compile", action="store_true",
        help="also time the loops with rrt.compiled_sampler (compiles first: seconds)",
    )  # fmt: skip
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    args.obs = tuple(int(x) for x in args.obs.split(",") if x)
    if args.parallel_only:
        print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads")
        parallel(args)
        return
    pool = steps_pool(args)
    print(
        f"device {args.device}, capacity {args.capacity}, {args.envs} envs, batch {args.batch}, "
        f"obs {args.obs} {args.dtype}, n_step {args.n_step}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} CPU threads\n"
    )
    if args.count_ops:
        ops = count_ops(args, pool, False)
        print(f"torch ops per call (views left out): uniform add / sample {ops}; ", end="")
        print(f"prioritized add / sample / update {count_ops(args, pool, True)}")
        for what, kw in (("with a rate limiter", {"limited": True}),
                         ("after abandon_episode", {"abandoned": True})):  # fmt: skip
            print(f"  {what}: uniform {count_ops(args, pool, False, **kw)}; ", end="")
            print(f"prioritized {count_ops(args, pool, True, **kw)}")
        print()
    print("| loop (add E + sample B) | rlreplay.torch µs/iter | TorchRL µs/iter | ratio |")
    print("|---|---|---|---|")
    for prioritized in (False, True):
        a = timed(ours(args, prioritized), pool, args)
        name = "prioritized (+ update)" if prioritized else "uniform"
        try:
            b = timed(torchrl(args, prioritized), pool, args)
        except (ImportError, RuntimeError) as exc:  # e.g. TorchRL built without its C++ trees
            print(f"| {name} | {a:.0f} | n/a ({type(exc).__name__}: {str(exc)[:60]}) | |")
            if args.compile:
                a = timed(ours(args, prioritized, compiled=True), pool, args)
                print(f"| {name}, compiled_sampler | {a:.0f} | n/a | |")
            continue
        print(f"| {name} | {a:.0f} | {b:.0f} | {b / a:.2f} |")
        if args.compile:
            a = timed(ours(args, prioritized, compiled=True), pool, args)
            print(f"| {name}, compiled_sampler | {a:.0f} | {b:.0f} | {b / a:.2f} |")
    if args.parallel:
        parallel(args)


def parallel(args: argparse.Namespace) -> None:
    """The massively parallel rows: 4,096 envs x ``float32[64]``, sample 4,096, both buffers
    filled to capacity (1,048,576) before timing, steps drawn on the device."""
    args = argparse.Namespace(**vars(args))
    args.envs, args.obs, args.dtype, args.batch = 4096, (64,), "float32", 4096
    args.capacity, args.iters = 4096 * 256, args.parallel_iters
    pool = parallel_pool(args)
    fill = args.capacity // args.envs + 8  # every env's ring full, then some overwrites
    E = args.envs
    print(
        f"\nmassively parallel: {E} envs x float32[64] per add, sample {args.batch}, capacity "
        f"{args.capacity} (filled first), {args.parallel_pool} pooled steps made on "
        f"{args.device}, n_step {args.n_step}, {args.iters} iterations x 5 rounds, median\n"
    )
    print("| loop (add 4,096 + sample 4,096) | rlreplay.torch µs/iter (transitions/s) "
          "| TorchRL µs/iter (transitions/s) | ratio |")  # fmt: skip
    print("|---|---|---|---|")
    for prioritized in (False, True):
        name = "prioritized (+ update)" if prioritized else "uniform"
        a = timed(ours(args, prioritized), pool, args, warmup=fill)
        ours_cell = f"{a:.0f} ({E / a * 1e6:,.0f})"
        try:
            b = timed(torchrl(args, prioritized), pool, args, warmup=fill)
        except (ImportError, RuntimeError) as exc:  # e.g. TorchRL built without its C++ trees
            print(f"| {name} | {ours_cell} | n/a ({type(exc).__name__}: {str(exc)[:60]}) | |")
            continue
        print(f"| {name} | {ours_cell} | {b:.0f} ({E / b * 1e6:,.0f}) | {b / a:.2f} |")
        if torch.device(args.device).type == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
