"""The ring's two updates agree: a lockstep add (:meth:`Ring.advance`, record freeing and
eviction as maxima, the owner of a reused slot read through the record rows) leaves the
bookkeeping that an add of every env counted per env (:meth:`Ring.advance_envs`, the
explicit rules) leaves, through overwriting, dropped episodes, clears and dequeues."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rlreplay.torch as rrt
from tests.torch_buffer.helpers import make, on, random_step


def state(buf: rrt.DeviceReplayBuffer) -> dict[str, np.ndarray]:
    """The ring's per-env, per-row and per-record arrays on the host (spare entries left
    out: they are scratch)."""
    ring = buf._ring
    c = buf.config
    names = ("head", "lo", "hi", "next_start", "f_count", "f_head", "row_info")
    out = {name: getattr(ring, name).cpu().numpy().copy() for name in names}
    out["final_owner"] = ring.final_owner.cpu().numpy()
    out["counts"] = ring.env_counts()
    assert out["final_owner"].shape == (c.num_envs * c.finals_per_env,)
    return out


@pytest.mark.parametrize("frame_stack", [1, 3])
@pytest.mark.parametrize("finals_per_env", [2, None])
def test_lockstep_add_keeps_the_per_env_bookkeeping(
    device: str, frame_stack: int, finals_per_env: int | None
) -> None:
    E = 3
    kw = dict(capacity=E * 10, num_envs=E, n_step=2, frame_stack=frame_stack,
              finals_per_env=finals_per_env)  # fmt: skip
    lock, per_env = make(device, **kw), make(device, **kw)
    every = torch.arange(E, device=device)  # a device tensor: counted per env from the start
    rng = np.random.default_rng(0)
    for i in range(120):
        step = on(random_step(rng, E, p_end=0.3), device)
        ids_a = lock.add(**step)
        ids_b = per_env.add(env_ids=every, **step)
        assert ids_a.tolist() == ids_b.tolist()
        if i % 37 == 36:
            lock.clear()
            per_env.clear()
        if i % 29 == 28:
            lock.dequeue(2)
            per_env.dequeue(2)
        a, b = state(lock), state(per_env)
        for name in a:
            np.testing.assert_array_equal(a[name], b[name], err_msg=f"{name} after add {i}")
    assert not lock._ring.per_env and per_env._ring.per_env
