"""ReAgent and keras-gym front-ends against their originals: cost in a training loop.

A user switches from ReAgent's ``reagent.replay_memory`` (0.1) or keras-gym's
``keras_gym.caching.ExperienceReplayBuffer`` (0.2.17) to rlreplay's front-ends by changing one
import line; this script times what their training loop then calls, on both sides:

* **ReAgent** ``ReplayBuffer`` (circular) and ``PrioritizedReplayBuffer``, ``update_horizon``
  1 and 3, two experiences: **vec8** (float32 ``(8,)`` observations, ``stack_size=1``) and
  **atari84** (uint8 ``(84, 84)`` frames, ``stack_size=4``); episodes of 200 (vec8) and 500
  (atari84) steps. Rows: ``add`` (per step, filling a fresh buffer; the prioritized buffer
  gets ``priority=1.0``), ``sample(32)`` (``sample_transition_batch(batch_size=32)``, and
  for the prioritized buffer ``set_priority`` of the sampled indices) and ``loop`` (4 adds,
  then that sample; µs per iteration). The front-end's ``sample_transition_batch`` returns
  torch tensors (ReAgent's documented API; 0.1 returns NumPy arrays, its states a transposed view),
  which is what 0.1's ``sample_transition_batch_tensor`` returns: the circular buffer also
  has a ``sample_tensor(32)`` row timing that method on both sides.
* **keras-gym** ``ExperienceReplayBuffer``, ``bootstrap_n`` 1 and 3, a ``Discrete(4)``
  gymnasium-like env: **vec4** (float ``(4,)`` states, ``num_frames=1``) and **atari84**
  (uint8 ``(84, 84, 4)`` frame stacks, ``num_frames=4``, of which the last frame is stored);
  ``episode_id`` changes after ``done`` (episodes of 200 / 500 steps). Rows: ``add``,
  ``sample()`` (batch_size 32) and ``loop`` (4 adds + 1 sample).

Times are CPU time of this process (``time.process_time``: other load on the machine counts
less), in µs, the median of ``--repeats`` runs, the garbage collector off while timing (both
sides allocate alike). The samplers' draws differ between the libraries (keras-gym 0.2.17 draws
differently from the documented keras-gym loop the front-end follows), so only speed is
compared.

``--reagent-source DIR`` (the directory holding the ``reagent`` package, e.g. an unpacked
``reagent-0.1`` wheel) and ``--keras-gym-source DIR`` (the ``keras_gym`` package directory;
``gym`` is served by gymnasium) also time the originals, loaded from those source trees by
file; neither is ever a dependency: without the options only rlreplay is measured.

Run: ``python benchmarks/bench_compat_frontends.py [--quick] [--repeats 5] [--json out.json]
[--reagent-source DIR] [--keras-gym-source DIR]``.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import logging
import os
import statistics
import sys
import types
from collections.abc import Callable
from typing import Any

import numpy as np

# Kernels compile in the untimed warm-up, never in the background during a timed window.
os.environ.setdefault("RLREPLAY_BACKGROUND_COMPILE", "0")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_compat_nnabla_rl import _timed  # CPU time, the collector off

#: factories by library: ("reagent" | "reagent_prio" | "keras_gym") -> constructor
Makers = dict[str, Callable[..., Any]]
SAMPLE_ITERATIONS = (50, 200)  # (quick, full) samples per timed run


# ---------------------------------------------------------------- loading the originals
def _package(name: str, path: str) -> types.ModuleType:  # a package without its __init__
    module = types.ModuleType(name)
    module.__path__ = [path]
    module.__package__ = name
    sys.modules[name] = module
    return module


def _load_file(name: str, path: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_reagent(source: str) -> Makers:
    """ReAgent 0.1's two buffers from ``source/reagent/replay_memory`` (package stubbed)."""
    logging.getLogger().setLevel(logging.ERROR)
    if not hasattr(np, "bool"):  # ReAgent 0.1 reads np.bool (NumPy < 1.24 and >= 2.0 have it)
        setattr(np, "bool", np.bool_)  # noqa: B010
    root = os.path.join(source, "reagent")
    _package("reagent", root)
    _package("reagent.replay_memory", os.path.join(root, "replay_memory"))
    for mod in ("sum_tree", "circular_replay_buffer", "prioritized_replay_buffer"):
        _load_file(f"reagent.replay_memory.{mod}", os.path.join(root, "replay_memory", mod + ".py"))
    circular = sys.modules["reagent.replay_memory.circular_replay_buffer"]
    prioritized = sys.modules["reagent.replay_memory.prioritized_replay_buffer"]
    return {"reagent": circular.ReplayBuffer, "reagent_prio": prioritized.PrioritizedReplayBuffer}


def load_keras_gym(source: str) -> Makers:
    """keras-gym 0.2.17's ``ExperienceReplayBuffer`` from ``source`` (package stubbed)."""
    import gymnasium

    sys.modules.setdefault("gym", gymnasium)  # the only adaptation: gym -> gymnasium
    _package("keras_gym", source)
    _package("keras_gym.base", os.path.join(source, "base"))
    _load_file("keras_gym.base.errors", os.path.join(source, "base", "errors.py"))
    utils = _package("keras_gym.utils", os.path.join(source, "utils"))
    for mod in ("array", "misc"):
        loaded = _load_file(f"keras_gym.utils.{mod}", os.path.join(source, "utils", mod + ".py"))
        for name in getattr(loaded, "__all__", ()):
            setattr(utils, name, getattr(loaded, name))
    _load_file("keras_gym.base.mixins", os.path.join(source, "base", "mixins.py"))
    _package("keras_gym.caching", os.path.join(source, "caching"))
    er = _load_file(
        "keras_gym.caching.experience_replay",
        os.path.join(source, "caching", "experience_replay.py"),
    )
    return {"keras_gym": er.ExperienceReplayBuffer}


def rlreplay_makers() -> Makers:
    from rlreplay.compat.keras_gym import ExperienceReplayBuffer
    from rlreplay.compat.reagent import PrioritizedReplayBuffer, ReplayBuffer

    return {
        "reagent": ReplayBuffer,
        "reagent_prio": PrioritizedReplayBuffer,
        "keras_gym": ExperienceReplayBuffer,
    }


# ---------------------------------------------------------------- workloads
#: ReAgent experiences: name -> (observation shape, dtype, stack_size, episode length, capacity)
REAGENT_KINDS = {
    "vec8": ((8,), np.float32, 1, 200, 100_000),
    "atari84": ((84, 84), np.uint8, 4, 500, 10_000),
}


def reagent_steps(kind: str, n: int) -> list[tuple[Any, int, float, int]]:
    """``n`` ReAgent ``add`` arguments ``(observation, action, reward, terminal)``."""
    shape, dtype, _, episode, _ = REAGENT_KINDS[kind]
    rng = np.random.default_rng(0)
    if dtype == np.uint8:
        pool = [rng.integers(0, 255, shape, np.uint8) for _ in range(64)]
    else:
        pool = [rng.standard_normal(shape).astype(dtype) for _ in range(256)]
    return [
        (pool[t % len(pool)], t % 4, float(t % 7), int((t + 1) % episode == 0)) for t in range(n)
    ]


def make_reagent(makers: Makers, prio: bool, kind: str, horizon: int) -> Any:
    shape, dtype, stack, _, capacity = REAGENT_KINDS[kind]
    cls = makers["reagent_prio" if prio else "reagent"]
    return cls(
        observation_shape=shape,
        stack_size=stack,
        replay_capacity=capacity,
        batch_size=32,
        update_horizon=horizon,
        gamma=0.99,
        observation_dtype=dtype,
    )


def reagent_rows(
    makers: Makers, prio: bool, kind: str, horizon: int, n: int, iters: int
) -> dict[str, Callable[[], float]]:
    steps = reagent_steps(kind, n)
    extra = (1.0,) if prio else ()

    def add() -> float:
        buffer = make_reagent(makers, prio, kind, horizon)

        def run() -> int:
            for s in steps:
                buffer.add(*s, *extra)
            return len(steps)

        return _timed(run)

    def filled() -> Any:
        buffer = make_reagent(makers, prio, kind, horizon)
        for s in steps:
            buffer.add(*s, *extra)
        return buffer

    priorities = np.random.default_rng(1).random((iters, 32)).astype(np.float32) + 0.1

    def sample() -> float:
        buffer = filled()

        def run() -> int:
            for i in range(iters):
                batch = buffer.sample_transition_batch(batch_size=32)
                if prio:
                    buffer.set_priority(batch.indices, priorities[i])
            return iters

        return _timed(run)

    def sample_tensor() -> float:
        buffer = filled()

        def run() -> int:
            for _ in range(iters):
                buffer.sample_transition_batch_tensor(batch_size=32)
            return iters

        return _timed(run)

    def loop() -> float:
        buffer = filled()

        def run() -> int:
            k = 0
            for i in range(iters):
                for _ in range(4):
                    buffer.add(*steps[k % n], *extra)
                    k += 1
                batch = buffer.sample_transition_batch(batch_size=32)
                if prio:
                    buffer.set_priority(batch.indices, priorities[i])
            return iters

        return _timed(run)

    rows = {"add": add, "sample(32)" + ("+set_priority" if prio else ""): sample}
    if not prio:
        rows["sample_tensor(32)"] = sample_tensor
    rows["loop 4 adds+sample"] = loop
    return rows


#: keras-gym experiences: name -> (num_frames, episode length, capacity)
KERAS_KINDS = {"vec4": (1, 200, 100_000), "atari84": (4, 500, 10_000)}


class _Env:
    """The little of a gymnasium env keras-gym's buffer reads."""

    def __init__(self, num_frames: int) -> None:
        import gymnasium

        self.action_space = gymnasium.spaces.Discrete(4)
        self.num_frames = num_frames


def keras_steps(kind: str, n: int) -> list[tuple[Any, int, float, bool, int]]:
    """``n`` keras-gym ``add`` arguments ``(s, a, r, done, episode_id)`` of an env loop."""
    frames, episode, _ = KERAS_KINDS[kind]
    rng = np.random.default_rng(0)
    if frames > 1:
        pool = [rng.integers(0, 255, (84, 84, frames), np.uint8) for _ in range(64)]
    else:
        pool = [rng.standard_normal(4) for _ in range(256)]
    return [
        (pool[t % len(pool)], t % 4, float(t % 7), (t + 1) % episode == 0, t // episode)
        for t in range(n)
    ]


def keras_rows(
    makers: Makers, kind: str, bootstrap_n: int, n: int, iters: int
) -> dict[str, Callable[[], float]]:
    steps = keras_steps(kind, n)
    frames, _, capacity = KERAS_KINDS[kind]

    def make() -> Any:
        return makers["keras_gym"](
            _Env(frames), capacity, batch_size=32, bootstrap_n=bootstrap_n, random_seed=0
        )

    def add() -> float:
        buffer = make()

        def run() -> int:
            for s in steps:
                buffer.add(*s)
            return len(steps)

        return _timed(run)

    def filled() -> Any:
        buffer = make()
        for s in steps:
            buffer.add(*s)
        return buffer

    def sample() -> float:
        buffer = filled()

        def run() -> int:
            for _ in range(iters):
                buffer.sample()
            return iters

        return _timed(run)

    def loop() -> float:
        buffer = filled()
        last = steps[-1][4] + 1  # later episodes continue the ids

        def run() -> int:
            k = 0
            for _ in range(iters):
                for _ in range(4):
                    s, a, r, done, eid = steps[k % n]
                    buffer.add(s, a, r, done, eid + last * (1 + k // n))
                    k += 1
                buffer.sample()
            return iters

        return _timed(run)

    return {"add": add, "sample()": sample, "loop 4 adds+sample": loop}


# ---------------------------------------------------------------- driver
def measure(
    libs: dict[str, Makers], quick: bool, repeats: int, only: str | None = None
) -> list[dict[str, Any]]:
    iters = SAMPLE_ITERATIONS[0 if quick else 1]
    rows: list[dict[str, Any]] = []
    plans: list[tuple[str, str, Callable[..., dict[str, Callable[[], float]]]]] = []
    for prio in (False, True):
        for kind in REAGENT_KINDS:
            n = (4_000 if quick else 20_000) if kind == "vec8" else (2_000 if quick else 5_000)
            for horizon in (1, 3):
                name = f"reagent {'prioritized' if prio else 'circular'} {kind} n={horizon}"
                plan = functools.partial(reagent_rows, prio=prio, kind=kind, horizon=horizon, n=n)
                plans.append((name, "reagent", plan))
    for kind in KERAS_KINDS:
        n = (4_000 if quick else 20_000) if kind == "vec4" else (2_000 if quick else 5_000)
        for boot in (1, 3):
            kplan = functools.partial(keras_rows, kind=kind, bootstrap_n=boot, n=n)
            plans.append((f"keras-gym {kind} n={boot}", "keras_gym", kplan))
    for name, key, make_rows in plans:
        if only and only not in name:
            continue
        per_lib = {
            lib: make_rows(makers, iters=iters) for lib, makers in libs.items() if key in makers
        }
        for row_name in next(iter(per_lib.values())):
            row: dict[str, Any] = {"row": f"{name} {row_name}"}
            for lib, timers in per_lib.items():
                timers[row_name]()  # warm-up (Numba, caches)
                row[lib] = statistics.median(timers[row_name]() for _ in range(repeats))
            rows.append(row)
            print(report([row], list(libs), head=not rows[:-1]), flush=True)
    return rows


def report(rows: list[dict[str, Any]], libs: list[str], head: bool = True) -> str:
    cols = libs + (["ratio"] if len(libs) > 1 else [])
    lines = []
    if head:
        lines = [
            "| workload (µs, median CPU time) | " + " | ".join(cols) + " |",
            "|" + "---|" * (len(cols) + 1),
        ]
    for row in rows:
        cells = [f"{row[lib]:.1f}" if lib in row else "-" for lib in libs]
        if len(libs) > 1:
            both = all(lib in row for lib in libs)
            cells.append(f"{row[libs[0]] / row[libs[1]]:.2f}" if both else "-")
        lines.append(f"| {row['row']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps (a smoke run)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", help="write the rows to this file")
    parser.add_argument("--reagent-source", help="directory holding ReAgent's reagent package")
    parser.add_argument("--keras-gym-source", help="keras-gym's keras_gym package directory")
    parser.add_argument("--only", help="time only the row groups whose name contains this")
    args = parser.parse_args(argv)
    libs: dict[str, Makers] = {"rlreplay": rlreplay_makers()}
    original: Makers = {}
    if args.reagent_source:
        original.update(load_reagent(args.reagent_source))
    if args.keras_gym_source:
        original.update(load_keras_gym(args.keras_gym_source))
    if original:
        libs["original"] = original
    print(f"CPU time (time.process_time), median of {args.repeats} runs, quick={args.quick}")
    rows = measure(libs, args.quick, args.repeats, args.only)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "repeats": args.repeats, "quick": args.quick}, f, indent=1)


if __name__ == "__main__":
    main()
