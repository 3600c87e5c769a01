"""Replay inside ``jax.jit``: rlreplay's JAX buffer side by side with flashbax.

Workload: one jitted ``lax.scan`` whose every iteration adds one step of 16 envs (``obs
float32[4]``, ``action int32``, ``reward``, episode ends), draws a batch of 256 and, for the
prioritized rows, sets the 256 drawn transitions' priorities; capacity 100,000. The buffer is
filled to capacity first (untimed), so every timed add overwrites, and the state is donated to
the scan (updated in place). Reported: microseconds per iteration, the median of ``--repeats``
timed calls of the compiled scan (``--iters`` iterations each).

The massively parallel rows (``--no-parallel`` leaves them out, ``--parallel-only`` runs
only them) run the same loop, uniform and
prioritized, with 4,096 envs of ``obs float32[64]`` per add, a batch of 4,096 and capacity
1,048,576 (256 steps per env), both libraries filled to capacity first as above; the steps are
computed inside the scan, so no host input enters the timed loop (``--parallel-iters``
iterations per timed scan). They also report transitions per second: ``4096 / µs per
iteration`` (4,096 added and 4,096 drawn per iteration). The ``--json`` rows give every row's
``envs``, ``obs``, ``batch``, ``capacity``, ``iters`` and ``transitions_per_s``.

How each library is used, as its documentation shows:

* rlreplay ``rlreplay.jax.make_buffer(capacity, fields, num_envs=16, n_step=1)``
  (``prioritized=True, alpha=0.6, beta=0.4`` for the prioritized rows; ``num_envs=4096`` for
  the massively parallel ones): ``add`` of a step of the 16 envs, ``sample(state, key, 256)``
  (transitions with ``next_obs``, ``discount``, ids and importance weights over the whole
  buffer), ``update_priorities(state, ids, p)``. A row
  with ``n_step=3`` shows the cost of 3-step windows. The sequence rows draw
  ``sample_sequences(state, key, 32, 8)`` instead (32 sequences of 8 steps that stop at
  episode ends, with ``mask`` and ``next_obs``; prioritized: by priority, 32 updates); the
  recency row draws a quarter of each batch among each env's newest 1,000 transitions, the
  ``replacement=False`` row draws batches without duplicates; the rank-based row ranks the
  100,000 priorities at every draw (a sort: ``--rank-iters`` iterations per timed scan).
* flashbax ``make_flat_buffer(max_length, min_length, sample_batch_size=256,
  add_batch_size=16)`` and ``make_prioritised_flat_buffer(..., priority_exponent=0.6)``
  (massively parallel rows: ``sample_batch_size=4096, add_batch_size=4096``): ``add`` of a
  batch of 16 timesteps, ``sample`` (pairs of consecutive steps; the prioritised
  one with probabilities, no importance weights), ``set_priorities(state, indices, p)``. For
  the sequence rows ``make_trajectory_buffer`` / ``make_prioritised_trajectory_buffer``
  (``sample_batch_size=32, sample_sequence_length=8, period=1``): windows of 8 consecutive
  steps that run across episode ends (no mask).

Run: ``python benchmarks/accelerator.py [--device cpu|gpu|cuda] [--iters 1000] [--repeats 5]
[--rank-iters 100] [--parallel-iters 50] [--no-parallel] [--json out.json]``. flashbax is
never a dependency of rlreplay (``pip install flashbax``); without it its rows say so.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

EPISODE = 200  # env e ends an episode every 200 steps, staggered across envs
ALPHA, BETA = 0.6, 0.4
SEQS, SEQ_LEN = 32, 8  # sequence rows: 32 sequences of 8 steps (256 steps, as a batch)
RECENT_STEPS = 1_000  # recency row: a quarter of each batch from each env's newest 1,000
PARALLEL_NAME = "4096 envs x float32[64], batch 4096"


@dataclass(frozen=True)
class Workload:
    """What one iteration adds and draws: ``envs`` envs of ``obs float32[obs]`` per add, a
    batch of ``batch``, in a buffer of ``capacity`` transitions."""

    envs: int
    obs: int
    batch: int
    capacity: int


SMALL = Workload(envs=16, obs=4, batch=256, capacity=100_000)  # the rows' default
#: The massively parallel rows: 4,096 envs x float32[64], batch 4,096, 256 steps per env.
PARALLEL = Workload(envs=4096, obs=64, batch=4096, capacity=4096 * 256)


def _steps(jnp: Any, i: Any, w: Workload) -> dict[str, Any]:
    """Step ``i`` of the ``w.envs`` envs, computed on the device (no host input in the loop)."""
    E = w.envs
    envs = jnp.arange(E)
    obs = (i + envs[:, None] + jnp.arange(w.obs)).astype(jnp.float32)
    ends = ((i + 13 * envs) % EPISODE) == EPISODE - 1
    return {
        "obs": obs,
        "action": (i + envs).astype(jnp.int32) % 4,
        "reward": jnp.ones(E, jnp.float32),
        "terminated": ends,
        "truncated": jnp.zeros(E, bool),
        "next_obs": obs + 1,
    }


class Runner:
    """A compiled scan and its (donated) state: each :meth:`once` times one call."""

    def __init__(self, run: Callable[[Any, Any], Any], state: Any) -> None:
        import jax

        self.run, self.key = run, jax.random.key(0)
        self.state, out = run(state, self.key)  # compiles, and warms up
        jax.block_until_ready(out)

    def once(self) -> float:
        import jax

        self.key = jax.random.fold_in(self.key, 1)
        t0 = time.perf_counter()
        self.state, out = self.run(self.state, self.key)
        jax.block_until_ready((self.state, out))
        return time.perf_counter() - t0


def rlreplay_row(
    prioritized: bool, n_step: int, iters: int, *, variant: str = "proportional",
    recent_ratio: float = 0.0, sequences: bool = False, replacement: bool = True,
    w: Workload = SMALL,
) -> Runner:  # fmt: skip
    import jax
    import jax.numpy as jnp

    import rlreplay as rr
    import rlreplay.jax as rrj

    E, cap, batch_size = w.envs, w.capacity, w.batch
    fields = {"obs": rr.Field((w.obs,), np.float32), "action": rr.Field((), np.int32)}
    per = {"alpha": ALPHA, "beta": BETA, "variant": variant} if prioritized else {}
    buf = rrj.make_buffer(
        cap, fields, num_envs=E, n_step=n_step, gamma=0.99, prioritized=prioritized,
        recent_ratio=recent_ratio, recent_steps=RECENT_STEPS, replacement=replacement, **per,
    )  # fmt: skip

    @jax.jit
    def fill(state: Any) -> Any:
        def body(s: Any, i: Any) -> tuple[Any, None]:
            return buf.add(s, _steps(jnp, i, w)), None

        return jax.lax.scan(body, state, jnp.arange(cap // E))[0]

    def body(carry: Any, i: Any) -> tuple[Any, Any]:
        state, key = carry
        key, k_sample, k_prio = jax.random.split(key, 3)
        state = buf.add(state, _steps(jnp, i, w))
        if sequences:
            batch = buf.sample_sequences(state, k_sample, SEQS, SEQ_LEN)
            used = batch["reward"].sum() + batch["next_obs"].sum() + batch["mask"].sum()
            n = SEQS
        else:
            batch = buf.sample(state, k_sample, batch_size)
            used = batch["reward"].sum() + batch["next_obs"].sum()
            n = batch_size
        used = used + batch["weights"].sum()
        if prioritized:
            p = jax.random.uniform(k_prio, (n,)) * 2.0
            state = buf.update_priorities(state, batch["ids"], p)
        return (state, key), used

    @jax.jit
    def scan(state: Any, key: Any) -> Any:
        (state, _), used = jax.lax.scan(body, (state, key), cap // E + jnp.arange(iters))
        return state, used

    return Runner(jax.jit(scan, donate_argnums=0), fill(buf.init()))


def flashbax_row(
    prioritized: bool, iters: int, *, sequences: bool = False, w: Workload = SMALL
) -> Runner:
    import flashbax as fbx
    import jax
    import jax.numpy as jnp

    E, cap, batch_size = w.envs, w.capacity, w.batch
    if sequences:  # trajectories: [E, T] storage, windows of SEQ_LEN consecutive steps
        kwargs: dict[str, Any] = dict(
            add_batch_size=E, sample_batch_size=SEQS, sample_sequence_length=SEQ_LEN,
            period=1, min_length_time_axis=SEQ_LEN, max_length_time_axis=cap // E,
        )  # fmt: skip
        if prioritized:
            fb = fbx.make_prioritised_trajectory_buffer(**kwargs, priority_exponent=ALPHA)
        else:
            fb = fbx.make_trajectory_buffer(**kwargs)
    else:
        kwargs = dict(
            max_length=cap, min_length=batch_size, sample_batch_size=batch_size, add_batch_size=E
        )
        if prioritized:
            fb = fbx.make_prioritised_flat_buffer(**kwargs, priority_exponent=ALPHA)
        else:
            fb = fbx.make_flat_buffer(**kwargs)

    def timestep(i: Any) -> dict[str, Any]:
        s = _steps(jnp, i, w)
        out = {"obs": s["obs"], "action": s["action"], "reward": s["reward"],
               "done": s["terminated"]}  # fmt: skip
        return jax.tree.map(lambda x: x[:, None], out) if sequences else out

    example = jax.tree.map(lambda x: x[0], timestep(jnp.int32(0)))
    if sequences:
        example = jax.tree.map(lambda x: x[0], example)

    @jax.jit
    def fill(state: Any) -> Any:
        def body(s: Any, i: Any) -> tuple[Any, None]:
            return fb.add(s, timestep(i)), None

        return jax.lax.scan(body, state, jnp.arange(cap // E))[0]

    n = SEQS if sequences else batch_size

    def body(carry: Any, i: Any) -> tuple[Any, Any]:
        state, key = carry
        key, k_sample, k_prio = jax.random.split(key, 3)
        state = fb.add(state, timestep(i))
        batch = fb.sample(state, k_sample)
        if prioritized:
            p = jax.random.uniform(k_prio, (n,)) * 2.0
            state = fb.set_priorities(state, batch.indices, p)
        exp = batch.experience
        if sequences:
            used = exp["reward"].sum() + exp["obs"].sum()
        else:
            used = exp.first["reward"].sum() + exp.second["obs"].sum()
        if prioritized:
            used = used + batch.probabilities.sum()
        return (state, key), used

    def scan(state: Any, key: Any) -> Any:
        (state, _), used = jax.lax.scan(body, (state, key), cap // E + jnp.arange(iters))
        return state, used

    return Runner(jax.jit(scan, donate_argnums=0), fill(fb.init(example)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="JAX platform: cpu (default), gpu, cuda")
    parser.add_argument("--iters", type=int, default=1000, help="iterations per timed scan")
    parser.add_argument("--repeats", type=int, default=5, help="timed scans per row")
    parser.add_argument(
        "--rank-iters",
        type=int,
        default=100,
        help="iterations per timed scan of the rank-based row (a sort per draw)",
    )
    parser.add_argument(
        "--parallel", action=argparse.BooleanOptionalAction, default=True,
        help="also the massively parallel rows: 4,096 envs x float32[64], batch 4,096 (default)",
    )  # fmt: skip
    parser.add_argument(
        "--parallel-only", action="store_true", help="only the massively parallel rows"
    )
    parser.add_argument(
        "--parallel-iters", type=int, default=50,
        help="iterations per timed scan of the massively parallel rows",
    )  # fmt: skip
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args(argv)
    os.environ["JAX_PLATFORMS"] = args.device  # before JAX is imported
    import jax

    device = jax.devices()[0]
    from importlib import metadata

    fbx_error = ""
    try:
        import flashbax  # noqa: F401

        fbx_version: str | None = metadata.version("flashbax")
    except ImportError as exc:
        fbx_version, fbx_error = None, str(exc)
    # Every row is compiled and warmed up first; then the timed calls go round the rows
    # (repeat by repeat), so that a change of the machine's load hits every row alike.
    rows: list[dict[str, Any]] = []
    runners: dict[tuple[str, str], Runner] = {}

    def prepare(name: str, lib: str, make: Callable[[], Runner]) -> None:
        try:
            runners[(name, lib)] = make()
        except Exception as exc:  # a peer's failure spoils its own row only
            rows.append({"row": name, "lib": lib, "error": f"{type(exc).__name__}: {exc}"})
            print(f"{name:<24} {lib:<9} failed: {exc}", file=sys.stderr)

    for prioritized in (False, True) if not args.parallel_only else ():
        name = "prioritized" if prioritized else "uniform"
        prepare(name, "rlreplay", lambda p=prioritized: rlreplay_row(p, 1, args.iters))
        seq = ("prioritized" if prioritized else "uniform") + f" sequences {SEQS}x{SEQ_LEN}"
        prepare(seq, "rlreplay",
                lambda p=prioritized: rlreplay_row(p, 1, args.iters, sequences=True))  # fmt: skip
        if fbx_version is not None:
            prepare(name, "flashbax", lambda p=prioritized: flashbax_row(p, args.iters))
            prepare(seq, "flashbax",
                    lambda p=prioritized: flashbax_row(p, args.iters, sequences=True))  # fmt: skip
        else:
            rows.append({"row": name, "lib": "flashbax", "error": fbx_error})
        prepare(name + ", n_step=3", "rlreplay",
                lambda p=prioritized: rlreplay_row(p, 3, args.iters))  # fmt: skip
    if not args.parallel_only:
        prepare("uniform, recent_ratio=0.25", "rlreplay",
                lambda: rlreplay_row(False, 1, args.iters, recent_ratio=0.25))  # fmt: skip
        prepare("uniform, replacement=False", "rlreplay",
                lambda: rlreplay_row(False, 1, args.iters, replacement=False))  # fmt: skip
        prepare("rank-based", "rlreplay",
                lambda: rlreplay_row(True, 1, args.rank_iters, variant="rank_based"))  # fmt: skip
    iters_of = {"rank-based": args.rank_iters}
    workload_of: dict[str, Workload] = {}
    parallel_names = [PARALLEL_NAME + ", uniform", PARALLEL_NAME + ", prioritized"]
    if args.parallel or args.parallel_only:
        for prioritized, name in zip((False, True), parallel_names, strict=True):
            iters_of[name], workload_of[name] = args.parallel_iters, PARALLEL
            n = args.parallel_iters
            prepare(name, "rlreplay", partial(rlreplay_row, prioritized, 1, n, w=PARALLEL))
            if fbx_version is not None:
                prepare(name, "flashbax", partial(flashbax_row, prioritized, n, w=PARALLEL))
    times: dict[tuple[str, str], list[float]] = {k: [] for k in runners}
    for _ in range(args.repeats):
        for k, runner in runners.items():
            times[k].append(runner.once())
    for (name, lib), ts in times.items():
        us = [1e6 * t / iters_of.get(name, args.iters) for t in ts]
        w = workload_of.get(name, SMALL)
        med = statistics.median(us)
        rows.append({"row": name, "lib": lib, "us_per_iter": us, "median": med,
                     "iters": iters_of.get(name, args.iters), "envs": w.envs, "obs": w.obs,
                     "batch": w.batch, "capacity": w.capacity,
                     "transitions_per_s": w.envs / med * 1e6})  # fmt: skip
        print(f"{name:<24} {lib:<9} {med:8.1f} us/iter", file=sys.stderr)

    machine = platform.processor() or platform.machine()
    print(
        f"\nJAX {jax.__version__} on {device.device_kind} ({device.platform}); flashbax "
        f"{fbx_version or 'not installed'}; {machine}, {os.cpu_count()} cores; {args.iters} "
        f"iterations x {args.repeats} repeats, median\n"
    )
    by = {(r["row"], r["lib"]): r for r in rows}
    if not args.parallel_only:
        print("| workload (per iteration) | rlreplay.jax | flashbax | speed-up |")
        print("|---|---:|---:|---:|")
    names = ["uniform", "prioritized", "uniform, n_step=3", "prioritized, n_step=3",
             f"uniform sequences {SEQS}x{SEQ_LEN}", f"prioritized sequences {SEQS}x{SEQ_LEN}",
             "uniform, recent_ratio=0.25", "uniform, replacement=False",
             "rank-based"] if not args.parallel_only else []  # fmt: skip
    for name in names:
        ours, theirs = by.get((name, "rlreplay")), by.get((name, "flashbax"))
        o = f"{ours['median']:.1f} µs" if ours and "median" in ours else "failed"
        t = f"{theirs['median']:.1f} µs" if theirs and "median" in theirs else "—"
        ratio = (
            f"{theirs['median'] / ours['median']:.2f}x"
            if ours and theirs and "median" in ours and "median" in theirs
            else ""
        )
        print(f"| {name} | {o} | {t} | {ratio} |")
    if args.parallel or args.parallel_only:
        w = PARALLEL
        print(
            f"\nmassively parallel: {w.envs} envs x float32[{w.obs}] per add, batch {w.batch}, "
            f"capacity {w.capacity} (filled first), {args.parallel_iters} iterations x "
            f"{args.repeats} repeats, median; transitions/s = {w.envs} added (and {w.batch} "
            "sampled) per iteration\n"
        )
        print("| workload (per iteration) | rlreplay.jax µs (transitions/s) "
              "| flashbax µs (transitions/s) | speed-up |")  # fmt: skip
        print("|---|---:|---:|---:|")
        for name in parallel_names:
            ours, theirs = by.get((name, "rlreplay")), by.get((name, "flashbax"))
            o = (f"{ours['median']:.1f} ({ours['transitions_per_s']:,.0f})"
                 if ours and "median" in ours else "failed")  # fmt: skip
            t = (f"{theirs['median']:.1f} ({theirs['transitions_per_s']:,.0f})"
                 if theirs and "median" in theirs else "—")  # fmt: skip
            ratio = (
                f"{theirs['median'] / ours['median']:.2f}x"
                if ours and theirs and "median" in ours and "median" in theirs
                else ""
            )
            print(f"| {name} | {o} | {t} | {ratio} |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"device": str(device), "jax": jax.__version__, "flashbax": fbx_version,
                       "iters": args.iters, "rows": rows}, fh, indent=1)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
