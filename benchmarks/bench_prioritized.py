"""Prioritized replay throughput, rlreplay side by side with cpprb and Tianshou.

Workload (the prioritized row of the benchmark issue): capacity 1,000,000, alpha 0.6,
beta 0.4, transitions ``obs float32[4], action int64, reward float32, done, next_obs``.

* **fill**: 16 envs add a batch of 16 transitions per call until the buffer is full
  (transitions/s; every env ends an episode every 1000 steps, staggered);
* **iteration**: ``sample(256)`` with importance weights, then update the 256 priorities
  (iterations/s, on the full buffer).

Run: ``python benchmarks/bench_prioritized.py [--quick] [--repeats 3] [--json out.json]``.
Each library runs in its own subprocess (one per repeat) with a timeout; a peer that is not
installed is skipped with the reason. Peers are never dependencies of rlreplay: install them
into the benchmark environment only (``pip install cpprb tianshou``; keep torch at 2.13.0).
How each peer is used, as its documentation shows:

* cpprb ``PrioritizedReplayBuffer(size, env_dict, alpha, next_of="obs")`` (``next_of`` is its
  memory-saving option: ``next_obs`` is not stored twice), ``add`` of a batch of 16 rows,
  ``sample(256, beta)`` and ``update_priorities(indexes, priorities)``. cpprb has no notion of
  envs: the 16 rows go in one after the other.
* Tianshou ``PrioritizedVectorReplayBuffer(total_size, buffer_num=16, alpha, beta,
  ignore_obs_next=True)`` (one sub-buffer per env; ``ignore_obs_next`` is its memory saver),
  ``add(Batch, buffer_ids)``, ``sample(256)`` and ``update_weight(indices, priorities)``.
  Tianshou normalises weights by the batch maximum and does not guard against stale indices.
* rlreplay ``PrioritizedReplayBuffer(capacity, fields, num_envs=16, alpha, beta)``, ``add``
  of the 16 envs' steps, ``sample(256)`` (weights normalised over the whole buffer) and
  ``update_priorities(batch.ids, priorities)`` (stale ids are detected and ignored).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

# Kernels compile in the untimed warm-up, never in the background during a timed window.
os.environ.setdefault("RLREPLAY_BACKGROUND_COMPILE", "0")


Array = np.ndarray[Any, Any]

E = 16  # envs
BATCH = 256
ALPHA, BETA = 0.6, 0.4
LIBS = ("rlreplay", "cpprb", "tianshou")
EPISODE = 1000  # steps per episode; env e ends its episodes at steps 1000k - 1 - 61e


# ---------------------------------------------------------------------------- workers
# A worker builds one library's buffer, fills it, times the iterations and prints one JSON
# line. It imports only its own library (plus numpy), so peers cannot slow each other down.


def _inputs(capacity: int) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    steps = capacity // E
    return {
        "steps": steps,
        "obs": rng.random((64, E, 4), np.float32),
        "prio": np.abs(rng.normal(size=(64, BATCH))),
    }


_SHIFT = 61 * np.arange(E)


def _ends(step: int) -> Array:
    ends: Array = ((step + _SHIFT) % EPISODE) == EPISODE - 1
    return ends


def _time_iterations(step: Callable[[int], None], seconds: float) -> float:
    for i in range(20):  # warm-up
        step(i)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(50):
            step(n)
            n += 1
    return n / (time.perf_counter() - t0)


def worker_rlreplay(capacity: int, seconds: float) -> dict[str, Any]:
    import rlreplay as rr

    fields = {"obs": rr.Field((4,), np.float32), "action": rr.Field((), np.int64)}

    def make(cap: int) -> rr.PrioritizedReplayBuffer:
        return rr.PrioritizedReplayBuffer(
            cap, fields, num_envs=E, alpha=ALPHA, beta=BETA, seed=0
        )  # fmt: skip

    inp = _inputs(capacity)
    act, rew = np.zeros(E, np.int64), np.ones(E, np.float32)
    trunc = np.zeros(E, bool)

    def fill(buf: rr.PrioritizedReplayBuffer, steps: int) -> None:
        obs = inp["obs"]
        for i in range(steps):
            o = obs[i & 63]
            buf.add(obs=o, action=act, reward=rew, terminated=_ends(i), truncated=trunc,
                    next_obs=o)  # fmt: skip

    fill(make(E * 64), 200)  # warm-up: Numba kernels load from cache, code paths get hot
    buf = make(capacity)
    t0 = time.perf_counter()
    fill(buf, inp["steps"])
    fill_rate = inp["steps"] * E / (time.perf_counter() - t0)

    def step(i: int) -> None:
        batch = buf.sample(BATCH)
        _ = batch.weights
        buf.update_priorities(batch.ids, inp["prio"][i & 63])

    return {"fill": fill_rate, "iteration": _time_iterations(step, seconds)}


def worker_cpprb(capacity: int, seconds: float) -> dict[str, Any]:
    import cpprb

    env_dict = {
        "obs": {"shape": 4, "dtype": np.float32},
        "act": {"dtype": np.int64},
        "rew": {"dtype": np.float32},
        "done": {"dtype": np.float32},
    }

    def make(cap: int) -> Any:
        return cpprb.PrioritizedReplayBuffer(cap, env_dict, alpha=ALPHA, next_of="obs")

    inp = _inputs(capacity)
    act, rew = np.zeros(E, np.int64), np.ones(E, np.float32)

    def fill(buf: Any, steps: int) -> None:
        obs = inp["obs"]
        for i in range(steps):
            o = obs[i & 63]
            buf.add(obs=o, act=act, rew=rew, next_obs=o, done=_ends(i).astype(np.float32))

    fill(make(E * 64), 200)
    buf = make(capacity)
    t0 = time.perf_counter()
    fill(buf, inp["steps"])
    fill_rate = inp["steps"] * E / (time.perf_counter() - t0)

    def step(i: int) -> None:
        s = buf.sample(BATCH, beta=BETA)
        _ = s["weights"]
        buf.update_priorities(s["indexes"], inp["prio"][i & 63])

    return {"fill": fill_rate, "iteration": _time_iterations(step, seconds)}


def worker_tianshou(capacity: int, seconds: float) -> dict[str, Any]:
    from tianshou.data import Batch, PrioritizedVectorReplayBuffer

    def make(cap: int) -> Any:
        return PrioritizedVectorReplayBuffer(
            cap, E, alpha=ALPHA, beta=BETA, ignore_obs_next=True
        )  # fmt: skip

    inp = _inputs(capacity)
    act, rew = np.zeros(E, np.int64), np.ones(E, np.float32)
    trunc, ids = np.zeros(E, bool), np.arange(E)

    def fill(buf: Any, steps: int) -> None:
        obs = inp["obs"]
        for i in range(steps):
            o = obs[i & 63]
            b = Batch(obs=o, act=act, rew=rew, terminated=_ends(i), truncated=trunc,
                      obs_next=o, info={})  # fmt: skip
            buf.add(b, buffer_ids=ids)

    fill(make(E * 64), 200)
    buf = make(capacity)
    t0 = time.perf_counter()
    fill(buf, inp["steps"])
    fill_rate = inp["steps"] * E / (time.perf_counter() - t0)

    def step(i: int) -> None:
        batch, indices = buf.sample(BATCH)
        _ = batch.weight
        buf.update_weight(indices, inp["prio"][i & 63])

    return {"fill": fill_rate, "iteration": _time_iterations(step, seconds)}


WORKERS: dict[str, Callable[[int, float], dict[str, Any]]] = {
    "rlreplay": worker_rlreplay,
    "cpprb": worker_cpprb,
    "tianshou": worker_tianshou,
}
IMPORTS = {"rlreplay": "rlreplay", "cpprb": "cpprb", "tianshou": "tianshou.data"}


def _threads() -> dict[str, Any]:
    """Thread counts that can change the figures (read in the worker, after its imports)."""
    out: dict[str, Any] = {
        k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
    }
    numba = sys.modules.get("numba")
    if numba is not None:
        out["numba"] = numba.config.NUMBA_NUM_THREADS
    torch = sys.modules.get("torch")
    if torch is not None:
        out["torch"] = torch.get_num_threads()
    return {k: v for k, v in out.items() if v is not None}


def run_worker(lib: str, capacity: int, seconds: float) -> None:
    from importlib.metadata import PackageNotFoundError, version

    result = WORKERS[lib](capacity, seconds)
    try:
        result["version"] = version(lib)
    except PackageNotFoundError:
        result["version"] = "?"
    result["threads"] = _threads()
    print(json.dumps(result))


# ---------------------------------------------------------------------------- driver


def _available(lib: str) -> str | None:
    """``None`` if ``lib`` imports in a fresh interpreter, else the reason it does not."""
    proc = subprocess.run(
        [sys.executable, "-c", f"import {IMPORTS[lib]}"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode == 0:
        return None
    lines = proc.stderr.strip().splitlines()
    return lines[-1] if lines else f"import {IMPORTS[lib]} failed"


def measure(lib: str, capacity: int, seconds: float, timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--worker", lib, "--capacity", str(capacity)]
    cmd += ["--seconds", str(seconds)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        return {"error": lines[-1] if lines else f"exit code {proc.returncode}"}
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def summarise(runs: list[dict[str, Any]], key: str) -> dict[str, float]:
    values = [r[key] for r in runs]
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacity", type=int, default=1_000_000)
    parser.add_argument("--seconds", type=float, default=3.0, help="iteration timing per run")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per library")
    parser.add_argument("--timeout", type=float, default=900.0, help="per run, seconds")
    parser.add_argument("--libs", default=",".join(LIBS), help="comma-separated subset")
    parser.add_argument("--quick", action="store_true", help="capacity 100,000, 1 repeat")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--worker", choices=LIBS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        run_worker(args.worker, args.capacity, args.seconds)
        return
    if args.quick:
        args.capacity, args.repeats, args.seconds = 100_000, 1, 1.0

    results: dict[str, Any] = {}
    for lib in args.libs.split(","):
        reason = _available(lib)
        if reason is not None:
            print(f"skipping {lib}: not importable ({reason})", flush=True)
            results[lib] = {"skipped": reason}
            continue
        runs = []
        for r in range(args.repeats):
            print(f"{lib}: run {r + 1}/{args.repeats} ...", flush=True)
            out = measure(lib, args.capacity, args.seconds, args.timeout)
            if "error" in out:
                print(f"  {lib} failed: {out['error']}", flush=True)
                results[lib] = {"skipped": out["error"]}
                break
            runs.append(out)
        if runs:
            results[lib] = {
                "fill": summarise(runs, "fill"),
                "iteration": summarise(runs, "iteration"),
                "version": runs[0]["version"],
                "threads": runs[0]["threads"],
                "repeats": len(runs),
            }

    print()
    print(
        f"Prioritized replay, capacity {args.capacity:,}, alpha {ALPHA}, beta {BETA}, "
        f"batch {BATCH}, {E} envs; {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, numpy {np.__version__}"
    )
    print()
    libs = [lib for lib in results if "skipped" not in results[lib]]
    header = "| workload | " + " | ".join(f"{lib} {results[lib]['version']}" for lib in libs)
    print(header + " |")
    print("|---|" + "---|" * len(libs))
    rows = {"16-env fill (transitions/s)": "fill", "sample 256 + update 256 (it/s)": "iteration"}
    for label, key in rows.items():
        base = results.get("rlreplay", {}).get(key, {}).get("median")
        cells = []
        for lib in libs:
            s = results[lib][key]
            cell = f"{s['median']:,.0f} ({s['min']:,.0f}-{s['max']:,.0f})"
            if base and lib != "rlreplay":
                cell += f", rlreplay is {base / s['median']:.2f}x"
            cells.append(cell)
        print(f"| {label} | " + " | ".join(cells) + " |")
    print()
    print("Cells: median of repeats (min-max). Threads per library:")
    for lib in libs:
        print(f"  {lib}: {results[lib]['threads']}")
    for lib, r in results.items():
        if "skipped" in r:
            print(f"  {lib}: skipped ({r['skipped']})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"capacity": args.capacity, "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
