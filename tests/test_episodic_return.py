"""Recorded discounted returns (ALF ``record_episodic_return``): golden tables and a reference.

When an episode completes, each of its stored steps ``t`` holds
``G_t = sum_{j=t}^{T} gamma^(j-t) clip(r_j)``; steps of running episodes hold
``default_return``. Rewards and gammas below are chosen so the expected values are exact.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rlreplay as rr

D = -7.0  # a default_return that no real return in these tables equals


def make(
    capacity: int = 32,
    *,
    gamma: float = 0.5,
    clip: tuple[float, float] | None = None,
    default: float | None = D,
    **kw: Any,
) -> rr.ReplayBuffer:
    extra: dict[str, Any] = {} if default is None else {"default_return": default}
    return rr.ReplayBuffer(
        capacity,
        {"obs": rr.Field((), np.float32)},
        gamma=gamma,
        record_episodic_return=True,
        reward_clip=clip,
        seed=kw.pop("seed", 0),
        **extra,
        **kw,
    )


def feed(buf: rr.ReplayBuffer, rewards: list[float], ends: dict[int, str]) -> list[int]:
    """One step per reward; ``ends[i]`` is "terminated" or "truncated" for episode ends."""
    ids = []
    for i, r in enumerate(rewards):
        end = ends.get(i, "")
        ids += buf.add(
            obs=float(i),
            reward=r,
            terminated=end == "terminated",
            truncated=end == "truncated",
            next_obs=-1.0,
        ).tolist()
    return ids


def stored_returns(buf: rr.ReplayBuffer, env: int = 0) -> list[float]:
    g = buf.gather_all()
    return g.discounted_return[env][g.mask[env]].tolist()


# rewards 1, 2, 3 (terminated) | 4, -8 (truncated) | 1, 1 (running)
REWARDS = [1.0, 2.0, 3.0, 4.0, -8.0, 1.0, 1.0]
ENDS = {2: "terminated", 4: "truncated"}
GOLDEN = [
    # gamma, reward_clip, expected per step
    (0.5, None, [1 + 1 + 0.75, 2 + 1.5, 3, 4 - 4, -8, D, D]),
    (0.5, (-1.0, 2.0), [1 + 1 + 0.5, 2 + 1, 2, 2 - 0.5, -1, D, D]),
    (1.0, None, [6, 5, 3, -4, -8, D, D]),
    (0.0, None, [1, 2, 3, 4, -8, D, D]),
    (0.0, (0.0, 0.0), [0, 0, 0, 0, 0, D, D]),
]


@pytest.mark.parametrize(("gamma", "clip", "expected"), GOLDEN)
def test_golden_returns(
    gamma: float, clip: tuple[float, float] | None, expected: list[float]
) -> None:
    buf = make(gamma=gamma, clip=clip)
    ids = feed(buf, REWARDS, ENDS)
    assert stored_returns(buf) == expected
    b = buf.get_transitions(buf.sampleable_ids())  # the newest step's window is not known yet
    assert b.discounted_return.dtype == np.float32
    assert b.discounted_return.tolist() == expected[: len(b.ids)]
    assert b.ids.tolist() == ids[: len(b.ids)]


def test_returns_appear_when_the_episode_completes() -> None:
    buf = make()
    feed(buf, [1.0, 2.0], {})
    assert stored_returns(buf) == [D, D]  # running
    buf.add(obs=2.0, reward=3.0, terminated=True, truncated=False, next_obs=-1.0)
    assert stored_returns(buf) == [2.75, 3.5, 3.0]
    buf.add(obs=3.0, reward=5.0, terminated=False, truncated=False)
    assert stored_returns(buf) == [2.75, 3.5, 3.0, D]


def test_default_return_defaults_to_minus_1000() -> None:
    buf = make(default=None)
    feed(buf, [1.0, 1.0], {})
    assert stored_returns(buf) == [-1000.0, -1000.0]


def test_episode_cut_by_overwriting_before_it_ends() -> None:
    buf = make(4)
    feed(buf, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], {5: "terminated"})  # steps 2..5 stored
    assert stored_returns(buf) == [3 + 2 + 1.25 + 0.75, 4 + 2.5 + 1.5, 5 + 3, 6]


def test_returns_survive_when_the_episode_is_cut_after_it_ends() -> None:
    buf = make(4)
    feed(buf, [1.0, 2.0, 3.0, 8.0, 8.0], {2: "terminated"})  # step 0 overwritten
    assert stored_returns(buf) == [3.5, 3.0, D, D]


def test_extend_with_several_episodes_in_one_call() -> None:
    buf = make(16)
    r = np.arange(1, 8, dtype=np.float32)
    term = np.isin(np.arange(7), [1, 4])
    buf.extend(obs=r, reward=r, terminated=term, truncated=np.zeros(7, bool), next_obs=-r)
    assert stored_returns(buf) == [2.0, 2.0, 3 + 2 + 1.25, 4 + 2.5, 5.0, D, D]


def test_extend_longer_than_the_ring() -> None:
    buf = make(4)
    r = np.ones(10, np.float32)
    term = np.isin(np.arange(10), [2, 8])  # the episode 3..8 spans the write chunks
    buf.extend(obs=r, reward=r, terminated=term, truncated=np.zeros(10, bool), next_obs=-r)
    assert stored_returns(buf) == [1.75, 1.5, 1.0, D]  # steps 6..9 stored


def test_multi_env_returns() -> None:
    buf = make(2 * 8, num_envs=2)
    rewards = [[1.0, 2.0], [2.0, 4.0], [3.0, 8.0], [4.0, 2.0]]
    term = [[False, False], [False, True], [True, False], [False, False]]
    for t in range(4):
        buf.add(
            obs=np.array([t, t], np.float32),
            reward=np.array(rewards[t], np.float32),
            terminated=np.array(term[t]),
            truncated=np.array([False, t == 3]),
            next_obs=np.zeros(2, np.float32),
        )
    # env 0: 1, 2, 3 terminated at 2 | 4 running; env 1: 2, 4 terminated at 1 | 8, 2 truncated
    assert stored_returns(buf, 0) == [2.75, 3.5, 3.0, D]
    assert stored_returns(buf, 1) == [4.0, 4.0, 9.0, 2.0]
    buf.add(
        env_ids=[0],
        obs=np.array([4.0], np.float32),
        reward=np.array([2.0], np.float32),
        terminated=np.array([True]),
        truncated=np.array([False]),
        next_obs=np.zeros(1, np.float32),
    )
    assert stored_returns(buf, 0) == [2.75, 3.5, 3.0, 5.0, 2.0]
    assert stored_returns(buf, 1) == [4.0, 4.0, 9.0, 2.0]


def test_returns_after_dequeue_and_clear() -> None:
    buf = make(8)
    feed(buf, [1.0, 2.0, 3.0], {})
    buf.dequeue(1)  # the running episode lost its first step
    buf.add(obs=3.0, reward=4.0, terminated=True, truncated=False, next_obs=-1.0)
    assert stored_returns(buf) == [2 + 1.5 + 1, 3 + 2, 4]
    feed(buf, [1.0, 1.0], {})
    buf.clear()
    buf.add(obs=5.0, reward=2.0, terminated=False, truncated=True, next_obs=-1.0)
    assert stored_returns(buf) == [2.0]  # only the part stored after the clear


# ---------------------------------------------------------------------- in samples
def test_discounted_return_in_samples_sequences_episodes_and_fifo() -> None:
    buf = make(16, n_step=3)
    feed(buf, REWARDS, ENDS)
    expected = dict(enumerate(GOLDEN[0][2]))
    b = buf.sample(64)
    assert b.discounted_return.shape == (64,)
    assert b.discounted_return.tolist() == [expected[i] for i in b.ids.tolist()]
    s = buf.sample_sequences(64, 3)
    assert s.discounted_return.shape == (64, 3) and s.discounted_return.dtype == np.float32
    for row, t0 in enumerate(s.ids.tolist()):
        want = [expected[t0 + j] if s.mask[row, j] else 0.0 for j in range(3)]
        assert s.discounted_return[row].tolist() == want  # padded steps are zero
    e = buf.sample_episodes(8)
    for row, t0 in enumerate(e.ids.tolist()):
        n = int(e.lengths[row])
        assert e.discounted_return[row, :n].tolist() == [expected[t0 + j] for j in range(n)]
    assert buf.get_episode(5).discounted_return.tolist() == [D, D]
    d = buf.dequeue(2)
    assert d.discounted_return.tolist() == [[expected[0], expected[1]]]


def test_transitions_without_the_option_have_no_discounted_return() -> None:
    buf = rr.ReplayBuffer(8, {"obs": rr.Field((), np.float32)})
    buf.add(obs=0.0, reward=1.0, terminated=True, truncated=False, next_obs=1.0)
    assert "discounted_return" not in buf.sample(2)
    assert "discounted_return" not in buf.sample_sequences(2, 1)


# ---------------------------------------------------------------------- against a reference
def reference_returns(
    rewards: list[float], dones: list[bool], gamma: float, clip: tuple[float, float] | None
) -> list[float | None]:
    """``G_t`` of every step ever added (``None`` while its episode runs)."""
    out: list[float | None] = [None] * len(rewards)
    g: float | None = None
    for t in range(len(rewards) - 1, -1, -1):
        if dones[t]:
            g = 0.0
        if g is not None:
            r = rewards[t] if clip is None else min(max(rewards[t], clip[0]), clip[1])
            g = r + gamma * g
        out[t] = g
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_histories_match_the_reference(data: st.DataObject) -> None:
    E = data.draw(st.integers(1, 3))
    C = data.draw(st.integers(2, 7))
    gamma = data.draw(st.sampled_from([0.0, 0.5, 0.9, 1.0]))
    clip = data.draw(st.sampled_from([None, (-1.0, 1.0), (0.0, 2.5)]))
    buf = make(E * C, num_envs=E, gamma=gamma, clip=clip)
    rewards: list[list[float]] = [[] for _ in range(E)]
    dones: list[list[bool]] = [[] for _ in range(E)]
    head = [0] * E  # oldest step left by clear/dequeue
    reward = st.sampled_from([-3.0, -0.5, 0.0, 1.0, 2.0, 4.0])
    for _ in range(data.draw(st.integers(1, 20))):
        kind = data.draw(st.sampled_from(["add", "add", "extend", "dequeue", "clear"]))
        if kind == "add":
            envs = data.draw(st.lists(st.integers(0, E - 1), min_size=1, max_size=E, unique=True))
            r = [data.draw(reward) for _ in envs]
            done = [data.draw(st.booleans()) for _ in envs]
            buf.add(
                env_ids=envs,
                obs=np.zeros(len(envs), np.float32),
                reward=np.array(r, np.float32),
                terminated=np.array(done),
                truncated=np.zeros(len(envs), bool),
                next_obs=np.zeros(len(envs), np.float32),
            )
            for e, ri, di in zip(envs, r, done, strict=True):
                rewards[e].append(ri)
                dones[e].append(di)
        elif kind == "extend":
            e = data.draw(st.integers(0, E - 1))
            r = data.draw(st.lists(reward, min_size=1, max_size=2 * C + 1))
            done = [data.draw(st.booleans()) for _ in r]
            buf.extend(
                env_id=e,
                obs=np.zeros(len(r), np.float32),
                reward=np.array(r, np.float32),
                terminated=np.zeros(len(r), bool),
                truncated=np.array(done),
                next_obs=np.zeros(len(r), np.float32),
            )
            rewards[e] += r
            dones[e] += done
        elif kind == "dequeue":
            stored = [len(rewards[e]) - max(head[e], len(rewards[e]) - C) for e in range(E)]
            n = min(stored)
            if n:
                buf.dequeue(n)
                head = [max(head[e], len(rewards[e]) - C) + n for e in range(E)]
        else:
            buf.clear()
            head = [len(r) for r in rewards]
    g = buf.gather_all()
    for e in range(E):
        lo = max(head[e], len(rewards[e]) - C)
        ref = reference_returns(rewards[e], dones[e], gamma, clip)[lo:]
        want = [D if x is None else x for x in ref]
        got = g.discounted_return[e][g.mask[e]]
        assert g.ids[e][g.mask[e]].tolist() == [t * E + e for t in range(lo, len(rewards[e]))]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------- state and config
def test_checkpoint_round_trip(tmp_path: Path) -> None:
    def fill(buf: rr.ReplayBuffer, start: int, stop: int) -> None:
        for t in range(start, stop):
            buf.add(
                obs=np.array([t, -t], np.float32),
                reward=np.array([t % 4 - 1.0, 3.0], np.float32),
                terminated=np.array([t % 5 == 4, False]),
                truncated=np.array([False, t % 7 == 6]),
                next_obs=np.zeros(2, np.float32),
            )

    kw: dict[str, Any] = {"num_envs": 2, "clip": (-0.5, 2.0), "default": 11.0, "seed": 9}
    live, twin = make(2 * 6, **kw), make(2 * 6, **kw)
    fill(live, 0, 13)
    fill(twin, 0, 13)  # both mid-episode in both envs
    live.save(tmp_path / "ckpt")
    loaded = rr.load(tmp_path / "ckpt")
    assert loaded.record_episodic_return and loaded.reward_clip == (-0.5, 2.0)
    assert loaded.default_return == 11.0
    np.testing.assert_array_equal(
        loaded.gather_all().discounted_return, twin.gather_all().discounted_return
    )
    fill(loaded, 13, 25)  # episodes that began before the save complete after the load
    fill(twin, 13, 25)
    np.testing.assert_array_equal(
        loaded.gather_all().discounted_return, twin.gather_all().discounted_return
    )
    for _ in range(3):
        a, b = loaded.sample(16), twin.sample(16)
        for name in b:
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    state = twin.state_dict()
    other = make(2 * 6, **kw)
    other.load_state_dict(state)
    np.testing.assert_array_equal(
        other.gather_all().discounted_return, twin.gather_all().discounted_return
    )


def test_scalar_reward_is_required() -> None:
    fields = {"obs": rr.Field((), np.float32), "reward": rr.Field((2,), np.float32)}
    with pytest.raises(rr.ConfigError, match="scalar reward"):
        rr.ReplayBuffer(8, fields, record_episodic_return=True)
    rr.ReplayBuffer(8, fields)  # fine without the option
    buf = rr.ReplayBuffer(
        8, {"obs": rr.Field((), np.float32), "reward": rr.Field((), np.float64)},
        record_episodic_return=True, gamma=0.5,
    )  # fmt: skip
    buf.add(obs=0.0, reward=1.0, terminated=False, truncated=False)
    buf.add(obs=1.0, reward=2.0, terminated=True, truncated=False, next_obs=2.0)
    assert buf.gather_all().discounted_return.tolist() == [[2.0, 2.0]]


@pytest.mark.parametrize("clip", [(1.0, 0.0), (1.0,), "ab", 3.0])
def test_bad_reward_clip_is_rejected(clip: Any) -> None:
    with pytest.raises(rr.ConfigError):
        make(clip=clip)
