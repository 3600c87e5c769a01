"""The JAX buffer holds what the NumPy core holds for the same stream of steps: the same
sampleable ids and, for every one, the same transition bit for bit (n-step rewards and
discounts, next and final observations, terminated vs truncated, frame stacks), through
episode ends, truncations, wraparound, several envs and dropped episodes."""

from __future__ import annotations

import pytest

jax = pytest.importorskip("jax")

import numpy as np  # noqa: E402

import rlreplay as rr  # noqa: E402
import rlreplay.jax as rrj  # noqa: E402
from tests.jax.helpers import (  # noqa: E402
    Twins,
    assert_bit_identical,
    assert_same_contents,
    host_batch,
    jax_buffer,
    random_step,
)

CONFIGS = {
    "3-step, 2 envs": dict(capacity=16, num_envs=2, n_step=3, finals_per_env=8),
    "2-step, 3 envs, stack 3 zero": dict(
        capacity=18, num_envs=3, n_step=2, frame_stack=3, finals_per_env=6
    ),
    "1-step, 1 env, stack 2 first": dict(
        capacity=12, num_envs=1, frame_stack=2, stack_pad="first", finals_per_env=12
    ),
    "3-step, next_fields": dict(
        capacity=16, num_envs=2, n_step=3, next_fields=("action",), finals_per_env=8
    ),
    "prioritized, 3-step, stack 2": dict(
        capacity=20, num_envs=2, n_step=3, frame_stack=2, prioritized=True, finals_per_env=10
    ),
}


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("p_end", [0.05, 0.35])
def test_same_stream_same_transitions(name: str, p_end: float) -> None:
    buf = jax_buffer(**CONFIGS[name])
    rng = np.random.default_rng(len(name) + int(100 * p_end))
    tw = Twins(buf)
    for i in range(45):  # past two wraparounds of every ring
        tw.add(random_step(rng, buf.num_envs, p_end=p_end, p_trunc=0.1))
        if i % 3 == 2:
            assert_same_contents(tw)
    assert tw.dropped == 0  # finals_per_env = C: nothing dropped


@pytest.mark.parametrize("frame_stack", [1, 3])
def test_dropped_episodes_match_a_dequeued_core_buffer(frame_stack: int) -> None:
    """With few final records per env, short episodes push the oldest ones out whole, as
    ``dequeue`` drops them from the NumPy buffer; everything else stays identical."""
    buf = jax_buffer(capacity=24, num_envs=2, n_step=2, frame_stack=frame_stack,
                     finals_per_env=2)  # fmt: skip
    rng = np.random.default_rng(frame_stack)
    tw = Twins(buf)
    for i in range(60):
        tw.add(random_step(rng, 2, p_end=0.3, p_trunc=0.1))
        if i % 2:
            assert_same_contents(tw)
    assert tw.dropped > 0


def test_golden_three_step_windows() -> None:
    """One env, episodes [0..3] terminated and [4..6] truncated; values by hand."""
    buf = jax_buffer(capacity=16, num_envs=1, n_step=3, finals_per_env=16)
    state = buf.init()
    ends = {3: "terminated", 6: "truncated"}
    for t in range(9):
        step = {
            "obs": np.full((1, 2), t, np.float32),
            "action": np.array([t], np.int32),
            "reward": np.array([2.0**t], np.float32),
            "terminated": np.array([ends.get(t) == "terminated"]),
            "truncated": np.array([ends.get(t) == "truncated"]),
            "next_obs": np.full((1, 2), 100 + t, np.float32),
        }
        state = buf.add(state, step)
    assert buf.sampleable(state, np.arange(9)).tolist() == [True] * 7 + [False] * 2
    b = host_batch(buf.get_transitions(state, np.arange(7)))
    g = np.float32(0.9)
    assert b["steps"].tolist() == [3, 3, 2, 1, 3, 2, 1]
    np.testing.assert_allclose(b["reward"][0], 1 + 2 * g + 4 * g * g, rtol=1e-6)
    np.testing.assert_allclose(b["reward"][3], 8.0)
    assert b["terminated"].tolist() == [False, True, True, True, False, False, False]
    assert b["truncated"].tolist() == [False, False, False, False, True, True, True]
    assert b["next_obs"][:, 0].tolist() == [3, 103, 103, 103, 106, 106, 106]
    np.testing.assert_allclose(b["discount"], [g**3, 0, 0, 0, g**3, g**2, g], rtol=1e-6)
    assert b["ids"].tolist() == list(range(7))


def test_frame_stacks_pad_within_their_episode() -> None:
    buf = jax_buffer(capacity=18, num_envs=3, n_step=2, frame_stack=3, finals_per_env=6)
    state = buf.init()
    for t in range(4):  # env 0: one episode of 4 steps; env 1 ends one at step 1; env 2 runs
        step = {
            "obs": np.full((3, 2), t, np.float32) + np.arange(3)[:, None] * 10,
            "action": np.zeros(3, np.int32),
            "reward": np.ones(3, np.float32),
            "terminated": np.array([t == 3, t == 1, False]),
            "truncated": np.zeros(3, bool),
            "next_obs": np.full((3, 2), -1, np.float32),
        }
        state = buf.add(state, step)
    ids = np.array([0, 3, 6, 9, 1, 4])
    assert np.asarray(buf.sampleable(state, ids)).all()
    assert not np.asarray(buf.sampleable(state, [7, 10, 8, 11])).any()  # windows not known
    b = host_batch(buf.get_transitions(state, ids))
    stacks = b["obs"][:, :, 0]
    assert stacks.tolist() == [
        [0, 0, 0], [0, 0, 1], [0, 1, 2], [1, 2, 3],  # env 0: zeros before the start
        [0, 0, 10], [0, 10, 11],  # env 1
    ]  # fmt: skip
    assert b["next_obs"][:, -1, 0].tolist() == [2, 3, -1, -1, -1, -1]


def test_vector_reward_sums_like_the_core() -> None:
    """A reward of shape (2,) takes the core's general path (other multipliers, sum order)."""
    fields = {"obs": rr.Field((1,), np.float32), "reward": rr.Field((2,), np.float32)}
    buf = rrj.make_buffer(24, fields, num_envs=2, n_step=3, gamma=0.97, finals_per_env=12)
    np_buf = rr.ReplayBuffer(24, fields, num_envs=2, n_step=3, gamma=0.97)
    state = buf.init()
    rng = np.random.default_rng(5)
    for _ in range(30):
        step = {
            "obs": rng.standard_normal((2, 1)).astype(np.float32),
            "reward": rng.standard_normal((2, 2)).astype(np.float32),
            "terminated": rng.random(2) < 0.2,
            "truncated": rng.random(2) < 0.1,
            "next_obs": rng.standard_normal((2, 1)).astype(np.float32),
        }
        state = buf.add(state, step)
        np_buf.add(**step)
    ids = np.sort(np_buf.sampleable_ids())
    ours = host_batch(buf.get_transitions(state, ids))
    theirs = {k: np.asarray(v) for k, v in np_buf.get_transitions(ids).items()}
    assert_bit_identical(ours, theirs)


def test_sampled_batches_are_their_transitions() -> None:
    buf = jax_buffer(**CONFIGS["3-step, 2 envs"])
    rng = np.random.default_rng(3)
    tw = Twins(buf)
    for _ in range(30):
        tw.add(random_step(rng, 2, p_end=0.2))
    batch = host_batch(buf.sample(tw.state, jax.random.key(1), 64))
    assert np.asarray(buf.sampleable(tw.state, batch["ids"])).all()
    again = host_batch(buf.get_transitions(tw.state, batch["ids"]))
    assert_bit_identical(batch, again)
    theirs = {k: np.asarray(v) for k, v in tw.np_buf.get_transitions(batch["ids"]).items()}
    assert_bit_identical(batch, theirs)


def test_round_trip_through_the_core_keeps_everything() -> None:
    buf = jax_buffer(**CONFIGS["prioritized, 3-step, stack 2"])
    rng = np.random.default_rng(11)
    tw = Twins(buf)
    for _ in range(33):
        tw.add(random_step(rng, 2, p_end=0.25))
    ids = np.asarray(buf.sample(tw.state, jax.random.key(0), 8)["ids"])
    tw.state = buf.update_priorities(tw.state, ids, np.linspace(0.5, 3.0, 8))
    np_buf = rrj.to_replay_buffer(buf, tw.state)
    assert isinstance(np_buf, rr.PrioritizedReplayBuffer)
    buf2, state2 = rrj.from_replay_buffer(np_buf, finals_per_env=buf.config.finals_per_env)
    for name in ("count", "head", "lo", "hi", "last_end", "f_count", "f_head", "ep_start",
                 "final_fid"):  # fmt: skip
        np.testing.assert_array_equal(getattr(state2, name), getattr(tw.state, name), name)
    for name in tw.state.columns:
        np.testing.assert_array_equal(state2.columns[name], tw.state.columns[name], name)
    assert tw.state.priorities is not None and state2.priorities is not None
    np.testing.assert_array_equal(state2.priorities.prio, tw.state.priorities.prio)
    np.testing.assert_array_equal(state2.priorities.sums[0], tw.state.priorities.sums[0])
    for a, b in zip(state2.priorities.sums, tw.state.priorities.sums, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    for a, b in zip(state2.priorities.mins, tw.state.priorities.mins, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    assert float(state2.priorities.max_priority) == float(tw.state.priorities.max_priority)
    # The same transitions, and the core buffer from it holds the same ones too.
    live = np.sort(np_buf.sampleable_ids())
    ours = host_batch(buf2.get_transitions(state2, live))
    theirs = {k: np.asarray(v) for k, v in np_buf.get_transitions(live).items()}
    assert_bit_identical(ours, theirs)
