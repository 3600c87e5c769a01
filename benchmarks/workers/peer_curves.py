"""Cost-curve cells of the torch-based peers (Tianshou, TorchRL, SB3) for ``curve_worker.py``.

Each library is driven as its ``run.py`` worker drives it (``<lib>_worker.py``: the same
step containers and calls); only the untimed fill differs, to reach 10^6-10^7 stored
transitions in seconds: Tianshou by handing its buffer whole columns (``set_batch``, as its
``from_data`` does for offline data), TorchRL through ``extend``, SB3 by writing the arrays
its ``add`` writes (``observations``, ``actions``, ... and ``pos``/``full``).

Setups (``fast``: the fastest documented setup for the operation; ``memory``: the
memory-saving one; ``default``: the only one measured):

* Tianshou ``fast`` stores ``obs_next`` (its default), ``memory`` sets ``ignore_obs_next=True``
  (next observations read from the following index). Atari: ``memory`` only, its documented
  Atari setting ``stack_num=4, save_only_last_obs=True, ignore_obs_next=True`` (one frame per
  step, stacks of s and s' rebuilt at sample time). PER: ``PrioritizedReplayBuffer`` in both
  setups. Sequences: ``memory`` only, ``stack_num=80`` (the 80 steps ending at each drawn
  index, within its episode; observations only). ``add`` 16 envs: ``VectorReplayBuffer``.
* TorchRL ``default``: ``LazyTensorStorage`` in RAM; Atari uses its memory-saving recipe
  (``LazyMemmapStorage`` of single frames, ``CatFrames.make_rb_transform_and_sampler``: a
  ``SliceSampler`` of 4 steps and a transform stacking s; its s' is not stacked); sequences
  ``SliceSampler(slice_len=80, traj_key="episode", strict_length=False)``; PER needs its
  compiled extension (unavailable when it does not load); ``add`` 16 envs: ``extend`` of a
  16-row ``TensorDict``.
* SB3 ``fast``: ``optimize_memory_usage=False``, ``memory``: ``True``. Its buffer has no
  frame stacking: the Atari line stores the ``(4, 84, 84)`` stacks ``VecFrameStack`` hands
  over (``fast``: s and s' stacks, 8 frames per step; ``memory``: 4), as its DQN does.
"""

from __future__ import annotations

from typing import Any

import harness as h
import numpy as np

Array = np.ndarray[Any, Any]


def _tile(a: Any, size: int) -> Any:
    """``a`` repeated to ``size`` rows, filled in place (no intermediate copies)."""
    out = np.empty((size, *a.shape[1:]), a.dtype)
    for s in range(0, size, a.shape[0]):
        k = min(a.shape[0], size - s)
        out[s : s + k] = a[:k]
    return out


def _per_step(run: Any, sz: Any, per_call: int = 1) -> list[float]:
    """Time ``run(i)`` (one chunk of ``per_call`` adds) and return µs per add."""
    from curve_worker import timed

    i = [0]

    def call() -> None:
        i[0] += 1
        run(i[0])

    return [x / per_call for x in timed(call, sz.repeats, sz.window)]


# ---------------------------------------------------------------------- SB3
def sb3_cell(setup: str, op: str, size: int, batches: list[int], sz: Any) -> dict[str, Any]:
    import gymnasium as gym
    import sb3_worker as w
    from curve_worker import timed
    from stable_baselines3.common.buffers import ReplayBuffer

    if op not in ("sample", "add", "atari"):
        raise h.Unavailable(f"{op}: not in Stable-Baselines3 (no PER, no sequence sampling)")
    memory = setup == "memory"
    atari = op == "atari"
    if atari:
        st = h.single_steps(h.FRAME, np.uint8, end_p=1 / 1000)
        rows, space = h.stacked_frames(st.obs), w._box((h.STACK, *h.FRAME), np.uint8)
    else:
        st = h.single_steps((h.OBS_DIM,), np.float32)
        rows, space = st.obs, w._box((h.OBS_DIM,), np.float32)
    buf = ReplayBuffer(size, space, gym.spaces.Discrete(6), device="cpu", n_envs=1,
                       optimize_memory_usage=memory, handle_timeout_termination=False)  # fmt: skip
    for s in range(0, size, h.POOL):  # the arrays its add writes, in place
        k = min(h.POOL, size - s)
        buf.observations[s : s + k, 0] = rows[:k]
        if not memory:
            buf.next_observations[s : s + k, 0] = rows[1 : k + 1]
    buf.actions[:, 0, 0] = _tile(st.action_arr, size)
    buf.rewards[:, 0] = _tile(st.reward_arr, size)
    buf.dones[:, 0] = _tile(st.done_arr, size)
    buf.pos, buf.full = 0, True
    if op in ("sample", "atari"):
        return {f"B={b}": timed(lambda b=b: buf.sample(b), sz.repeats, sz.window) for b in batches}
    out = {"1 env": _per_step(w._add_steps(buf, st.obs, st, 1), sz)}
    # One VecEnv step of 16 envs (its buffer holds size // 16 steps per env).
    vbuf = ReplayBuffer(max(size // h.NUM_ENVS, 2), space, gym.spaces.Discrete(6), device="cpu",
                        n_envs=h.NUM_ENVS, optimize_memory_usage=memory,
                        handle_timeout_termination=False)  # fmt: skip
    out["16 envs"] = _per_step(w._add_vector(vbuf, h.vector_steps((h.OBS_DIM,))), sz, w.VCHUNK)
    return out


# ---------------------------------------------------------------------- Tianshou
def _ts_columns(st: h.Steps, obs: Array, size: int, next_obs: bool) -> Any:
    from tianshou.data import Batch

    done = _tile(st.done_arr, size)
    cols = {"obs": obs, "act": _tile(st.action_arr, size), "rew": _tile(st.reward_arr, size),
            "terminated": done, "truncated": np.zeros(size, bool), "done": done}  # fmt: skip
    if next_obs:
        cols["obs_next"] = np.roll(obs, -1, axis=0)
    return Batch(**cols)


def _ts_fill(buf: Any, batch: Any, size: int) -> Any:
    """A full buffer whose newest step is ``size - 1`` (what ``from_data`` leaves)."""
    buf.set_batch(batch)
    buf._size = size
    buf._insertion_idx = 0
    buf.last_index = np.array([size - 1])
    if hasattr(buf, "init_weight"):  # prioritized: every step at the initial priority
        buf.init_weight(np.arange(size))
    return buf


def tianshou_cell(setup: str, op: str, size: int, batches: list[int], sz: Any) -> dict[str, Any]:
    import tianshou_worker as w
    from curve_worker import timed
    from tianshou.data import PrioritizedReplayBuffer, ReplayBuffer, VectorReplayBuffer

    fast = setup == "fast"
    if op == "atari":
        st = h.single_steps(h.FRAME, np.uint8, end_p=1 / 1000)
        buf = ReplayBuffer(size, stack_num=h.STACK, ignore_obs_next=True, save_only_last_obs=True)
        _ts_fill(buf, _ts_columns(st, _tile(st.obs[:-1], size), size, False), size)

        def atari(b: int) -> None:
            batch, _ = buf.sample(b)
            batch.obs_next  # noqa: B018 - stacked next observations are built on access

        return {f"B={b}": timed(lambda b=b: atari(b), sz.repeats, sz.window) for b in batches}
    st = h.single_steps((h.OBS_DIM,), np.float32)
    obs = _tile(st.obs[:-1], size)
    if op == "sample":
        buf = _ts_fill(ReplayBuffer(size, ignore_obs_next=not fast),
                       _ts_columns(st, obs, size, fast), size)  # fmt: skip
        return {f"B={b}": timed(lambda b=b: buf.sample(b), sz.repeats, sz.window) for b in batches}
    if op == "per":
        buf = PrioritizedReplayBuffer(size, alpha=0.6, beta=0.4, ignore_obs_next=not fast)
        _ts_fill(buf, _ts_columns(st, obs, size, fast), size)
        prios = np.abs(np.random.default_rng(2).normal(size=(64, 256))) + 1e-3
        c = [0]

        def it() -> None:
            batch, indices = buf.sample(256)
            batch.weight  # noqa: B018 - the importance weights are part of the sample
            c[0] = (c[0] + 1) & 63
            buf.update_weight(indices, prios[c[0]])

        return {"B=256": timed(it, sz.repeats, sz.window)}
    if op == "sequences":
        buf = _ts_fill(ReplayBuffer(size, stack_num=80, ignore_obs_next=True),
                       _ts_columns(st, obs, size, False), size)  # fmt: skip

        def seq() -> None:
            batch, _ = buf.sample(32)
            batch.obs_next  # noqa: B018

        return {"32x80": timed(seq, sz.repeats, sz.window)}
    if op == "add":
        out = {"1 env": _per_step(w._add_steps(ReplayBuffer(size, ignore_obs_next=not fast),
                                               st.obs, st, 1), sz)}  # fmt: skip
        vbuf = VectorReplayBuffer(max(size, h.NUM_ENVS), h.NUM_ENVS, ignore_obs_next=not fast)
        out["16 envs"] = _per_step(w._add_vector(vbuf, h.vector_steps((h.OBS_DIM,))), sz,
                                   w.VCHUNK)  # fmt: skip
        return out
    raise h.Unavailable(f"no operation {op}")


# ---------------------------------------------------------------------- TorchRL
def _trl_per_unavailable(exc: Exception) -> h.Unavailable:
    import torch

    try:
        import torchrl._torchrl  # noqa: F401
    except ImportError as why:
        detail = "undefined symbol" if "undefined symbol" in str(why) else str(why)[:80]
        return h.Unavailable(
            f"its PrioritizedSampler needs torchrl's compiled extension _torchrl, which "
            f"does not load with torch {torch.__version__} ({detail})"
        )
    return h.Unavailable(f"PrioritizedReplayBuffer: {exc}")


def _trl_episodes(st: h.Steps, obs: Any) -> Any:
    """The pool as one TensorDict with an ``episode`` label per step (for slice samplers)."""
    import torch

    td = _bulk_td(st, obs)
    done = st.done_arr
    td["episode"] = torch.from_numpy(np.cumsum(done) - done)
    return td


def _bulk_td(st: h.Steps, obs: Any) -> Any:
    import torchrl_worker as w

    return w._bulk(st, obs)


def torchrl_cell(setup: str, op: str, size: int, batches: list[int], sz: Any) -> dict[str, Any]:
    import tempfile

    import torch
    import torchrl_worker as w
    from curve_worker import timed
    from torchrl.data import LazyTensorStorage, ReplayBuffer, SliceSampler

    w._quiet()
    if op == "atari":
        st = h.single_steps(h.FRAME, np.uint8, end_p=1 / 1000)
        frames = torch.from_numpy(st.obs[:, None])  # (1, 84, 84): the axis CatFrames stacks
        scratch = tempfile.mkdtemp(prefix="torchrl-curve-")
        rb = w._atari_buffer(size, scratch)
        bulk = _bulk_td(st, frames)
        while len(rb) < size:
            rb.extend(bulk[: min(h.POOL, size - len(rb))])
        # sample(b): b stacked states (b / 4 slices of 4 steps, each step with its stack).
        return {f"B={b}": timed(lambda b=b: rb.sample(b), sz.repeats, sz.window) for b in batches}
    st = h.single_steps((h.OBS_DIM,), np.float32)
    obs = torch.from_numpy(st.obs)
    if op == "per":
        from torchrl.data import PrioritizedReplayBuffer

        try:
            rb = PrioritizedReplayBuffer(alpha=0.6, beta=0.4, storage=LazyTensorStorage(size))
        except RuntimeError as exc:
            raise _trl_per_unavailable(exc) from None
    elif op == "sequences":
        rb = ReplayBuffer(storage=LazyTensorStorage(size),
                          sampler=SliceSampler(slice_len=80, traj_key="episode",
                                               strict_length=False))  # fmt: skip
    else:
        rb = ReplayBuffer(storage=LazyTensorStorage(size))
    bulk = _trl_episodes(st, obs) if op == "sequences" else _bulk_td(st, obs)
    k = 0
    while len(rb) < size:
        part = bulk[: min(h.POOL, size - len(rb))]
        if op == "sequences":  # episodes stay distinct from one pool copy to the next
            part = part.clone()
            part["episode"] += k * h.POOL
            k += 1
        rb.extend(part)
    if op == "sample":
        return {f"B={b}": timed(lambda b=b: rb.sample(b), sz.repeats, sz.window) for b in batches}
    if op == "sequences":
        return {"32x80": timed(lambda: rb.sample(32 * 80), sz.repeats, sz.window)}
    if op == "per":
        prios = torch.from_numpy(np.abs(np.random.default_rng(2).normal(size=(64, 256))))
        c = [0]

        def it() -> None:
            _, info = rb.sample(256, return_info=True)
            c[0] = (c[0] + 1) & 63
            rb.update_priority(info["index"], prios[c[0]])

        return {"B=256": timed(it, sz.repeats, sz.window)}
    if op == "add":
        out = {"1 env": _per_step(w._add_steps(rb, st, obs, 1), sz)}
        vrb = ReplayBuffer(storage=LazyTensorStorage(max(size, h.NUM_ENVS)))
        out["16 envs"] = _per_step(w._add_vector(vrb, h.vector_steps((h.OBS_DIM,))), sz,
                                   w.VCHUNK)  # fmt: skip
        return out
    raise h.Unavailable(f"no operation {op}")


CELLS = {"sb3": sb3_cell, "tianshou": tianshou_cell, "torchrl": torchrl_cell}
