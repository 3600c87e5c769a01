"""Replay inside ``jax.jit``: rlreplay's JAX buffer side by side with flashbax.

Workload: one jitted ``lax.scan`` whose every iteration adds one step of 16 envs (``obs
float32[4]``, ``action int32``, ``reward``, episode ends), draws a batch of 256 and, for the
prioritized rows, sets the 256 drawn transitions' priorities; capacity 100,000. The buffer is
filled to capacity first (untimed), so every timed add overwrites, and the state is donated to
the scan (updated in place). Reported: microseconds per iteration, the median of ``--repeats``
timed calls of the compiled scan (``--iters`` iterations each).

How each library is used, as its documentation shows:

* rlreplay ``rlreplay.jax.make_buffer(capacity, fields, num_envs=16, n_step=1)``
  (``prioritized=True, alpha=0.6, beta=0.4`` for the prioritized row): ``add`` of a step of
  the 16 envs, ``sample(state, key, 256)`` (transitions with ``next_obs``, ``discount``, ids
  and importance weights over the whole buffer), ``update_priorities(state, ids, p)``. A row
  with ``n_step=3`` shows the cost of 3-step windows. The sequence rows draw
  ``sample_sequences(state, key, 32, 8)`` instead (32 sequences of 8 steps that stop at
  episode ends, with ``mask`` and ``next_obs``; prioritized: by priority, 32 updates); the
  recency row draws a quarter of each batch among each env's newest 1,000 transitions, the
  ``replacement=False`` row draws batches without duplicates; the rank-based row ranks the
  100,000 priorities at every draw (a sort: ``--rank-iters`` iterations per timed scan).
* flashbax ``make_flat_buffer(max_length, min_length, sample_batch_size=256,
  add_batch_size=16)`` and ``make_prioritised_flat_buffer(..., priority_exponent=0.6)``:
  ``add`` of a batch of 16 timesteps, ``sample`` (pairs of consecutive steps; the prioritised
  one with probabilities, no importance weights), ``set_priorities(state, indices, p)``. For
  the sequence rows ``make_trajectory_buffer`` / ``make_prioritised_trajectory_buffer``
  (``sample_batch_size=32, sample_sequence_length=8, period=1``): windows of 8 consecutive
  steps that run across episode ends (no mask).

Run: ``python benchmarks/accelerator.py [--device cpu|gpu|cuda] [--iters 1000] [--repeats 5]
[--rank-iters 100] [--json out.json]``. flashbax is never a dependency of rlreplay (``pip
install flashbax``); without it its rows say so.
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
from typing import Any

import numpy as np

E = 16  # envs
BATCH = 256
CAPACITY = 100_000
EPISODE = 200  # env e ends an episode every 200 steps, staggered across envs
ALPHA, BETA = 0.6, 0.4
SEQS, SEQ_LEN = 32, 8  # sequence rows: 32 sequences of 8 steps (256 steps, as a batch)
RECENT_STEPS = 1_000  # recency row: a quarter of each batch from each env's newest 1,000


def _steps(jnp: Any, i: Any) -> dict[str, Any]:
    """Step ``i`` of the 16 envs, computed on the device (no host input in the loop)."""
    envs = jnp.arange(E)
    obs = (i + envs[:, None] + jnp.arange(4)).astype(jnp.float32)
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
) -> Runner:  # fmt: skip
    import jax
    import jax.numpy as jnp

    import rlreplay as rr
    import rlreplay.jax as rrj

    fields = {"obs": rr.Field((4,), np.float32), "action": rr.Field((), np.int32)}
    per = {"alpha": ALPHA, "beta": BETA, "variant": variant} if prioritized else {}
    buf = rrj.make_buffer(
        CAPACITY, fields, num_envs=E, n_step=n_step, gamma=0.99, prioritized=prioritized,
        recent_ratio=recent_ratio, recent_steps=RECENT_STEPS, replacement=replacement, **per,
    )  # fmt: skip

    @jax.jit
    def fill(state: Any) -> Any:
        def body(s: Any, i: Any) -> tuple[Any, None]:
            return buf.add(s, _steps(jnp, i)), None

        return jax.lax.scan(body, state, jnp.arange(CAPACITY // E))[0]

    def body(carry: Any, i: Any) -> tuple[Any, Any]:
        state, key = carry
        key, k_sample, k_prio = jax.random.split(key, 3)
        state = buf.add(state, _steps(jnp, i))
        if sequences:
            batch = buf.sample_sequences(state, k_sample, SEQS, SEQ_LEN)
            used = batch["reward"].sum() + batch["next_obs"].sum() + batch["mask"].sum()
            n = SEQS
        else:
            batch = buf.sample(state, k_sample, BATCH)
            used = batch["reward"].sum() + batch["next_obs"].sum()
            n = BATCH
        used = used + batch["weights"].sum()
        if prioritized:
            p = jax.random.uniform(k_prio, (n,)) * 2.0
            state = buf.update_priorities(state, batch["ids"], p)
        return (state, key), used

    @jax.jit
    def scan(state: Any, key: Any) -> Any:
        (state, _), used = jax.lax.scan(body, (state, key), CAPACITY // E + jnp.arange(iters))
        return state, used

    return Runner(jax.jit(scan, donate_argnums=0), fill(buf.init()))


def flashbax_row(prioritized: bool, iters: int, *, sequences: bool = False) -> Runner:
    import flashbax as fbx
    import jax
    import jax.numpy as jnp

    if sequences:  # trajectories: [E, T] storage, windows of SEQ_LEN consecutive steps
        kwargs: dict[str, Any] = dict(
            add_batch_size=E, sample_batch_size=SEQS, sample_sequence_length=SEQ_LEN,
            period=1, min_length_time_axis=SEQ_LEN, max_length_time_axis=CAPACITY // E,
        )  # fmt: skip
        if prioritized:
            fb = fbx.make_prioritised_trajectory_buffer(**kwargs, priority_exponent=ALPHA)
        else:
            fb = fbx.make_trajectory_buffer(**kwargs)
    else:
        kwargs = dict(
            max_length=CAPACITY, min_length=BATCH, sample_batch_size=BATCH, add_batch_size=E
        )
        if prioritized:
            fb = fbx.make_prioritised_flat_buffer(**kwargs, priority_exponent=ALPHA)
        else:
            fb = fbx.make_flat_buffer(**kwargs)

    def timestep(i: Any) -> dict[str, Any]:
        s = _steps(jnp, i)
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

        return jax.lax.scan(body, state, jnp.arange(CAPACITY // E))[0]

    n = SEQS if sequences else BATCH

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
        (state, _), used = jax.lax.scan(body, (state, key), CAPACITY // E + jnp.arange(iters))
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

    for prioritized in (False, True):
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
    prepare("uniform, recent_ratio=0.25", "rlreplay",
            lambda: rlreplay_row(False, 1, args.iters, recent_ratio=0.25))  # fmt: skip
    prepare("uniform, replacement=False", "rlreplay",
            lambda: rlreplay_row(False, 1, args.iters, replacement=False))  # fmt: skip
    prepare("rank-based", "rlreplay",
            lambda: rlreplay_row(True, 1, args.rank_iters, variant="rank_based"))  # fmt: skip
    times: dict[tuple[str, str], list[float]] = {k: [] for k in runners}
    for _ in range(args.repeats):
        for k, runner in runners.items():
            times[k].append(runner.once())
    for (name, lib), ts in times.items():
        us = [1e6 * t / (args.rank_iters if name == "rank-based" else args.iters) for t in ts]
        rows.append({"row": name, "lib": lib, "us_per_iter": us, "median": statistics.median(us)})
        print(f"{name:<24} {lib:<9} {statistics.median(us):8.1f} us/iter", file=sys.stderr)

    machine = platform.processor() or platform.machine()
    print(
        f"\nJAX {jax.__version__} on {device.device_kind} ({device.platform}); flashbax "
        f"{fbx_version or 'not installed'}; {machine}, {os.cpu_count()} cores; {args.iters} "
        f"iterations x {args.repeats} repeats, median\n"
    )
    print("| workload (per iteration) | rlreplay.jax | flashbax | speed-up |")
    print("|---|---:|---:|---:|")
    by = {(r["row"], r["lib"]): r for r in rows}
    names = ["uniform", "prioritized", "uniform, n_step=3", "prioritized, n_step=3",
             f"uniform sequences {SEQS}x{SEQ_LEN}", f"prioritized sequences {SEQS}x{SEQ_LEN}",
             "uniform, recent_ratio=0.25", "uniform, replacement=False",
             "rank-based"]  # fmt: skip
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
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"device": str(device), "jax": jax.__version__, "flashbax": fbx_version,
                       "iters": args.iters, "rows": rows}, fh, indent=1)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
