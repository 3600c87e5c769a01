"""cpprb: ``ReplayBuffer`` / ``PrioritizedReplayBuffer`` as its documentation shows them.

Memory savings on where they apply: ``next_of="obs"`` (next observations share the obs
memory) for the single-env rows, plus ``stack_compress="obs"`` for Atari (stacks of 4 frames,
stack axis last, stored once per frame). ``next_of`` and ``stack_compress`` need the steps of
one episode in order, so the 16-env rows (steps of 16 envs interleaved) store ``next_obs``
explicitly. ``on_episode_end()`` is called after every episode end, as the docs require.
"""

from __future__ import annotations

from typing import Any

import harness as h
import numpy as np

CHUNK = 256
VCHUNK = 64


def version() -> str:
    from importlib.metadata import version as v

    import cpprb  # noqa: F401 - fail here if it does not import

    return f"cpprb {v('cpprb')}"


def _env_dict(obs_shape: Any, dtype: Any = np.float32, next_obs: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "obs": {"shape": obs_shape, "dtype": dtype},
        "act": {"dtype": np.int64},
        "rew": {},
        "done": {},
    }
    if next_obs:
        out["next_obs"] = {"shape": obs_shape, "dtype": dtype}
    return out


def _add_steps(rb: Any, obs: Any, st: h.Steps, chunk: int) -> Any:
    act, rew, done = st.action, st.reward, st.done

    def run(i: int) -> int:
        base = (i * chunk) & h.MASK
        for j in range(base, base + chunk):
            rb.add(obs=obs[j], act=act[j], rew=rew[j], next_obs=obs[j + 1], done=done[j])
            if done[j]:
                rb.on_episode_end()
        return chunk

    return run


def _add_vector(rb: Any, vs: h.VectorSteps) -> Any:
    def run(i: int) -> int:
        base = (i * VCHUNK) & h.MASK
        for j in range(base, base + VCHUNK):
            rb.add(obs=vs.obs[j], act=vs.action[j], rew=vs.reward[j], next_obs=vs.obs[j + 1],
                   done=vs.done[j])  # fmt: skip
        return VCHUNK * h.NUM_ENVS

    return run


def single(sz: h.Sizes) -> dict[str, Any]:
    import cpprb

    st = h.single_steps((h.OBS_DIM,), np.float32)
    rb = cpprb.ReplayBuffer(sz.capacity, _env_dict(h.OBS_DIM), next_of="obs")
    add = h.timed_windows(_add_steps(rb, st.obs, st, CHUNK), sz.repeats, sz.window)
    while rb.get_stored_size() < sz.single_fill:  # top-up (bulk add), not timed
        rb.add(obs=st.obs[:-1], act=st.action_arr, rew=st.reward_arr, next_obs=st.obs[1:],
               done=st.done_arr)  # fmt: skip
        rb.on_episode_end()

    def sample(i: int) -> int:
        rb.sample(sz.batch)
        return sz.batch

    return {
        "add": add,
        "sample": h.timed_windows(sample, sz.repeats, sz.window),
        "info": {"stored": rb.get_stored_size()},
    }


def vector(sz: h.Sizes) -> dict[str, Any]:
    import cpprb

    vs = h.vector_steps((h.OBS_DIM,))
    rb = cpprb.ReplayBuffer(sz.capacity, _env_dict(h.OBS_DIM, next_obs=True))
    return {"add": h.timed_windows(_add_vector(rb, vs), sz.repeats, sz.window)}


def atari(sz: h.Sizes) -> dict[str, Any]:
    import cpprb

    st = h.single_steps(h.FRAME, np.uint8, end_p=1 / 1000)
    # What a frame-stacking wrapper hands the loop, stack axis last as stack_compress needs.
    stacks = np.ascontiguousarray(np.moveaxis(h.stacked_frames(st.obs), 1, -1))
    env_dict = _env_dict((*h.FRAME, h.STACK), np.uint8)
    warm = cpprb.ReplayBuffer(64, env_dict, next_of="obs", stack_compress="obs")
    _add_steps(warm, stacks, st, 32)(0)
    warm.sample(2)
    del warm
    rss0 = h.rss_bytes()
    rb = cpprb.ReplayBuffer(sz.atari_capacity, env_dict, next_of="obs", stack_compress="obs")
    fill = h.timed_segments(_add_steps(rb, stacks, st, 128), sz.atari_fill, sz.repeats)
    rss = h.rss_bytes() - rss0

    def sample(i: int) -> int:
        rb.sample(sz.atari_batch)
        return sz.atari_batch

    return {
        "fill": fill,
        "sample": h.timed_windows(sample, sz.repeats, sz.window),
        "memory": [rss],
        "info": {"stored": rb.get_stored_size()},
    }


def per(sz: h.Sizes) -> dict[str, Any]:
    import cpprb

    vs = h.vector_steps((h.OBS_DIM,))
    rb = cpprb.PrioritizedReplayBuffer(
        sz.capacity, _env_dict(h.OBS_DIM, next_obs=True), alpha=sz.per_alpha
    )
    fill = h.timed_segments(_add_vector(rb, vs), sz.per_fill, sz.repeats)
    prios = np.abs(np.random.default_rng(2).normal(size=(64, sz.batch)))

    def iteration(i: int) -> int:
        for k in range(10):
            batch = rb.sample(sz.batch, beta=sz.per_beta)
            rb.update_priorities(batch["indexes"], prios[(i * 10 + k) & 63])
        return 10

    return {
        "fill": fill,
        "iteration": h.timed_windows(iteration, sz.repeats, sz.window),
        "info": {"stored": rb.get_stored_size()},
    }


def sequences(sz: h.Sizes) -> dict[str, Any]:
    raise h.Unavailable("no sequence sampling in cpprb (its buffers draw single transitions)")


if __name__ == "__main__":
    raise SystemExit(
        h.main(
            "cpprb",
            version,
            {f.__name__: f for f in (single, vector, atari, per, sequences)},
        )
    )
