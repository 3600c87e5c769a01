"""Several envs in one buffer: per-env rings, ids, episodes ending at different times."""

from __future__ import annotations

import numpy as np

import rlreplay as rr
from tests.reference import RefBuffer, assert_batch_matches


def test_envs_ending_at_different_times_match_the_reference() -> None:
    E, n, k = 3, 3, 2
    buf = rr.ReplayBuffer(
        E * 20, {"obs": rr.Field((2,), np.float32)}, num_envs=E, n_step=n, frame_stack=k,
        gamma=0.9, seed=1,
    )  # fmt: skip
    ref = RefBuffer(E, 20, n, 0.9, k, True, ("obs",))
    lengths = [3, 5, 7]  # each env ends its episodes on its own schedule
    for step in range(60):
        term = np.array([(step + 1) % L == 0 for L in lengths])
        trunc = np.array([step % 11 == 10, False, False]) & ~term
        obs = np.stack([np.array([step, e], np.float32) for e in range(E)])
        values = {
            "obs": obs, "reward": np.arange(E, dtype=np.float32) + step,
            "next_obs": obs + 0.5, "terminated": term, "truncated": trunc,
        }  # fmt: skip
        ids = buf.add(**values)
        expected = [ref.add(e, {k: v[e] for k, v in values.items()}) for e in range(E)]
        assert ids.tolist() == expected
    assert sorted(buf.sampleable_ids().tolist()) == ref.sampleable_ids()
    assert_batch_matches(buf.get_transitions(buf.sampleable_ids()), ref)
    assert_batch_matches(buf.sample(64), ref)


def test_each_env_keeps_its_own_most_recent_steps() -> None:
    buf = rr.ReplayBuffer(8, {"obs": rr.Field((), np.int64)}, num_envs=2)
    for t in range(10):  # env 0 gets 10 steps, env 1 only 3
        buf.add(env_ids=[0], obs=[t], reward=[0.0], terminated=[False], truncated=[False])
        if t < 3:
            buf.add(env_ids=[1], obs=[100 + t], reward=[0.0], terminated=[False],
                    truncated=[False])  # fmt: skip
    assert len(buf) == 4 + 3
    b = buf.get_transitions(buf.sampleable_ids())
    assert sorted(b.obs[b.env_ids == 0].tolist()) == [6, 7, 8]  # 6..9 stored, 9's next unknown
    assert sorted(b.obs[b.env_ids == 1].tolist()) == [100, 101]


def test_ids_are_never_reused_and_stale_ids_are_detected() -> None:
    buf = rr.ReplayBuffer(6, {"obs": rr.Field((), np.int64)}, num_envs=2)
    seen: set[int] = set()
    for t in range(20):
        ids = buf.add(obs=[t, t], reward=[0.0, 0.0], terminated=[False, True],
                      truncated=[False, False], next_obs=[0, 0])  # fmt: skip
        assert not seen & set(ids.tolist())
        seen |= set(ids.tolist())
    old = min(seen)
    try:
        buf.get_transitions([old])
    except rr.InvalidIdError as exc:
        assert "not sampleable" in str(exc)
    else:  # pragma: no cover
        raise AssertionError("a stale id was accepted")


def test_extend_equals_step_by_step_add() -> None:
    kw = {"num_envs": 2, "n_step": 2, "frame_stack": 3, "seed": 4}
    a = rr.ReplayBuffer(40, {"obs": rr.Field((), np.float32)}, **kw)  # type: ignore[arg-type]
    b = rr.ReplayBuffer(40, {"obs": rr.Field((), np.float32)}, **kw)  # type: ignore[arg-type]
    T = 13
    obs = np.arange(T, dtype=np.float32)
    term = (np.arange(T) % 5) == 4
    values = {"obs": obs, "reward": obs * 2, "terminated": term, "truncated": np.zeros(T, bool),
              "next_obs": obs + 0.5}  # fmt: skip
    ids_a = a.extend(env_id=1, **values)
    ids_b = [
        b.add(env_ids=[1], **{k: v[t : t + 1] for k, v in values.items()})[0] for t in range(T)
    ]
    assert ids_a.tolist() == ids_b
    sa, sb = a.sample(32), b.sample(32)
    for name in sa:
        np.testing.assert_array_equal(sa[name], sb[name])


def test_extend_longer_than_the_ring() -> None:
    buf = rr.ReplayBuffer(10, {"obs": rr.Field((), np.int64)}, n_step=1)
    T = 25
    ids = buf.extend(obs=np.arange(T), reward=np.zeros(T), terminated=np.arange(T) == T - 1,
                     truncated=np.zeros(T, bool), next_obs=np.full(T, 99))  # fmt: skip
    assert ids.tolist() == list(range(T))
    assert len(buf) == 10
    b = buf.get_transitions(buf.sampleable_ids())
    assert b.obs.tolist() == list(range(15, 25))
    assert b.next_obs.tolist() == [*range(16, 25), 99]


def test_uniform_sample_gives_every_sampleable_transition_the_same_chance() -> None:
    from scipy import stats

    fields = {"obs": rr.Field((1,), np.float32)}
    buf = rr.ReplayBuffer(300, fields, num_envs=3, seed=11)
    for env, steps in enumerate([7, 40, 100]):  # unequal envs; env 2 wraps its ring
        for i in range(steps):
            buf.add(
                env_ids=[env], obs=np.full((1, 1), i, np.float32), reward=np.zeros(1),
                terminated=np.zeros(1, bool), truncated=np.zeros(1, bool),
            )  # fmt: skip
    ids = np.sort(buf.sampleable_ids())
    counts = np.zeros(ids.size, np.int64)
    for _ in range(200):
        drawn = buf.sample(500).ids
        counts += np.bincount(np.searchsorted(ids, drawn), minlength=ids.size)
    assert np.isin(buf.sample(500).ids, ids).all()
    assert stats.chisquare(counts).pvalue > 1e-4
