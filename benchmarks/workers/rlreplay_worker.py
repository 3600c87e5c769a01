"""rlreplay: ``ReplayBuffer`` / ``PrioritizedReplayBuffer`` through their public verbs.

Per-step ``add`` with keyword fields (full input validation on every call; a 16-env buffer
compiles its lockstep kernel on a small twin first, untimed, as Numba kernels are for Atari),
``sample``, ``sample_sequences`` and ``update_priorities``. Frames are stored once
(``frame_stack=4``); next observations come from the following step. Fills that are not timed
use ``extend``.
"""

from __future__ import annotations

from typing import Any

import harness as h
import numpy as np

CHUNK = 256  # steps per timing chunk (divides POOL)
VCHUNK = 64  # 16-env steps per timing chunk


def version() -> str:
    import rlreplay as rr

    return f"rlreplay {rr.__version__}"


def _fields(obs_shape: tuple[int, ...], dtype: Any) -> dict[str, Any]:
    import rlreplay as rr

    return {"obs": rr.Field(obs_shape, dtype), "action": rr.Field((), np.int64)}


def _add_steps(buf: Any, st: h.Steps, chunk: int) -> Any:
    obs, act, rew, done = st.obs, st.action, st.reward, st.done

    def run(i: int) -> int:
        base = (i * chunk) & h.MASK
        for j in range(base, base + chunk):
            buf.add(
                obs=obs[j], action=act[j], reward=rew[j], next_obs=obs[j + 1],
                terminated=done[j], truncated=False,
            )  # fmt: skip
        return chunk

    return run


def _add_vector(buf: Any, vs: h.VectorSteps, chunk: int) -> Any:
    no = np.zeros(h.NUM_ENVS, bool)

    def run(i: int) -> int:
        base = (i * chunk) & h.MASK
        for j in range(base, base + chunk):
            buf.add(
                obs=vs.obs[j], action=vs.action[j], reward=vs.reward[j], next_obs=vs.obs[j + 1],
                terminated=vs.done[j], truncated=no,
            )  # fmt: skip
        return chunk * h.NUM_ENVS

    return run


def single(sz: h.Sizes) -> dict[str, Any]:
    import rlreplay as rr

    st = h.single_steps((h.OBS_DIM,), np.float32)
    buf = rr.ReplayBuffer(sz.capacity, _fields((h.OBS_DIM,), np.float32), seed=0)
    add = h.timed_windows(_add_steps(buf, st, CHUNK), sz.repeats, sz.window)
    no = np.zeros(h.POOL, bool)
    while len(buf) < sz.single_fill:  # top-up, not timed
        buf.extend(
            obs=st.obs[:-1], action=st.action_arr, reward=st.reward_arr, next_obs=st.obs[1:],
            terminated=st.done_arr, truncated=no,
        )  # fmt: skip

    def sample(i: int) -> int:
        buf.sample(sz.batch)
        return sz.batch

    return {
        "add": add,
        "sample": h.timed_windows(sample, sz.repeats, sz.window),
        "info": {"stored": len(buf)},
    }


def _warm_vector_kernel(vs: h.VectorSteps) -> None:
    """Compile the lockstep kernel of this schema on a small twin, untimed (as for Atari).

    A vector buffer compiles it after its first 256 plain steps, which would otherwise fall in
    a timed window or fill segment (about 0.5 s with Numba's disk cache warm).
    """
    import rlreplay as rr
    import rlreplay.writing.lockstep

    warm = rr.ReplayBuffer(64, _fields((h.OBS_DIM,), np.float32), num_envs=h.NUM_ENVS)
    activate = rlreplay.writing.lockstep.ACTIVATE_AFTER
    _add_vector(warm, vs, 2 * activate)(0)  # some steps end episodes
    assert warm._writer.lockstep_kernel is not None


def vector(sz: h.Sizes) -> dict[str, Any]:
    import rlreplay as rr

    vs = h.vector_steps((h.OBS_DIM,))
    _warm_vector_kernel(vs)
    buf = rr.ReplayBuffer(
        sz.capacity, _fields((h.OBS_DIM,), np.float32), num_envs=h.NUM_ENVS, seed=0
    )
    return {"add": h.timed_windows(_add_vector(buf, vs, VCHUNK), sz.repeats, sz.window)}


def atari(sz: h.Sizes) -> dict[str, Any]:
    import rlreplay as rr

    st = h.single_steps(h.FRAME, np.uint8, end_p=1 / 1000)
    # Compile the Numba kernels on a small twin first: JIT memory is not the buffer's.
    warm = rr.ReplayBuffer(64, _fields(h.FRAME, np.uint8), frame_stack=h.STACK, seed=0)
    _add_steps(warm, st, 32)(0)
    warm.sample(2)
    del warm
    rss0 = h.rss_bytes()
    buf = rr.ReplayBuffer(
        sz.atari_capacity, _fields(h.FRAME, np.uint8), frame_stack=h.STACK, seed=0
    )
    fill = h.timed_segments(_add_steps(buf, st, 128), sz.atari_fill, sz.repeats)
    rss = h.rss_bytes() - rss0

    def sample(i: int) -> int:
        buf.sample(sz.atari_batch)
        return sz.atari_batch

    return {
        "fill": fill,
        "sample": h.timed_windows(sample, sz.repeats, sz.window),
        "memory": [rss],
        "info": {"stored": len(buf), "nbytes": buf.nbytes},
    }


def per(sz: h.Sizes) -> dict[str, Any]:
    import rlreplay as rr

    vs = h.vector_steps((h.OBS_DIM,))
    _warm_vector_kernel(vs)
    buf = rr.PrioritizedReplayBuffer(
        sz.capacity, _fields((h.OBS_DIM,), np.float32), alpha=sz.per_alpha, beta=sz.per_beta,
        num_envs=h.NUM_ENVS, seed=0,
    )  # fmt: skip
    fill = h.timed_segments(_add_vector(buf, vs, VCHUNK), sz.per_fill, sz.repeats)
    prios = np.abs(np.random.default_rng(2).normal(size=(64, sz.batch)))

    def iteration(i: int) -> int:
        for k in range(10):
            batch = buf.sample(sz.batch)
            buf.update_priorities(batch.ids, prios[(i * 10 + k) & 63])
        return 10

    return {
        "fill": fill,
        "iteration": h.timed_windows(iteration, sz.repeats, sz.window),
        "info": {"stored": len(buf)},
    }


def sequences(sz: h.Sizes) -> dict[str, Any]:
    import rlreplay as rr

    vs = h.vector_steps((h.SEQ_OBS_DIM,))
    buf = rr.ReplayBuffer(
        sz.capacity, _fields((h.SEQ_OBS_DIM,), np.float32), num_envs=h.NUM_ENVS, seed=0
    )
    add = _add_vector(buf, vs, VCHUNK)
    i = 0
    while len(buf) < sz.seq_fill:  # not timed
        add(i)
        i += 1

    def sample(i: int) -> int:
        buf.sample_sequences(sz.seq_batch, sz.seq_len)
        return sz.seq_batch

    return {
        "sample": h.timed_windows(sample, sz.repeats, sz.window),
        "info": {"stored": len(buf)},
    }


if __name__ == "__main__":
    raise SystemExit(
        h.main(
            "rlreplay",
            version,
            {f.__name__: f for f in (single, vector, atari, per, sequences)},
        )
    )
