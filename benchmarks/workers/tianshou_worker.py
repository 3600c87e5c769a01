"""Tianshou: ``ReplayBuffer`` / ``VectorReplayBuffer`` / ``PrioritizedVectorReplayBuffer``.

Each step is handed over as a ``tianshou.data.Batch`` (what its ``Collector`` builds), with
``ignore_obs_next=True`` everywhere (next observations are read from the following index).
Atari uses its documented Atari setting: ``stack_num=4, save_only_last_obs=True`` (only the
newest frame of each stack is stored; stacks are rebuilt at sample time). Sequences use
``stack_num=80``, Tianshou's way to feed recurrent policies: each sample is the 80 steps
*ending* at a drawn index, within its episode (earlier steps repeat the episode's first
observation); only observations are stacked. It has no bulk insert, so fills add per step.
"""

from __future__ import annotations

from typing import Any

import harness as h
import numpy as np

CHUNK = 256
VCHUNK = 64


def version() -> str:
    from importlib.metadata import version as v

    import tianshou  # noqa: F401 - fail here if it does not import

    return f"tianshou {v('tianshou')}"


def _add_steps(buf: Any, obs: Any, st: h.Steps, chunk: int) -> Any:
    from tianshou.data import Batch

    act, rew, done = st.action, st.reward, st.done

    def run(i: int) -> int:
        base = (i * chunk) & h.MASK
        for j in range(base, base + chunk):
            buf.add(Batch(obs=obs[j], act=act[j], rew=rew[j], terminated=done[j],
                          truncated=False, obs_next=obs[j + 1], info={}))  # fmt: skip
        return chunk

    return run


def _add_vector(buf: Any, vs: h.VectorSteps) -> Any:
    from tianshou.data import Batch

    ids = np.arange(h.NUM_ENVS)
    no = np.zeros(h.NUM_ENVS, bool)

    def run(i: int) -> int:
        base = (i * VCHUNK) & h.MASK
        for j in range(base, base + VCHUNK):
            buf.add(Batch(obs=vs.obs[j], act=vs.action[j], rew=vs.reward[j],
                          terminated=vs.done[j], truncated=no, obs_next=vs.obs[j + 1],
                          info={}), buffer_ids=ids)  # fmt: skip
        return VCHUNK * h.NUM_ENVS

    return run


def single(sz: h.Sizes) -> dict[str, Any]:
    from tianshou.data import ReplayBuffer

    st = h.single_steps((h.OBS_DIM,), np.float32)
    buf = ReplayBuffer(sz.capacity, ignore_obs_next=True)
    add_steps = _add_steps(buf, st.obs, st, CHUNK)
    add = h.timed_windows(add_steps, sz.repeats, sz.window)
    i = 0
    while len(buf) < sz.single_fill:  # top-up, not timed (per step: no bulk API)
        add_steps(i)
        i += 1

    def sample(i: int) -> int:
        buf.sample(sz.batch)
        return sz.batch

    return {
        "add": add,
        "sample": h.timed_windows(sample, sz.repeats, sz.window),
        "info": {"stored": len(buf)},
    }


def vector(sz: h.Sizes) -> dict[str, Any]:
    from tianshou.data import VectorReplayBuffer

    vs = h.vector_steps((h.OBS_DIM,))
    buf = VectorReplayBuffer(sz.capacity, h.NUM_ENVS, ignore_obs_next=True)
    return {"add": h.timed_windows(_add_vector(buf, vs), sz.repeats, sz.window)}


def atari(sz: h.Sizes) -> dict[str, Any]:
    from tianshou.data import ReplayBuffer

    st = h.single_steps(h.FRAME, np.uint8, end_p=1 / 1000)
    stacks = h.stacked_frames(st.obs)  # what its Atari wrapper hands the Collector
    kw = {"stack_num": h.STACK, "ignore_obs_next": True, "save_only_last_obs": True}
    warm = ReplayBuffer(64, **kw)
    _add_steps(warm, stacks, st, 32)(0)
    warm.sample(2)
    del warm
    rss0 = h.rss_bytes()
    buf = ReplayBuffer(sz.atari_capacity, **kw)
    fill = h.timed_segments(_add_steps(buf, stacks, st, 128), sz.atari_fill, sz.repeats)
    rss = h.rss_bytes() - rss0

    def sample(i: int) -> int:
        batch, _ = buf.sample(sz.atari_batch)
        batch.obs_next  # noqa: B018 - stacked next observations are built on access
        return sz.atari_batch

    return {
        "fill": fill,
        "sample": h.timed_windows(sample, sz.repeats, sz.window),
        "memory": [rss],
        "info": {"stored": len(buf)},
    }


def per(sz: h.Sizes) -> dict[str, Any]:
    from tianshou.data import PrioritizedVectorReplayBuffer

    vs = h.vector_steps((h.OBS_DIM,))
    buf = PrioritizedVectorReplayBuffer(
        sz.capacity, h.NUM_ENVS, alpha=sz.per_alpha, beta=sz.per_beta, ignore_obs_next=True
    )
    fill = h.timed_segments(_add_vector(buf, vs), sz.per_fill, sz.repeats)
    prios = np.abs(np.random.default_rng(2).normal(size=(64, sz.batch)))

    def iteration(i: int) -> int:
        for k in range(10):
            batch, indices = buf.sample(sz.batch)
            batch.weight  # noqa: B018 - the importance weights are part of the sample
            buf.update_weight(indices, prios[(i * 10 + k) & 63])
        return 10

    return {
        "fill": fill,
        "iteration": h.timed_windows(iteration, sz.repeats, sz.window),
        "info": {"stored": len(buf)},
    }


def sequences(sz: h.Sizes) -> dict[str, Any]:
    from tianshou.data import VectorReplayBuffer

    vs = h.vector_steps((h.SEQ_OBS_DIM,))
    buf = VectorReplayBuffer(sz.capacity, h.NUM_ENVS, stack_num=sz.seq_len, ignore_obs_next=True)
    add = _add_vector(buf, vs)
    i = 0
    while len(buf) < sz.seq_fill:  # not timed
        add(i)
        i += 1

    def sample(i: int) -> int:
        batch, _ = buf.sample(sz.seq_batch)
        batch.obs_next  # noqa: B018
        return sz.seq_batch

    return {
        "sample": h.timed_windows(sample, sz.repeats, sz.window),
        "info": {"stored": len(buf)},
    }


if __name__ == "__main__":
    raise SystemExit(
        h.main(
            "tianshou",
            version,
            {f.__name__: f for f in (single, vector, atari, per, sequences)},
        )
    )
