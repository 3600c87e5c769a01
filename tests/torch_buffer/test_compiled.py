"""rlreplay.torch.compiled_sampler: one compiled graph per buffer and batch size that draws what
``sample`` draws, bit for bit, from the same generator state, follows the buffer through adds,
clear and episode ends without recompiling, and refuses the laws it does not compile."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import rlreplay as rr
import rlreplay.torch as rrt
from tests.torch_buffer.helpers import make, on, random_step

CONFIGS: dict[str, dict[str, Any]] = {
    "3-step, 2 envs, stack 3 zero, next_fields": dict(
        capacity=24,
        num_envs=2,
        n_step=3,
        frame_stack=3,
        next_fields=("action",),
        finals_per_env=6,
    ),
    "1-step, 1 env, stack 2 first": dict(
        capacity=12, num_envs=1, frame_stack=2, stack_pad="first", finals_per_env=12
    ),
    "prioritized, 3-step, 2 envs, beta schedule": dict(
        capacity=24, num_envs=2, n_step=3, prioritized=True, beta_steps=20, alpha=0.7
    ),
}


def assert_same_batch(got: rrt.DeviceBatch, want: rrt.DeviceBatch) -> None:
    assert list(got) == list(want)
    for key in want:
        a, b = got[key], want[key]
        assert a.dtype == b.dtype and a.shape == b.shape, key
        assert torch.equal(a.view(torch.uint8) if a.dtype == torch.bool else a, b), key


@pytest.mark.parametrize("name", list(CONFIGS))
def test_draws_what_sample_draws(device: str, name: str) -> None:
    import torch._dynamo as dynamo

    dynamo.reset()
    dynamo.utils.counters.clear()
    eager, compiled = make(device, **CONFIGS[name]), make(device, **CONFIGS[name])
    sample = rrt.compiled_sampler(compiled, 16)
    rng = np.random.default_rng(7)
    for i in range(30):  # past two wraparounds, episode ends, a clear
        step = on(random_step(rng, eager.num_envs, p_end=0.2), device)
        eager.add(**step)
        compiled.add(**step)
        if i == 17:
            eager.clear()
            compiled.clear()
        assert_same_batch(got := sample(), eager.sample(16))
        if eager.config.prioritized:
            p = got["reward"].abs().double() + 0.1
            eager.update_priorities(got["ids"], p)
            compiled.update_priorities(got["ids"], p)
    assert dynamo.utils.counters["stats"]["unique_graphs"] == 1  # no recompile


def test_follows_adds_of_env_subsets(device: str) -> None:
    """Once an add names its envs the buffer counts steps per env: one more graph, then the
    same draws as ``sample`` again."""
    import torch._dynamo as dynamo

    dynamo.reset()
    dynamo.utils.counters.clear()
    config = dict(capacity=24, num_envs=3, n_step=2, frame_stack=2, finals_per_env=8)
    eager, compiled = make(device, **config), make(device, **config)
    sample = rrt.compiled_sampler(compiled, 8)
    rng = np.random.default_rng(3)
    for i in range(24):
        env_ids = None if i < 6 else sorted(rng.choice(3, 2, replace=False).tolist())
        step = on(random_step(rng, 3 if env_ids is None else 2, p_end=0.25), device)
        for buf in (eager, compiled):
            buf.add(**step) if env_ids is None else buf.add(env_ids=env_ids, **step)
        assert_same_batch(sample(), eager.sample(8))
    assert dynamo.utils.counters["stats"]["unique_graphs"] <= 2


def test_empty_buffer_gives_zero_weights(device: str) -> None:
    buf = make(device, capacity=8)
    batch = rrt.compiled_sampler(buf, 4)()
    assert batch["weights"].tolist() == [0.0] * 4


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(prioritized=True, variant="rank_based"), "variant='rank_based'"),
        (dict(recent_ratio=0.5, recent_steps=4), "recent_ratio=0.5"),
        (dict(replacement=False), "replacement=False"),
    ],
)
def test_refuses_other_laws(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(rr.ConfigError, match=match):
        rrt.compiled_sampler(make("cpu", capacity=8, **kwargs), 4)


@pytest.mark.parametrize("batch_size", [0, -1, 2.0])
def test_refuses_bad_batch_size(batch_size: Any) -> None:
    with pytest.raises(rr.ConfigError, match="batch_size"):
        rrt.compiled_sampler(make("cpu", capacity=8), batch_size)
