"""Golden tables for n-step windows: input trajectory -> expected transitions."""

from __future__ import annotations

import numpy as np
import pytest

import rlreplay as rr

G = 0.5  # a gamma whose powers are exact in float32


def make(n_step: int, capacity: int = 64, **kw: object) -> rr.ReplayBuffer:
    return rr.ReplayBuffer(
        capacity,
        {"obs": rr.Field((), np.float32), "action": rr.Field((), np.int64)},
        n_step=n_step,
        gamma=G,
        seed=0,
        **kw,  # type: ignore[arg-type]
    )


def feed(buf: rr.ReplayBuffer, length: int, end: str, first_obs: float = 0.0) -> list[int]:
    """One episode: obs first_obs + t, reward t + 1, final next_obs 100 + first_obs + length."""
    ids = []
    for t in range(length):
        last = t == length - 1
        ids += buf.add(
            obs=first_obs + t,
            action=t,
            reward=float(t + 1),
            next_obs=100.0 + first_obs + length,
            terminated=last and end == "terminated",
            truncated=last and end == "truncated",
        ).tolist()
    return ids


def rows(buf: rr.ReplayBuffer) -> list[tuple[float, float, float, bool, bool, float, int]]:
    b = buf.get_transitions(buf.sampleable_ids())
    return [
        (float(o), float(r), float(no), bool(te), bool(tr), float(d), int(m))
        for o, r, no, te, tr, d, m in zip(
            b.obs, b.reward, b.next_obs, b.terminated, b.truncated, b.discount, b.steps, strict=True
        )
    ]


# (obs, reward, next_obs, terminated, truncated, discount, steps) for every sampleable step.
GOLDEN = {
    # episode shorter than n (2 < 3): every window reaches the terminal step
    ("terminated", 2, 3): [
        (0.0, 1 + G * 2, 102.0, True, False, 0.0, 2),
        (1.0, 2.0, 102.0, True, False, 0.0, 1),
    ],
    # episode as long as n: the terminal is exactly the n-th step of the first window
    ("terminated", 3, 3): [
        (0.0, 1 + G * 2 + G**2 * 3, 103.0, True, False, 0.0, 3),
        (1.0, 2 + G * 3, 103.0, True, False, 0.0, 2),
        (2.0, 3.0, 103.0, True, False, 0.0, 1),
    ],
    # longer than n: full windows bootstrap from obs_{t+3}; the terminal is the 3rd step of t=2
    ("terminated", 5, 3): [
        (0.0, 1 + G * 2 + G**2 * 3, 3.0, False, False, G**3, 3),
        (1.0, 2 + G * 3 + G**2 * 4, 4.0, False, False, G**3, 3),
        (2.0, 3 + G * 4 + G**2 * 5, 105.0, True, False, 0.0, 3),
        (3.0, 4 + G * 5, 105.0, True, False, 0.0, 2),
        (4.0, 5.0, 105.0, True, False, 0.0, 1),
    ],
    # truncated tail: the true final observation, and discount gamma^m (bootstrap)
    ("truncated", 4, 3): [
        (0.0, 1 + G * 2 + G**2 * 3, 3.0, False, False, G**3, 3),
        (1.0, 2 + G * 3 + G**2 * 4, 104.0, False, True, G**3, 3),
        (2.0, 3 + G * 4, 104.0, False, True, G**2, 2),
        (3.0, 4.0, 104.0, False, True, G, 1),
    ],
    # n = 1: the plain one-step transition
    ("terminated", 3, 1): [
        (0.0, 1.0, 1.0, False, False, G, 1),
        (1.0, 2.0, 2.0, False, False, G, 1),
        (2.0, 3.0, 103.0, True, False, 0.0, 1),
    ],
}


@pytest.mark.parametrize(("end", "length", "n"), list(GOLDEN))
def test_golden_windows(end: str, length: int, n: int) -> None:
    buf = make(n)
    feed(buf, length, end)
    got, want = rows(buf), GOLDEN[(end, length, n)]
    assert len(got) == len(want)
    for got_row, want_row in zip(got, want, strict=True):
        assert got_row == pytest.approx(want_row)


def test_both_flags_report_terminated() -> None:
    buf = make(2)
    buf.add(obs=0.0, action=0, reward=1.0, terminated=False, truncated=False)
    buf.add(obs=1.0, action=0, reward=1.0, next_obs=9.0, terminated=True, truncated=True)
    b = buf.get_transitions(buf.sampleable_ids())
    assert b.terminated.tolist() == [True, True]
    assert b.truncated.tolist() == [False, False]
    assert b.discount.tolist() == [0.0, 0.0]


def test_running_episode_waits_for_its_window() -> None:
    buf = make(3)
    with pytest.raises(rr.EmptyBufferError):
        buf.sample(1)
    for t in range(3):
        buf.add(obs=float(t), action=0, reward=1.0, terminated=False, truncated=False)
        assert buf.num_sampleable == 0  # obs_{t+3} is not known yet
    buf.add(obs=3.0, action=0, reward=1.0, terminated=False, truncated=False)
    assert buf.sampleable_ids().tolist() == [0]
    buf.add(obs=4.0, action=0, reward=1.0, next_obs=5.0, terminated=True, truncated=False)
    assert buf.sampleable_ids().tolist() == [0, 1, 2, 3, 4]  # the end makes every window known


def test_windows_never_cross_episodes() -> None:
    buf = make(3)
    feed(buf, 2, "terminated", first_obs=0.0)
    feed(buf, 4, "truncated", first_obs=10.0)
    b = buf.get_transitions(buf.sampleable_ids())
    # first episode's second step: window of 1, final observation of the first episode
    assert b.next_obs[1] == 102.0 and b.steps[1] == 1
    # second episode's first step: rewards of its own steps only
    assert b.reward[2] == pytest.approx(1 + G * 2 + G**2 * 3)
    assert b.obs[2] == 10.0 and b.next_obs[2] == 13.0


def test_vector_reward_field() -> None:
    buf = rr.ReplayBuffer(
        32,
        {"obs": rr.Field((), np.float32), "reward": rr.Field((2,), np.float64)},
        n_step=2,
        gamma=G,
    )
    buf.add(obs=0.0, reward=np.array([1.0, 10.0]), terminated=False, truncated=False)
    buf.add(obs=1.0, reward=np.array([2.0, 20.0]), next_obs=2.0, terminated=True, truncated=False)
    b = buf.get_transitions([0])
    assert b.reward.dtype == np.float64
    np.testing.assert_allclose(b.reward[0], [1 + G * 2, 10 + G * 20])


def test_integer_reward_becomes_float() -> None:
    buf = rr.ReplayBuffer(
        32, {"obs": rr.Field((), np.float32), "reward": rr.Field((), np.int16)}, n_step=2, gamma=G
    )
    buf.add(obs=0.0, reward=3, terminated=False, truncated=False)
    buf.add(obs=1.0, reward=4, next_obs=2.0, terminated=True, truncated=False)
    b = buf.get_transitions([0])
    assert b.reward.dtype == np.float32 and b.reward[0] == 3 + G * 4


def test_next_fields_read_the_step_after_the_window() -> None:
    buf = make(2, next_fields=("action",))
    feed(buf, 4, "terminated")  # actions 0, 1, 2, 3
    b = buf.get_transitions(buf.sampleable_ids())
    # t=0,1: action at t+2; t=2,3: the window reaches the end, no step follows -> 0
    assert b.next_action.tolist() == [2, 3, 0, 0]
    with pytest.raises(rr.ConfigError, match="next_fields"):
        make(1, next_fields=("obs",))
    with pytest.raises(rr.ConfigError, match="next_fields"):
        make(1, next_fields=("nope",))


def test_next_reward_is_allowed() -> None:
    buf = make(1, next_fields=("reward",))
    feed(buf, 3, "terminated")  # rewards 1, 2, 3
    b = buf.get_transitions(buf.sampleable_ids())
    assert b.next_reward.tolist() == [2.0, 3.0, 0.0]
