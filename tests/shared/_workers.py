"""Writer processes for the shared-memory tests (importable by spawned children)."""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

import rlreplay as rr

EPISODE = 37  # every 37th step of an env terminates; every 53rd is truncated


def step_values(e: int, t: int) -> dict[str, Any]:
    """What a writer of env ``e`` stores at its step ``t`` (recomputable by the checks)."""
    return {
        "obs": np.array([e, t], np.float64),
        "action": np.int64(t % 5),
        "reward": float(t),
        "terminated": t % EPISODE == EPISODE - 1,
        "truncated": t % 53 == 52,
        "next_obs": np.array([-e, -t], np.float64),
    }


def write_steps(handle: rr.SharedHandle, e: int, start: int, n: int, ready: Any = None) -> None:
    """Attach, write steps ``start .. start+n-1`` of env ``e`` (one env owned), close."""
    w = rr.attach(handle, timeout=10.0)
    if ready is not None:
        ready.set()
    for t in range(start, start + n):
        w.add(**step_values(e, t))
    w.close()


def write_forever(handle: rr.SharedHandle, e: int, counter: Any, chunks: bool = False) -> None:
    """Attach and write env ``e`` until killed; ``counter.value`` = steps written so far.

    With ``chunks``, ``extend`` runs of 1 to 20 steps (seeded by the env and the start step).
    """
    w = rr.attach(handle, timeout=10.0)
    t = w.next_step(e)
    rng = np.random.default_rng([e, t])
    while True:
        n = int(rng.integers(1, 21)) if chunks else 1
        if chunks:
            vals = [step_values(e, s) for s in range(t, t + n)]
            w.extend(env_id=e, **{k: np.stack([np.asarray(v[k]) for v in vals]) for k in vals[0]})
        else:
            w.add(**step_values(e, t))
        t += n
        counter.value = t


def hold(handle: rr.SharedHandle, ready: Any) -> None:
    """Attach and sleep until killed (an env held by a live process)."""
    rr.attach(handle)
    ready.set()
    while True:
        time.sleep(1.0)


def pid() -> int:
    return os.getpid()


OWNER_SCRIPT = """
import multiprocessing as mp, sys, time
import numpy as np
import rlreplay as rr
from tests.shared._workers import write_forever

if __name__ == "__main__":
    buf = rr.ReplayBuffer(64, {"obs": rr.Field((2,), np.float64), "action": rr.Field((), np.int64)},
                          num_envs=2, storage="shared")
    ctx = mp.get_context("spawn")
    counters = [ctx.Value("q", 0, lock=False) for _ in range(2)]
    procs = [ctx.Process(target=write_forever, args=(buf.share([e]), e, counters[e]))
             for e in range(2)]
    for p in procs:
        p.start()
    while min(c.value for c in counters) == 0:
        time.sleep(0.01)
    print(buf._backend.token, " ".join(str(p.pid) for p in procs), flush=True)
    while True:
        if buf.num_sampleable:
            buf.sample(8)
        time.sleep(0.001)
"""
