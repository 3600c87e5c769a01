"""Cost-curve cells of the torch-based peers (Tianshou, TorchRL, SB3) for ``curve_worker.py``.

Each library is driven as its ``run.py`` worker drives it (``<lib>_worker.py``: the same
step containers and calls); only the untimed fill differs, to reach 10^6-10^7 stored
transitions in seconds: Tianshou through ``ReplayBuffer.from_data`` (its documented path for
offline data; next observations stored), TorchRL through ``extend``, SB3 by writing the
arrays its ``add`` writes (``observations``, ``actions``, ... and ``pos``/``full``).
Operations measured: ``sample`` and ``add`` (one env; SB3 also 16 envs); the others read
``unavailable``.
"""

from __future__ import annotations

from typing import Any

import harness as h
import numpy as np


def _tile(a: Any, size: int) -> Any:
    reps = -(-size // a.shape[0])
    return np.concatenate([a] * reps)[:size] if reps > 1 else a[:size]


def sb3_cell(setup: str, op: str, size: int, batches: list[int], sz: Any) -> dict[str, Any]:
    import gymnasium as gym
    import sb3_worker as w
    from curve_worker import timed
    from stable_baselines3.common.buffers import ReplayBuffer

    if op not in ("sample", "add"):
        raise h.Unavailable(f"{op}: not in the curves for SB3 (see run.py)")
    st = h.single_steps((h.OBS_DIM,), np.float32)
    memory = setup == "memory"
    buf = ReplayBuffer(size, w._box((h.OBS_DIM,), np.float32), gym.spaces.Discrete(6),
                       device="cpu", n_envs=1, optimize_memory_usage=memory,
                       handle_timeout_termination=False)  # fmt: skip
    obs = _tile(st.obs[:-1], size)
    buf.observations[:, 0] = obs
    if not memory:
        buf.next_observations[:, 0] = np.roll(obs, -1, axis=0)
    buf.actions[:, 0, 0] = _tile(st.action_arr, size)
    buf.rewards[:, 0] = _tile(st.reward_arr, size)
    buf.dones[:, 0] = _tile(st.done_arr, size)
    buf.pos, buf.full = 0, True
    if op == "sample":
        return {f"B={b}": timed(lambda b=b: buf.sample(b), sz.repeats, sz.window) for b in batches}
    run = w._add_steps(buf, st.obs, st, 1)
    i = [0]

    def add1() -> None:
        i[0] += 1
        run(i[0])

    out = {"1 env": timed(add1, sz.repeats, sz.window)}
    # One VecEnv step of 16 envs (its buffer holds size // 16 steps per env); the worker's
    # chunk adds 64 steps, so a call's time is the chunk's over 64.
    vbuf = ReplayBuffer(max(size // h.NUM_ENVS, 2), w._box((h.OBS_DIM,), np.float32),
                        gym.spaces.Discrete(6), device="cpu", n_envs=h.NUM_ENVS,
                        optimize_memory_usage=memory, handle_timeout_termination=False)  # fmt: skip
    vrun = w._add_vector(vbuf, h.vector_steps((h.OBS_DIM,)))
    out["16 envs"] = [x / w.VCHUNK for x in timed(lambda: vrun(i[0]), sz.repeats, sz.window)]
    return out


def tianshou_cell(setup: str, op: str, size: int, batches: list[int], sz: Any) -> dict[str, Any]:
    import tianshou_worker as w
    from curve_worker import timed
    from tianshou.data import ReplayBuffer

    if op not in ("sample", "add"):
        raise h.Unavailable(f"{op}: not in the curves for Tianshou (see run.py)")
    st = h.single_steps((h.OBS_DIM,), np.float32)
    obs = _tile(st.obs[:-1], size)
    done = _tile(st.done_arr, size)
    buf = ReplayBuffer.from_data(
        obs, _tile(st.action_arr, size), _tile(st.reward_arr, size), done,
        np.zeros(size, bool), done, np.roll(obs, -1, axis=0),
    )  # fmt: skip
    if op == "sample":
        return {f"B={b}": timed(lambda b=b: buf.sample(b), sz.repeats, sz.window) for b in batches}
    run = w._add_steps(buf, st.obs, st, 1)
    i = [0]

    def add1() -> None:
        i[0] += 1
        run(i[0])

    return {"1 env": timed(add1, sz.repeats, sz.window)}


def torchrl_cell(setup: str, op: str, size: int, batches: list[int], sz: Any) -> dict[str, Any]:
    import torch
    import torchrl_worker as w
    from curve_worker import timed
    from torchrl.data import LazyTensorStorage, ReplayBuffer

    if op not in ("sample", "add"):
        raise h.Unavailable(f"{op}: not in the curves for TorchRL (see run.py)")
    w._quiet()
    st = h.single_steps((h.OBS_DIM,), np.float32)
    obs = torch.from_numpy(st.obs)
    rb = ReplayBuffer(storage=LazyTensorStorage(size))
    bulk = w._bulk(st, obs)
    while len(rb) < size:
        k = min(h.POOL, size - len(rb))
        rb.extend(bulk[:k])
    if op == "sample":
        return {f"B={b}": timed(lambda b=b: rb.sample(b), sz.repeats, sz.window) for b in batches}
    run = w._add_steps(rb, st, obs, 1)
    i = [0]

    def add1() -> None:
        i[0] += 1
        run(i[0])

    return {"1 env": timed(add1, sz.repeats, sz.window)}


CELLS = {"sb3": sb3_cell, "tianshou": tianshou_cell, "torchrl": torchrl_cell}
