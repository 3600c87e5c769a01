"""sample_episodes and num_episodes on the device buffer: the core's complete episodes (ended,
every step still stored, after overwrites, dequeues, dropped episodes and env subsets), drawn
uniformly, each row the core's run of that episode bit for bit."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from scipy import stats

import rlreplay as rr
from tests.torch_buffer.helpers import assert_bit_identical, host, make, random_step
from tests.torch_buffer.test_env_ids import SubsetTwins
from tests.torch_device.helpers import no_host_sync

CONFIGS: list[dict[str, Any]] = [
    dict(capacity=24, num_envs=3, n_step=2, finals_per_env=8),
    dict(capacity=24, num_envs=3, n_step=2, frame_stack=2, finals_per_env=2),  # drops episodes
    dict(capacity=20, num_envs=2, n_step=3, prioritized=True),
]


def core_episodes(tw: SubsetTwins) -> dict[int, int]:
    """First id -> length of every complete episode the core holds (its draws' support)."""
    got = tw.np_buf.sample_episodes(4000)
    ids, lengths = np.asarray(got["ids"]).tolist(), np.asarray(got["lengths"]).tolist()
    return dict(zip(ids, lengths, strict=True))


def fed(device: str, config: int, subsets: bool) -> SubsetTwins:
    tw = SubsetTwins(make(device, **CONFIGS[config]))
    rng = np.random.default_rng(config + 10 * subsets)
    E = tw.buf.num_envs
    for i in range(45):
        envs = np.flatnonzero(rng.random(E) < [0.9, 0.6, 0.4][:E]) if subsets else None
        tw.add(random_step(rng, E, p_end=0.25), envs, "tensor")
        if i == 30:
            tw.np_buf.dequeue(2, env_ids=[0])
            tw.buf.dequeue(2, [0])
            tw.np_head[0] += 2
    return tw


@pytest.mark.parametrize("config", range(len(CONFIGS)))
@pytest.mark.parametrize("subsets", [False, True])
def test_episodes_are_the_cores(device: str, config: int, subsets: bool) -> None:
    tw = fed(device, config, subsets)
    want = core_episodes(tw)
    assert int(tw.buf.num_episodes) == len(want) > 1
    b = host(tw.buf.sample_episodes(64))
    assert set(b["ids"].tolist()) <= set(want)
    np.testing.assert_array_equal(b["lengths"], [want[i] for i in b["ids"].tolist()])
    T = int(b["lengths"].max())
    assert b["mask"].shape == (64, T)
    theirs = tw.np_buf.get_sequences(b["ids"], T)
    ours = {k: v for k, v in b.items() if k != "lengths"}
    assert_bit_identical(ours, {k: np.asarray(v) for k, v in theirs.items()})
    # Uniform over the complete episodes.
    drawn = np.concatenate([tw.buf.sample_episodes(100)["ids"].cpu().numpy() for _ in range(30)])
    counts = np.array([(drawn == i).sum() for i in want])
    assert counts.sum() == drawn.size and stats.chisquare(counts).pvalue > 1e-3


def test_a_fixed_length_never_waits(device: str) -> None:
    tw = fed(device, 0, True)
    buf = tw.buf
    with no_host_sync(device) as counter:
        b = buf.sample_episodes(16, max_length=3)
        _ = buf.num_episodes
    assert dict(counter.calls) == {}
    b = host(b)
    assert b["mask"].shape == (16, 3)
    np.testing.assert_array_equal(b["mask"].sum(1), np.minimum(b["lengths"], 3))
    want = core_episodes(tw)
    np.testing.assert_array_equal(b["lengths"], [want[i] for i in b["ids"].tolist()])


def test_no_complete_episode(device: str) -> None:
    buf = make(device, capacity=16, num_envs=2)
    buf.add(
        **{
            k: torch.from_numpy(v)
            for k, v in random_step(np.random.default_rng(0), 2, p_end=0.0, p_trunc=0.0).items()
        }
    )
    assert int(buf.num_episodes) == 0
    with pytest.raises(rr.EmptyBufferError, match="no complete episode"):
        buf.sample_episodes(2)
    b = host(buf.sample_episodes(2, max_length=4))
    assert (b["lengths"] == 0).all()
    with pytest.raises(rr.ConfigError, match="max_length"):
        buf.sample_episodes(2, max_length=0)
