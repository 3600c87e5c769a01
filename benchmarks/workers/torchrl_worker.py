"""TorchRL: ``ReplayBuffer`` / ``TensorDictReplayBuffer`` over its storages and samplers.

Each step is a ``tensordict.TensorDict`` (what its environments and collectors produce) with
``obs``, ``action``, ``reward``, ``done`` and ``("next", "obs"/"done")``; ``add`` for one
env, ``extend`` for a 16-env step. In-RAM ``LazyTensorStorage`` for the small rows; Atari uses
its documented memory-saving recipe: ``LazyMemmapStorage`` holding single frames, with
``CatFrames.make_rb_transform_and_sampler`` (a ``SliceSampler`` of 4 steps plus a transform
that stacks them at sample time). Sequences use ``SliceSampler(slice_len=80,
traj_key="episode", strict_length=False)``. Prioritized sampling needs its compiled
extension; when that does not load, the row is unavailable.
"""

from __future__ import annotations

import tempfile
from typing import Any

import harness as h
import numpy as np

CHUNK = 256
VCHUNK = 64


def version() -> str:
    import tensordict
    import torch
    import torchrl

    return f"torchrl {torchrl.__version__} (tensordict {tensordict.__version__}, torch {torch.__version__})"  # noqa: E501


def _quiet() -> None:
    import logging
    import warnings

    logging.getLogger("torchrl").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", category=UserWarning)  # CatFrames' time-dim notice


def _step_td(st: h.Steps, obs: Any) -> Any:
    """``td(j)``: step ``j`` as a TensorDict, built the way a training loop builds it."""
    import torch
    from tensordict import TensorDict

    act, rew, done = st.action, st.reward, st.done

    def td(j: int) -> Any:
        d = torch.tensor([done[j]])  # TorchRL's convention: reward and done have shape (1,)
        return TensorDict(
            {"obs": obs[j], "action": torch.tensor(act[j]), "reward": torch.tensor([rew[j]]),
             "done": d, "next": {"obs": obs[j + 1], "done": d}},
            batch_size=[],
        )  # fmt: skip

    return td


def _add_steps(rb: Any, st: h.Steps, obs: Any, chunk: int) -> Any:
    td = _step_td(st, obs)

    def run(i: int) -> int:
        base = (i * chunk) & h.MASK
        for j in range(base, base + chunk):
            rb.add(td(j))
        return chunk

    return run


def _bulk(st: h.Steps, obs: Any) -> Any:
    import torch
    from tensordict import TensorDict

    done = torch.from_numpy(st.done_arr[:, None])
    return TensorDict(
        {"obs": obs[:-1], "action": torch.from_numpy(st.action_arr),
         "reward": torch.from_numpy(st.reward_arr[:, None]), "done": done,
         "next": {"obs": obs[1:], "done": done}},
        batch_size=[h.POOL],
    )  # fmt: skip


def _vector_tensors(vs: h.VectorSteps) -> dict[str, Any]:
    import torch

    out = {k: torch.from_numpy(getattr(vs, k)) for k in ("obs", "action", "reward", "done")}
    out["reward"], out["done"] = out["reward"][..., None], out["done"][..., None]
    return out


def _add_vector(rb: Any, vs: h.VectorSteps) -> Any:
    from tensordict import TensorDict

    t = _vector_tensors(vs)
    obs, act, rew, done = t["obs"], t["action"], t["reward"], t["done"]

    def run(i: int) -> int:
        base = (i * VCHUNK) & h.MASK
        for j in range(base, base + VCHUNK):
            rb.extend(TensorDict(
                {"obs": obs[j], "action": act[j], "reward": rew[j], "done": done[j],
                 "next": {"obs": obs[j + 1], "done": done[j]}},
                batch_size=[h.NUM_ENVS],
            ))  # fmt: skip
        return VCHUNK * h.NUM_ENVS

    return run


def single(sz: h.Sizes) -> dict[str, Any]:
    import torch
    from torchrl.data import LazyTensorStorage, ReplayBuffer

    _quiet()
    st = h.single_steps((h.OBS_DIM,), np.float32)
    obs = torch.from_numpy(st.obs)
    rb = ReplayBuffer(storage=LazyTensorStorage(sz.capacity))
    add = h.timed_windows(_add_steps(rb, st, obs, CHUNK), sz.repeats, sz.window)
    bulk = _bulk(st, obs)
    while len(rb) < sz.single_fill:  # top-up (extend), not timed
        rb.extend(bulk)

    def sample(i: int) -> int:
        rb.sample(sz.batch)
        return sz.batch

    return {
        "add": add,
        "sample": h.timed_windows(sample, sz.repeats, sz.window),
        "info": {"stored": len(rb)},
    }


def vector(sz: h.Sizes) -> dict[str, Any]:
    from torchrl.data import LazyTensorStorage, ReplayBuffer

    _quiet()
    vs = h.vector_steps((h.OBS_DIM,))
    rb = ReplayBuffer(storage=LazyTensorStorage(sz.capacity))
    return {"add": h.timed_windows(_add_vector(rb, vs), sz.repeats, sz.window)}


def _atari_buffer(capacity: int, scratch: str) -> Any:
    from torchrl.data import LazyMemmapStorage, ReplayBuffer
    from torchrl.envs import CatFrames

    # reset_key/done_key are named because no environment is attached to tell them.
    cat = CatFrames(
        N=h.STACK, dim=-3, in_keys=["obs"], out_keys=["obs_stack"], reset_key="_reset",
        done_key="done",
    )  # fmt: skip
    transform, sampler = cat.make_rb_transform_and_sampler(
        batch_size=1, end_key=("next", "done"), strict_length=False
    )
    return ReplayBuffer(
        storage=LazyMemmapStorage(capacity, scratch_dir=scratch),
        sampler=sampler,
        transform=transform,
    )


def atari(sz: h.Sizes) -> dict[str, Any]:
    import torch

    _quiet()
    st = h.single_steps(h.FRAME, np.uint8, end_p=1 / 1000)
    frames = torch.from_numpy(st.obs[:, None])  # (1, 84, 84): the axis CatFrames stacks on
    with tempfile.TemporaryDirectory() as scratch:
        warm = _atari_buffer(64, scratch + "/warm")
        _add_steps(warm, st, frames, 32)(0)
        warm.sample(2)
        del warm
        rss0 = h.rss_bytes()
        rb = _atari_buffer(sz.atari_capacity, scratch + "/main")
        fill = h.timed_segments(_add_steps(rb, st, frames, 128), sz.atari_fill, sz.repeats)
        rss = h.rss_bytes() - rss0
        # The sampler multiplies the batch size by 4: sample(32) draws 32 slices of 4 steps.
        shape = tuple(rb.sample(sz.atari_batch)["obs_stack"].shape)

        def sample(i: int) -> int:
            rb.sample(sz.atari_batch)
            return sz.atari_batch

        rates = h.timed_windows(sample, sz.repeats, sz.window)
        stored = len(rb)
    return {
        "fill": fill,
        "sample": rates,
        "memory": [rss],
        "info": {"stored": stored, "stack_shape": list(shape)},
    }


def per(sz: h.Sizes) -> dict[str, Any]:
    import torch
    from torchrl.data import LazyTensorStorage, PrioritizedReplayBuffer

    _quiet()
    try:
        rb = PrioritizedReplayBuffer(
            alpha=sz.per_alpha, beta=sz.per_beta, storage=LazyTensorStorage(sz.capacity)
        )
    except RuntimeError as exc:
        try:
            import torchrl._torchrl  # noqa: F401
        except ImportError as why:
            detail = "undefined symbol" if "undefined symbol" in str(why) else str(why)[:80]
            raise h.Unavailable(
                f"its PrioritizedSampler needs torchrl's compiled extension _torchrl, which "
                f"does not load with torch {torch.__version__} ({detail})"
            ) from None
        raise h.Unavailable(f"PrioritizedReplayBuffer: {exc}") from None
    vs = h.vector_steps((h.OBS_DIM,))
    fill = h.timed_segments(_add_vector(rb, vs), sz.per_fill, sz.repeats)
    prios = torch.from_numpy(np.abs(np.random.default_rng(2).normal(size=(64, sz.batch))))

    def iteration(i: int) -> int:
        for k in range(10):
            _, info = rb.sample(sz.batch, return_info=True)
            rb.update_priority(info["index"], prios[(i * 10 + k) & 63])
        return 10

    return {"fill": fill, "iteration": h.timed_windows(iteration, sz.repeats, sz.window)}


def sequences(sz: h.Sizes) -> dict[str, Any]:
    import torch
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage, ReplayBuffer, SliceSampler

    _quiet()
    vs = h.vector_steps((h.SEQ_OBS_DIM,))
    rb = ReplayBuffer(
        storage=LazyTensorStorage(sz.capacity),
        sampler=SliceSampler(slice_len=sz.seq_len, traj_key="episode", strict_length=False),
    )
    # A collector's batch of T steps of 16 envs, stored env by env (its (E, T) layout
    # flattened), each step labelled with its episode so that slices stay inside episodes.
    T = 64
    done = vs.done[:T]
    episode = (np.cumsum(done, axis=0) - done) * h.NUM_ENVS + np.arange(h.NUM_ENVS)
    t = _vector_tensors(vs)

    def env_major(x: Any) -> Any:
        return x[:T].transpose(0, 1).reshape(T * h.NUM_ENVS, *x.shape[2:])

    chunk = TensorDict(
        {"obs": env_major(t["obs"]), "action": env_major(t["action"]),
         "reward": env_major(t["reward"]), "done": env_major(t["done"]),
         "next": {"obs": env_major(t["obs"][1:]), "done": env_major(t["done"])}},
        batch_size=[T * h.NUM_ENVS],
    )  # fmt: skip
    base = torch.from_numpy(episode.T.reshape(-1).astype(np.int64))
    k = 0
    while len(rb) < sz.seq_fill:  # not timed
        chunk["episode"] = base + k * (int(episode.max()) + 1)
        rb.extend(chunk)
        k += 1

    def sample(i: int) -> int:
        rb.sample(sz.seq_batch * sz.seq_len)  # 32 slices of up to 80 steps
        return sz.seq_batch

    return {
        "sample": h.timed_windows(sample, sz.repeats, sz.window),
        "info": {"stored": len(rb)},
    }


if __name__ == "__main__":
    raise SystemExit(
        h.main(
            "torchrl",
            version,
            {f.__name__: f for f in (single, vector, atari, per, sequences)},
        )
    )
