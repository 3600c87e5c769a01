"""nnabla-rl's ``HindsightReplayBuffer`` as a drop-in (issue 13).

Written from nnabla-rl's behaviour (seed 003: ``HindsightReplayBuffer(reward_function,
hindsight_prob=0.8, capacity=None)``, a ``ReplayBuffer`` whose ``append`` raises
``RuntimeError`` for a state that is not the 3-tuple ``(observation, desired_goal,
achieved_goal)`` and ``ValueError`` for an ``info`` that is not a dict, and whose
``sample_indices`` relabels; and nnabla-rl's HER buffer code):

* ``append`` updates the experience's own ``info`` dict in place with ``index_in_episode`` and
  ``episode_end_index`` and stores the experience object as any ``ReplayBuffer`` does (no
  layout or dtype rule);
* ``sample_indices`` returns ``self[index]`` or, with probability ``hindsight_prob`` (drawn from
  ``rl.random.drng``), its hindsight version: a future index drawn uniformly among the steps
  ``index_in_episode .. episode_end_index`` of its episode, the goal ``g`` being that
  experience's ``s_next[2]``, the states' desired goals replaced by ``g`` and the reward
  ``reward_function(s_next[2], g, info)`` as returned; the running episode is relabelled with
  the steps appended so far.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
from scipy.stats import chisquare

from rlreplay.compat.nnabla_rl.replay_buffers import HindsightReplayBuffer
from rlreplay.compat.nnabla_rl.utils.reproductions import set_global_seed

P_CHI = 1e-3


def goal_step(t: int, *, done: bool = False, goal_dim: int = 2, info: Any = None) -> Any:
    """Step ``t``: observation ``t``, achieved goal ``t`` (``t + 1`` after the step)."""
    g = np.full(goal_dim, -1.0)
    s = (np.full(3, float(t)), g, np.full(goal_dim, float(t)))
    s_next = (np.full(3, t + 1.0), g, np.full(goal_dim, t + 1.0))
    return (s, np.zeros(1), -1.0, 0.0 if done else 1.0, s_next, {} if info is None else info)


def distance_reward(achieved: Any, goal: Any, info: dict[str, Any]) -> float:
    return float(np.asarray(goal)[0] - np.asarray(achieved)[0])


def test_append_writes_nnabla_rl_info_keys_in_place() -> None:
    buffer = HindsightReplayBuffer(distance_reward, hindsight_prob=0.0, capacity=100)
    infos = [{"t": t} for t in range(7)]
    for t in range(4):
        buffer.append(goal_step(t, done=t == 3, info=infos[t]))
    for t in range(4, 7):  # a running episode of 3 steps so far
        buffer.append(goal_step(t, info=infos[t]))
    for t in range(4):
        assert infos[t] == {"t": t, "index_in_episode": t, "episode_end_index": 3}
        assert buffer[t][5] is infos[t]  # the same dict, as nnabla-rl's ring keeps it
    assert [buffer[t][5]["index_in_episode"] for t in range(4, 7)] == [0, 1, 2]
    assert all(buffer[t][5]["episode_end_index"] == 2 for t in range(4, 7))
    buffer.append(goal_step(7, done=True, info=infos[0] | {"x": 1}))
    assert all(infos[t]["episode_end_index"] == 3 for t in range(4, 7))  # the episode's end


def test_accepts_any_goal_layout_and_gives_it_back_as_appended() -> None:
    """nnabla-rl stores experience objects: no shape or dtype rule across experiences."""
    buffer = HindsightReplayBuffer(distance_reward, hindsight_prob=0.0, capacity=10)
    exps = [
        goal_step(0, goal_dim=2),
        goal_step(1, goal_dim=3, done=True),  # another goal shape
        ((np.zeros(3, np.float32), [1.0, 2.0], [0.0]), 1, 0, 1.0, ((0,), [1.0, 2.0], [1]), {}),
        [(0, 1, 2), 0, np.float32(0.5), 0, (1, 1, 3), {}],  # a list, Python numbers
    ]  # fmt: skip
    buffer.append_all(exps)
    assert len(buffer) == 4
    got = [buffer[i] for i in range(4)]
    assert got[3] is exps[3] and got[2][0][1] == [1.0, 2.0] and got[2][2] == 0
    assert got[1][0][2].shape == (3,)


def test_relabelled_reward_is_what_reward_function_returns() -> None:
    """nnabla-rl puts ``reward_function``'s value into the experience: no cast."""
    returned: list[Any] = [np.float32(0.5), 7, np.array([1.5])]
    for value in returned:
        buffer = HindsightReplayBuffer(lambda a, g, i, v=value: v, hindsight_prob=1.0, seed=0)
        buffer.append_all([goal_step(t, done=t == 2) for t in range(3)])
        experiences, _ = buffer.sample_indices([0, 1, 2])
        for e in experiences:
            assert e[2] is value


def test_running_episode_goals_come_from_the_steps_so_far_uniformly() -> None:
    buffer = HindsightReplayBuffer(distance_reward, hindsight_prob=1.0, seed=3)
    buffer.append_all([goal_step(t, done=t == 1) for t in range(2)])  # episode [0, 1]
    buffer.append_all([goal_step(t) for t in range(2, 6)])  # running: steps 2..5 so far
    counts: Counter[float] = Counter()
    for _ in range(1500):
        (e,), _ = buffer.sample_indices([3])  # step 3: futures 3, 4, 5 -> goals 4, 5, 6
        counts[float(e[0][1][0])] += 1
        assert e[2] == distance_reward(e[4][2], e[0][1], e[5])
        assert e[4][1] is e[0][1]
    assert sorted(counts) == [4.0, 5.0, 6.0]
    assert chisquare([counts[g] for g in (4.0, 5.0, 6.0)]).pvalue > P_CHI
    buffer.append(goal_step(6, done=True))  # the episode grows: step 7 becomes a goal
    seen = {float(buffer.sample_indices([3])[0][0][0][1][0]) for _ in range(300)}
    assert seen == {4.0, 5.0, 6.0, 7.0}


def test_goals_never_cross_into_another_episode_through_ring_wraps() -> None:
    capacity = 7
    buffer = HindsightReplayBuffer(distance_reward, hindsight_prob=1.0, capacity=capacity, seed=5)
    lengths = [3, 5, 2, 4, 6, 1, 3]
    exps, episode_of = [], []
    t = 0
    for k, n in enumerate(lengths):
        for j in range(n):
            exps.append(goal_step(t, done=j == n - 1))
            episode_of.append(k)
            t += 1
    buffer.append_all(exps)
    kept = list(range(len(exps) - capacity, len(exps)))
    for _ in range(30):
        experiences, _ = buffer.sample(num_samples=capacity)
        for e in experiences:
            step = int(e[0][0][0])
            goal_step_of = int(e[0][1][0]) - 1  # goal of step u is u + 1
            assert step <= goal_step_of and goal_step_of in kept
            assert episode_of[goal_step_of] == episode_of[step]


def test_errors_as_nnabla_rl() -> None:
    buffer = HindsightReplayBuffer(distance_reward, capacity=3)
    s = np.zeros(2)
    with pytest.raises(RuntimeError, match="tuple observation"):
        buffer.append((s, 0, 0.0, 1.0, s, {}))
    with pytest.raises(RuntimeError, match="3 elements"):
        buffer.append(((s, s), 0, 0.0, 1.0, (s, s), {}))
    with pytest.raises(IndexError):  # 0.16.0 reads info as experience[5]: a 5-tuple has none
        buffer.append(((s, s, s), 0, 0.0, 1.0, (s, s, s)))
    with pytest.raises(TypeError):  # not subscriptable: 0.16.0's ``experience[0]``
        buffer.append(5)
    assert len(buffer) == 0
    with pytest.raises(ZeroDivisionError):
        HindsightReplayBuffer(distance_reward, capacity=0).append(goal_step(0))
    buffer.append(goal_step(0))
    with pytest.raises(KeyError):
        buffer.sample_indices([1])
    with pytest.raises(NotImplementedError):
        buffer.sample_indices([0], num_steps=2)


def test_draws_follow_set_global_seed() -> None:
    def run() -> list[float]:
        buffer = HindsightReplayBuffer(distance_reward)
        buffer.append_all([goal_step(t, done=t % 4 == 3) for t in range(12)])
        out = []
        for _ in range(5):
            experiences, _ = buffer.sample(num_samples=4)
            out += [float(e[0][1][0]) for e in experiences]
        return out

    set_global_seed(2)
    first = run()
    set_global_seed(2)
    assert run() == first


@pytest.mark.parametrize("capacity", [None, 9, 40])
def test_draws_are_nnabla_rls_interleaved_stream(capacity: int | None) -> None:
    """nnabla-rl 0.16.0 draws per index, in order: ``drng.random()``, then, when it is
    ``<= hindsight_prob``, ``drng.integers(t, episode_end + 1)`` (positions). With
    ``capacity=None`` nnabla-rl's ``min(end + 1, self.capacity)`` raises ``TypeError``
    (a bug: its default capacity can't relabel); here the range is the same as bounded."""

    def reward(achieved: Any, goal: Any, info: Any) -> float:
        return -float(np.abs(achieved - goal).sum())

    def obs(k: int) -> tuple[Any, ...]:
        return (
            np.full(2, k, np.float32),
            np.full(2, 99.0, np.float32),
            np.full(2, k + 0.5, np.float32),
        )

    buffer = HindsightReplayBuffer(reward, hindsight_prob=0.5, capacity=capacity)
    lengths = [3, 5, 2, 4, 6]
    ends, t = [], 0
    for length in lengths:
        for i in range(length):
            buffer.append(
                (obs(t), np.zeros(1), 0.0, 0.0 if i == length - 1 else 1.0, obs(t + 1), {})
            )
            t += 1
        ends += [t - 1] * length
    first = t - len(buffer)
    set_global_seed(3)
    experiences, _ = buffer.sample(num_samples=8)
    reference = np.random.default_rng(3)
    drawn = reference.choice(len(buffer), size=8, replace=False)  # the base buffer's draw
    for e, position in zip(experiences, drawn.tolist(), strict=True):
        step = first + position
        assert e[0][0][0] == step
        if not reference.random() > 0.5:
            future = int(reference.integers(position, ends[step] - first + 1)) + first
            assert e[0][1][0] == future + 1.5  # s_next[2] of the future step: (future + 1) + 0.5
        else:
            assert e[0][1][0] == 99.0
