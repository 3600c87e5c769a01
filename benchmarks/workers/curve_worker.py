"""One cell of the cost curves (``benchmarks/curves.py``): one library in one setup, one
operation, one stored size; prints one JSON line ``{"us": {label: [per-call µs, ...]}}``.

Run: ``python curve_worker.py --lib L --setup S --op OP --size N [--batches B ...]
[--repeats R] [--window SECONDS] [--timer wall|cpu]``. Each label's list holds ``repeats``
window means (µs per call); ``curves.py`` takes their median. The buffer is built with
capacity ``N`` and filled to ``N`` transitions (Atari: frames) through the library's bulk API
where it has one (the fill is not timed), then the operation is timed. Inputs come from
:mod:`harness` (the pools ``run.py`` uses), and each library is driven as its worker
(``<lib>_worker.py``) drives it.

Setups: ``fast`` is the library's fastest documented setup for the operation, ``memory`` its
memory-saving one (cpprb: ``next_obs`` stored explicitly vs ``next_of="obs"`` plus
``stack_compress`` for Atari; SB3: ``optimize_memory_usage`` off vs on); libraries with one
setup use ``default``; rlreplay also runs ``memmap`` (``storage="memmap"``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

import harness as h
import numpy as np

# Kernels compile in the untimed warm-up, never in the background during a timed window.
os.environ.setdefault("RLREPLAY_BACKGROUND_COMPILE", "0")


Array = np.ndarray[Any, Any]
CHUNK = h.POOL


# The clock of a window: wall time, or this process's CPU time (``--timer cpu``: on a busy
# machine a descheduled worker does not count the time other processes ran).
CLOCK = time.perf_counter


def timed(call: Callable[[], Any], repeats: int, window: float) -> list[float]:
    """Per-call µs of ``repeats`` windows (one untimed warm-up call first).

    Cheap calls run in chunks of 8 between clock reads; a call that takes more than an
    eighth of a window (slow peers: milliseconds) is timed one at a time, so that a window
    lasts about ``window`` seconds whatever the call costs.
    """
    clock = CLOCK
    t0 = clock()
    call()
    chunk = 1 if clock() - t0 > window / 8 else 8
    out = []
    for _ in range(repeats):
        n = 0
        t0 = clock()
        while True:
            for _ in range(chunk):
                call()
            n += chunk
            elapsed = clock() - t0
            if elapsed >= window:
                break
        out.append(elapsed / n * 1e6)
    return out


# ---------------------------------------------------------------------- rlreplay
def _rr(setup: str, size: int, obs_shape: tuple[int, ...], dtype: Any, **kw: Any) -> Any:
    import rlreplay as rr

    fields = {"obs": rr.Field(obs_shape, dtype), "action": rr.Field((), np.int64)}
    if setup == "memmap":
        kw["storage"] = "memmap"
        kw["path"] = tempfile.mkdtemp(prefix="rlreplay-curve-")
    return rr.ReplayBuffer(size, fields, seed=0, **kw)


def _rr_fill(buf: Any, st: h.Steps, size: int) -> None:
    no = np.zeros(h.POOL, bool)
    while len(buf) < size:
        k = min(h.POOL, size - len(buf))
        buf.extend(
            obs=st.obs[:k], action=st.action_arr[:k], reward=st.reward_arr[:k],
            next_obs=st.obs[1 : k + 1], terminated=st.done_arr[:k], truncated=no[:k],
        )  # fmt: skip


def rlreplay_cell(setup: str, op: str, size: int, batches: list[int], sz: Any) -> dict[str, Any]:
    import rlreplay as rr

    out: dict[str, list[float]] = {}
    if op == "atari":
        st = h.single_steps(h.FRAME, np.uint8, end_p=1 / 1000)
        buf = _rr(setup, size, h.FRAME, np.uint8, frame_stack=h.STACK)
        _rr_fill(buf, st, size)
        for b in batches:
            out[f"B={b}"] = timed(lambda b=b: buf.sample(b), sz.repeats, sz.window)
        return out
    if op in ("sample", "add"):
        st = h.single_steps((h.OBS_DIM,), np.float32)
        buf = _rr(setup, size, (h.OBS_DIM,), np.float32)
        _rr_fill(buf, st, size)
        if op == "sample":
            for b in batches:
                out[f"B={b}"] = timed(lambda b=b: buf.sample(b), sz.repeats, sz.window)
            return out
        i = [0]
        o, a, r, d = st.obs, st.action, st.reward, st.done

        def add1() -> None:
            j = i[0] = (i[0] + 1) & h.MASK
            buf.add(obs=o[j], action=a[j], reward=r[j], next_obs=o[j + 1], terminated=d[j],
                    truncated=False)  # fmt: skip

        out["1 env"] = timed(add1, sz.repeats, sz.window)
        vs = h.vector_steps((h.OBS_DIM,))
        vbuf = _rr(setup, size, (h.OBS_DIM,), np.float32, num_envs=h.NUM_ENVS)
        no = np.zeros(h.NUM_ENVS, bool)

        def add16() -> None:
            j = i[0] = (i[0] + 1) & h.MASK
            vbuf.add(obs=vs.obs[j], action=vs.action[j], reward=vs.reward[j],
                     next_obs=vs.obs[j + 1], terminated=vs.done[j], truncated=no)  # fmt: skip

        for _ in range(-(-size // h.NUM_ENVS)):  # fill, not timed (compiles the lockstep kernel)
            add16()
        out["16 envs"] = timed(add16, sz.repeats, sz.window)
        return out
    if op == "per":
        st = h.single_steps((h.OBS_DIM,), np.float32)
        fields = {"obs": rr.Field((h.OBS_DIM,), np.float32), "action": rr.Field((), np.int64)}
        buf = rr.PrioritizedReplayBuffer(size, fields, alpha=0.6, beta=0.4, seed=0)
        _rr_fill(buf, st, size)
        prios = np.abs(np.random.default_rng(2).normal(size=(64, 256))) + 1e-3
        k = [0]

        def it() -> None:
            batch = buf.sample(256)
            k[0] = (k[0] + 1) & 63
            buf.update_priorities(batch.ids, prios[k[0]])

        return {"B=256": timed(it, sz.repeats, sz.window)}
    if op == "sequences":
        st = h.single_steps((h.OBS_DIM,), np.float32)
        buf = _rr(setup, size, (h.OBS_DIM,), np.float32)
        _rr_fill(buf, st, size)
        return {"32x80": timed(lambda: buf.sample_sequences(32, 80), sz.repeats, sz.window)}
    raise h.Unavailable(f"no operation {op}")


# ---------------------------------------------------------------------- cpprb
def cpprb_cell(setup: str, op: str, size: int, batches: list[int], sz: Any) -> dict[str, Any]:
    import cpprb

    if op == "sequences":
        raise h.Unavailable("no sequence sampling in cpprb")
    explicit = setup == "fast"
    out: dict[str, list[float]] = {}
    if op == "atari":
        st = h.single_steps(h.FRAME, np.uint8, end_p=1 / 1000)
        stacks = np.ascontiguousarray(np.moveaxis(h.stacked_frames(st.obs), 1, -1))
        env = {"obs": {"shape": (*h.FRAME, h.STACK), "dtype": np.uint8},
               "act": {"dtype": np.int64}, "rew": {}, "done": {}}  # fmt: skip
        if explicit:
            env["next_obs"] = {"shape": (*h.FRAME, h.STACK), "dtype": np.uint8}
            rb = cpprb.ReplayBuffer(size, env)
        else:
            rb = cpprb.ReplayBuffer(size, env, next_of="obs", stack_compress="obs")
        k = 512
        while rb.get_stored_size() < size:
            rb.add(obs=stacks[:k], act=st.action_arr[:k], rew=st.reward_arr[:k],
                   next_obs=stacks[1 : k + 1], done=st.done_arr[:k])  # fmt: skip
            rb.on_episode_end()
        for b in batches:
            out[f"B={b}"] = timed(lambda b=b: rb.sample(b), sz.repeats, sz.window)
        return out
    st = h.single_steps((h.OBS_DIM,), np.float32)
    env = {"obs": {"shape": h.OBS_DIM, "dtype": np.float32}, "act": {"dtype": np.int64},
           "rew": {}, "done": {}}  # fmt: skip
    kw: dict[str, Any] = {}
    if explicit or op == "add16":
        env["next_obs"] = {"shape": h.OBS_DIM, "dtype": np.float32}
    else:
        kw["next_of"] = "obs"
    if op == "per":
        rb = cpprb.PrioritizedReplayBuffer(size, env, alpha=0.6, **kw)
    else:
        rb = cpprb.ReplayBuffer(size, env, **kw)
    while rb.get_stored_size() < size:
        k = min(h.POOL, size - rb.get_stored_size())
        rb.add(obs=st.obs[:k], act=st.action_arr[:k], rew=st.reward_arr[:k],
               next_obs=st.obs[1 : k + 1], done=st.done_arr[:k])  # fmt: skip
        rb.on_episode_end()
    if op == "sample":
        for b in batches:
            out[f"B={b}"] = timed(lambda b=b: rb.sample(b), sz.repeats, sz.window)
        return out
    if op == "per":
        prios = np.abs(np.random.default_rng(2).normal(size=(64, 256))) + 1e-3
        c = [0]

        def it() -> None:
            batch = rb.sample(256, beta=0.4)
            c[0] = (c[0] + 1) & 63
            rb.update_priorities(batch["indexes"], prios[c[0]])

        return {"B=256": timed(it, sz.repeats, sz.window)}
    if op == "add":
        i = [0]
        o, a, r, d = st.obs, st.action, st.reward, st.done

        def add1() -> None:
            j = i[0] = (i[0] + 1) & h.MASK
            rb.add(obs=o[j], act=a[j], rew=r[j], next_obs=o[j + 1], done=d[j])
            if d[j]:
                rb.on_episode_end()

        out["1 env"] = timed(add1, sz.repeats, sz.window)
        if explicit:  # next_of needs one episode's steps in order: 16 envs store next_obs
            vs = h.vector_steps((h.OBS_DIM,))

            def add16() -> None:
                j = i[0] = (i[0] + 1) & h.MASK
                rb.add(obs=vs.obs[j], act=vs.action[j], rew=vs.reward[j],
                       next_obs=vs.obs[j + 1], done=vs.done[j])  # fmt: skip

            out["16 envs"] = timed(add16, sz.repeats, sz.window)
        return out
    raise h.Unavailable(f"no operation {op}")


# ---------------------------------------------------------------------- the NumPy limit
def numpy_cell(setup: str, op: str, size: int, batches: list[int], sz: Any) -> dict[str, Any]:
    import numpy_limit_worker as nl

    rng = np.random.default_rng(0)
    out: dict[str, list[float]] = {}
    if op == "atari":
        st = h.single_steps(h.FRAME, np.uint8, end_p=1 / 1000)
        buf = nl.Flat(size, h.FRAME, np.uint8)
        while buf.size < size:
            k = min(h.POOL, size - buf.size)
            buf.add_rows(st.obs[:k], st.action_arr[:k], st.reward_arr[:k], st.done_arr[:k])
        offsets = np.arange(1 - h.STACK, 1)

        def atari(b: int) -> None:
            idx = rng.integers(0, buf.size, b)
            stack = (idx[:, None] + offsets) % buf.n
            buf.obs[stack], buf.obs[(stack + 1) % buf.n]
            buf.action[idx], buf.reward[idx], buf.done[idx]

        for b in batches:
            out[f"B={b}"] = timed(lambda b=b: atari(b), sz.repeats, sz.window)
        return out
    st = h.single_steps((h.OBS_DIM,), np.float32)
    buf = nl.Flat(size, (h.OBS_DIM,), np.float32)
    while buf.size < size:
        k = min(h.POOL, size - buf.size)
        buf.add_rows(st.obs[:k], st.action_arr[:k], st.reward_arr[:k], st.done_arr[:k])
    if op == "sample":
        for b in batches:
            out[f"B={b}"] = timed(
                lambda b=b: buf.gather(rng.integers(0, buf.size, b)), sz.repeats, sz.window
            )
        return out
    if op == "add":
        i = [0]
        o, a, r, d = st.obs, st.action, st.reward, st.done

        def add1() -> None:
            j = i[0] = (i[0] + 1) & h.MASK
            buf.add(o[j], a[j], r[j], d[j])

        out["1 env"] = timed(add1, sz.repeats, sz.window)
        vs = h.vector_steps((h.OBS_DIM,))
        cols = nl._env_rings(max(size, h.NUM_ENVS), (h.OBS_DIM,))
        run = nl._vector_add(cols, vs, [0, 0])  # 64 steps of 16 envs per call
        out["16 envs"] = [x / nl.VCHUNK for x in timed(lambda: run(i[0]), sz.repeats, sz.window)]
        return out
    if op == "sequences":
        offsets = np.arange(80)

        def seq() -> None:
            t = (rng.integers(0, buf.size - 80, 32)[:, None] + offsets) % buf.n
            buf.obs[t], buf.action[t], buf.reward[t], buf.done[t], buf.obs[(t + 1) % buf.n]

        return {"32x80": timed(seq, sz.repeats, sz.window)}
    if op == "per":
        tree = nl.SumMinTree(size)
        tree.set(np.arange(size), np.ones(size))
        prios = np.abs(rng.normal(size=(64, 256))) + 1e-6
        c = [0]

        def it() -> None:
            total = tree.sum[1]
            u = (np.arange(256) + rng.random(256)) * (total / 256)
            leaf = tree.find(u)
            p = tree.sum[leaf + tree.size] / total
            _ = ((tree.min[1] / total) / p) ** 0.4
            buf.gather(leaf)
            c[0] = (c[0] + 1) & 63
            unique, first = np.unique(leaf, return_index=True)
            tree.set(unique, prios[c[0]][first] ** 0.6)

        return {"B=256": timed(it, sz.repeats, sz.window)}
    raise h.Unavailable(f"no operation {op}")


CELLS: dict[str, Callable[[str, str, int, list[int], Any], dict[str, Any]]] = {
    "rlreplay": rlreplay_cell,
    "cpprb": cpprb_cell,
    "numpy-limit": numpy_cell,
}


def main() -> int:
    p = argparse.ArgumentParser(description="one cost-curve cell")
    p.add_argument("--lib", required=True)
    p.add_argument("--setup", default="default")
    p.add_argument("--op", required=True)
    p.add_argument("--size", type=int, required=True)
    p.add_argument("--batches", type=int, nargs="*", default=[32])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--window", type=float, default=0.2)
    p.add_argument("--timer", choices=("wall", "cpu"), default="wall")
    a = p.parse_args()
    global CLOCK
    CLOCK = time.process_time if a.timer == "cpu" else time.perf_counter
    sz = argparse.Namespace(repeats=a.repeats, window=a.window)
    result: dict[str, Any] = {"lib": a.lib, "setup": a.setup, "op": a.op, "size": a.size}
    try:
        if a.lib in CELLS:
            cell = CELLS[a.lib]
        else:
            import peer_curves

            cell = peer_curves.CELLS[a.lib]
        result["us"] = cell(a.setup, a.op, a.size, a.batches, sz)
    except h.Unavailable as exc:
        result["unavailable"] = str(exc)
    except MemoryError:
        result["unavailable"] = "does not fit in memory"
    except ImportError as exc:
        result["unavailable"] = f"not importable ({exc})"[:200]
    except Exception as exc:
        result["unavailable"] = f"failed: {type(exc).__name__}: {exc}"[:300]
        traceback.print_exc(file=sys.stderr)
    result["threads"] = h.thread_counts()
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
