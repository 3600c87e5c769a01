"""Stable-Baselines3: ``stable_baselines3.common.buffers.ReplayBuffer`` as its DQN/SAC use it.

``optimize_memory_usage=True`` (next observations are read from the following row) on every
row, ``device="cpu"``, one ``add(obs, next_obs, action, reward, done, infos)`` per vector-env
step with ``(n_envs, ...)`` arrays, which is what its ``VecEnv`` hands over. Frame stacks come
from its ``VecFrameStack`` wrapper, so Atari rows store whole ``(4, 84, 84)`` stacks. Samples
are its ``ReplayBufferSamples`` of torch tensors. It has no prioritized buffer and no
sequence sampling. It has no bulk insert, so fills add per step.
"""

from __future__ import annotations

from typing import Any

import harness as h
import numpy as np

CHUNK = 256
VCHUNK = 64


def version() -> str:
    import stable_baselines3

    return f"stable-baselines3 {stable_baselines3.__version__}"


def _buffer(capacity: int, obs_space: Any, n_envs: int = 1) -> Any:
    import gymnasium as gym
    from stable_baselines3.common.buffers import ReplayBuffer

    return ReplayBuffer(
        capacity, obs_space, gym.spaces.Discrete(6), device="cpu", n_envs=n_envs,
        optimize_memory_usage=True, handle_timeout_termination=False,
    )  # fmt: skip


def _add_steps(buf: Any, obs: Any, st: h.Steps, chunk: int) -> Any:
    # A one-env VecEnv's step: arrays with a leading axis of 1 (views, no copies).
    act = st.action_arr[:, None]
    rew, done = st.reward_arr[:, None], st.done_arr[:, None]
    infos: list[dict[str, Any]] = [{}]

    def run(i: int) -> int:
        base = (i * chunk) & h.MASK
        for j in range(base, base + chunk):
            buf.add(obs[j : j + 1], obs[j + 1 : j + 2], act[j], rew[j], done[j], infos)
        return chunk

    return run


def _add_vector(buf: Any, vs: h.VectorSteps) -> Any:
    infos: list[dict[str, Any]] = [{} for _ in range(h.NUM_ENVS)]

    def run(i: int) -> int:
        base = (i * VCHUNK) & h.MASK
        for j in range(base, base + VCHUNK):
            buf.add(vs.obs[j], vs.obs[j + 1], vs.action[j], vs.reward[j], vs.done[j], infos)
        return VCHUNK * h.NUM_ENVS

    return run


def _box(shape: tuple[int, ...], dtype: Any) -> Any:
    import gymnasium as gym

    if np.dtype(dtype) == np.uint8:
        return gym.spaces.Box(0, 255, shape, np.uint8)
    return gym.spaces.Box(-np.inf, np.inf, shape, np.float32)


def single(sz: h.Sizes) -> dict[str, Any]:
    st = h.single_steps((h.OBS_DIM,), np.float32)
    buf = _buffer(sz.capacity, _box((h.OBS_DIM,), np.float32))
    add_steps = _add_steps(buf, st.obs, st, CHUNK)
    add = h.timed_windows(add_steps, sz.repeats, sz.window)
    i = 0
    while buf.size() < sz.single_fill:  # top-up, not timed (per step: no bulk API)
        add_steps(i)
        i += 1

    def sample(i: int) -> int:
        buf.sample(sz.batch)
        return sz.batch

    return {
        "add": add,
        "sample": h.timed_windows(sample, sz.repeats, sz.window),
        "info": {"stored": buf.size()},
    }


def vector(sz: h.Sizes) -> dict[str, Any]:
    vs = h.vector_steps((h.OBS_DIM,))
    buf = _buffer(sz.capacity, _box((h.OBS_DIM,), np.float32), n_envs=h.NUM_ENVS)
    return {"add": h.timed_windows(_add_vector(buf, vs), sz.repeats, sz.window)}


def atari(sz: h.Sizes) -> dict[str, Any]:
    st = h.single_steps(h.FRAME, np.uint8, end_p=1 / 1000)
    stacks = h.stacked_frames(st.obs)  # what VecFrameStack (+ VecTransposeImage) hands over
    space = _box((h.STACK, *h.FRAME), np.uint8)
    warm = _buffer(64, space)
    _add_steps(warm, stacks, st, 32)(0)
    warm.sample(2)
    del warm
    rss0 = h.rss_bytes()
    buf = _buffer(sz.atari_capacity, space)
    fill = h.timed_segments(_add_steps(buf, stacks, st, 128), sz.atari_fill, sz.repeats)
    rss = h.rss_bytes() - rss0

    def sample(i: int) -> int:
        buf.sample(sz.atari_batch)
        return sz.atari_batch

    return {
        "fill": fill,
        "sample": h.timed_windows(sample, sz.repeats, sz.window),
        "memory": [rss],
        "info": {"stored": buf.size()},
    }


def per(sz: h.Sizes) -> dict[str, Any]:
    raise h.Unavailable("no prioritized replay buffer in Stable-Baselines3")


def sequences(sz: h.Sizes) -> dict[str, Any]:
    raise h.Unavailable("no sequence sampling in Stable-Baselines3's ReplayBuffer")


if __name__ == "__main__":
    raise SystemExit(
        h.main(
            "stable-baselines3",
            version,
            {f.__name__: f for f in (single, vector, atari, per, sequences)},
        )
    )
