"""Transforms on the device buffers: the buffer's ``transforms`` in order on every sample, then
a call's ``transform``; the same values as the core's transforms of the same transitions; a
raising transform rolls the draw back; bindable and non-callable transforms refused by name."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import rlreplay as rr
import rlreplay.torch as rrt
from tests.torch_buffer.helpers import (
    FIELDS,
    Twins,
    assert_bit_identical,
    host,
    make,
    on,
    random_step,
)


def double_reward(batch: Any) -> Any:
    return batch.replace(reward=batch.reward * 2)


def add_one_to_obs(batch: Any) -> Any:
    return batch.replace(obs=batch.obs + 1, tag=batch.reward * 0 + 7)


def fed(prioritized: bool, seed: int = 0, **kwargs: Any) -> rrt.DeviceReplayBuffer:
    buf = make("cpu", capacity=24, num_envs=2, n_step=2, prioritized=prioritized, seed=seed,
               **kwargs)  # fmt: skip
    rng = np.random.default_rng(seed)
    for _ in range(15):
        buf.add(**on(random_step(rng, 2, p_end=0.2), "cpu"))
    return buf


@pytest.mark.parametrize("prioritized", [False, True])
def test_transforms_apply_in_order_as_the_cores(prioritized: bool) -> None:
    """The transformed batch is the core's transforms of the core's transitions of the same
    ids (and the plain buffer's batch for the same draws, transformed)."""
    fns = [double_reward, add_one_to_obs]
    tw = Twins(make("cpu", capacity=24, num_envs=2, n_step=2, prioritized=prioritized,
                    transforms=fns))  # fmt: skip
    plain = fed(prioritized)
    rng = np.random.default_rng(0)
    for _ in range(15):
        tw.add(random_step(rng, 2, p_end=0.2))
    assert tw.buf.transforms == tuple(fns)
    got = host(tw.buf.sample(16, transform=double_reward))
    want = plain.sample(16)
    for fn in (*fns, double_reward):
        want = fn(want)
    assert_bit_identical(got, host(want))
    core = tw.np_buf.get_transitions(got["ids"])
    core = core.replace(weights=want["weights"].numpy())
    if prioritized:
        core = core.replace(probabilities=want["probabilities"].numpy())
    for fn in (*fns, double_reward):
        core = fn(core)
    assert_bit_identical(got, {k: np.asarray(core[k]) for k in got})
    # get_transitions is not transformed; sequences take the call's transform only
    ids = torch.from_numpy(got["ids"])
    assert torch.equal(tw.buf.get_transitions(ids)["reward"], plain.get_transitions(ids)["reward"])
    seq = tw.buf.sample_sequences(4, 3, transform=add_one_to_obs)
    assert "tag" in seq and torch.equal(seq["obs"], plain.sample_sequences(4, 3)["obs"] + 1)


@pytest.mark.parametrize("prioritized", [False, True])
def test_a_raising_transform_rolls_the_draw_back(prioritized: bool) -> None:
    lim = rr.MinSize(1)
    buf = fed(prioritized, rate_limiter=lim)
    twin = fed(prioritized)

    def boom(batch: Any) -> Any:
        raise ValueError("boom")

    for call in (lambda: buf.sample(8, transform=boom),
                 lambda: buf.sample_sequences(4, 2, transform=boom)):  # fmt: skip
        with pytest.raises(ValueError, match="boom"):
            call()
    with pytest.raises(TypeError, match="must return a DeviceBatch"):
        buf.sample(8, transform=lambda b: dict(b))
    assert lim.stats.samples == 0
    if prioritized:
        assert buf.beta_step == twin.beta_step == 0  # type: ignore[attr-defined]
    assert_bit_identical(host(buf.sample(8)), host(twin.sample(8)))


def test_bindable_and_non_callable_transforms_are_refused_by_name() -> None:
    her = rr.HindsightRelabel(lambda ag, g, info: np.zeros(len(ag), np.float32))
    with pytest.raises(rr.ConfigError, match=r"transforms\[1\]: HindsightRelabel is a bindable"):
        make("cpu", capacity=16, num_envs=2, transforms=[double_reward, her])
    with pytest.raises(rr.ConfigError, match=r"transforms\[0\]: expected a callable"):
        make("cpu", capacity=16, num_envs=2, transforms=[3])
    with pytest.raises(rr.ConfigError, match="transforms: expected a sequence"):
        make("cpu", capacity=16, num_envs=2, transforms=double_reward)
    buf = fed(False)
    before = buf._gen.get_state()
    with pytest.raises(rr.ConfigError, match="transform: HindsightRelabel"):
        buf.sample(4, transform=her)
    with pytest.raises(rr.ConfigError, match="transform: expected a callable"):
        buf.sample_sequences(4, 2, transform="x")  # type: ignore[arg-type]
    assert torch.equal(buf._gen.get_state(), before)
    with pytest.raises(rr.ConfigError, match="HindsightRelabel is a bindable"):
        rr.ReplayBuffer(16, dict(FIELDS), storage="torch", transforms=[her])


def test_the_core_constructor_routes_transforms() -> None:
    buf: Any = rr.ReplayBuffer(16, dict(FIELDS), num_envs=2, storage="torch",
                               transforms=[double_reward])  # fmt: skip
    assert isinstance(buf, rrt.DeviceReplayBuffer) and buf.transforms == (double_reward,)
