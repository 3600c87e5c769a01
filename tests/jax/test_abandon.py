"""Abandoned episodes (``abandon_episode``) hold what the core's hold: the same sampleable
transitions bit for bit (the cut episode's last ``n_step`` steps stored, never sampleable),
the same sequences (stopping at the cut, ``next_known`` False there), the same complete
episodes and priorities, ``update_priorities`` ignoring the holes' ids; draws stay uniform over
the sampleable steps (the recency mix over each env's newest sampleable ones); conversions keep
the cut; and all of it inside ``jit``, ``lax.scan`` and ``vmap``."""

from __future__ import annotations

from typing import Any

import pytest

jax = pytest.importorskip("jax")
stats = pytest.importorskip("scipy.stats")

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import rlreplay as rr  # noqa: E402
import rlreplay.jax as rrj  # noqa: E402
from tests.jax.helpers import (  # noqa: E402
    FIELDS,
    Twins,
    assert_same_contents,
    host_batch,
    jax_buffer,
    jax_sampleable_ids,
    padded,
    random_step,
    update_padded,
)
from tests.jax.test_clear_and_recency import recent_set  # noqa: E402
from tests.jax.test_episodes import core_episodes  # noqa: E402
from tests.jax.test_operation_sequences import assert_same_priorities  # noqa: E402
from tests.jax.test_sequences import assert_same_sequences, stored_ids  # noqa: E402

Array = np.ndarray[Any, Any]

# Configurations of the other test files (compiled once per session).
CONFIGS = {
    "3-step, 2 envs": dict(capacity=16, num_envs=2, n_step=3, finals_per_env=8),
    "2-step, stack 3, 3 envs": dict(
        capacity=18, num_envs=3, n_step=2, frame_stack=3, finals_per_env=6
    ),
    "prioritized, 3-step, stack 2": dict(
        capacity=20, num_envs=2, n_step=3, frame_stack=2, prioritized=True, finals_per_env=10
    ),
    "drops episodes, stack 3": dict(
        capacity=24, num_envs=2, n_step=2, frame_stack=3, finals_per_env=2
    ),
}


def scripted(name: str, steps: int = 40, seed: int = 0) -> Twins:
    """A stream that abandons an env's episode every few steps, checked against the core after
    every operation (contents, priorities, sequences)."""
    buf = jax_buffer(**CONFIGS[name])
    rng = np.random.default_rng(seed)
    tw = Twins(buf)
    for i in range(steps):
        tw.add(random_step(rng, buf.num_envs, p_end=0.1, p_trunc=0.05))
        if i % 3 == 1:
            tw.abandon(int(rng.integers(buf.num_envs)))
        if i % 7 == 3:  # twice in a row: the second is a no-op
            tw.abandon(0)
            tw.abandon(0)
        assert_same_contents(tw)
        assert_same_priorities(tw)
        if i % 5 == 4:
            assert_same_sequences(tw, [(5, True), (3, False)])
    return tw


@pytest.mark.parametrize("name", list(CONFIGS))
def test_abandoned_episodes_match_the_core(name: str) -> None:
    tw = scripted(name)
    holes = np.asarray(tw.state.hole)
    assert (holes >= 0).any()  # the stream left holes in the buffer


def test_the_core_docstring_example() -> None:
    buf = rrj.make_buffer(8, {"obs": rr.Field((), np.float32)}, n_step=2)
    state = buf.init()
    step = {"obs": np.float32(0), "reward": np.float32(1), "terminated": False,
            "truncated": False, "next_obs": np.float32(0)}  # fmt: skip
    for t in range(4):
        state = buf.add(state, {**step, "obs": np.float32(t)})
    assert np.flatnonzero(np.asarray(buf.sampleable(state, np.arange(4)))).tolist() == [0, 1]
    state = buf.abandon_episode(state, 0)
    state = buf.add(state, {**step, "obs": np.float32(9)})  # a new episode
    assert np.flatnonzero(np.asarray(buf.sampleable(state, np.arange(5)))).tolist() == [0, 1]
    assert int(buf.num_sampleable(state)) == 2
    seq = buf.get_sequences(state, np.array([2]), 3)
    assert seq.mask.tolist() == [[True, True, False]]  # stops at the cut
    assert seq.next_known.tolist() == [[True, False, False]]
    assert int(np.asarray(state.ep_start)[4]) == 4


def test_no_episode_running_changes_nothing() -> None:
    buf = jax_buffer(**CONFIGS["prioritized, 3-step, stack 2"])
    empty = buf.init()
    same = buf.abandon_episode(empty, 1)
    for a, b in zip(jax.tree.leaves(empty), jax.tree.leaves(same), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    rng = np.random.default_rng(1)
    step = random_step(rng, 2, p_end=0.0, p_trunc=0.0)
    step["terminated"] = np.array([True, False])  # env 0's newest step ends its episode
    state = buf.add(empty, step)
    after = buf.abandon_episode(state, 0)
    for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(after), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_abandon_after_clear_starts_a_new_episode() -> None:
    buf = jax_buffer(**CONFIGS["3-step, 2 envs"])
    rng = np.random.default_rng(2)
    tw = Twins(buf)
    for _ in range(5):
        tw.add(random_step(rng, 2, p_end=0.0, p_trunc=0.0))
    tw.clear()
    tw.abandon(1)  # nothing stored: still abandoned, the next step starts an episode
    for _ in range(6):
        tw.add(random_step(rng, 2, p_end=0.0, p_trunc=0.0))
        assert_same_contents(tw)
    assert_same_sequences(tw, [(8, True)])


def test_episodes_and_updates_leave_the_holes_out() -> None:
    tw = scripted("prioritized, 3-step, stack 2", steps=30, seed=4)
    buf = tw.buf
    # Every stored id gets a priority; the core ignores the holes' ids, and so does the JAX one.
    ids = stored_ids(tw)
    values = np.linspace(0.5, 3.0, ids.shape[0])
    tw.state = update_padded(buf, tw.state, ids, values)
    tw.np_buf.update_priorities(ids, values)
    assert_same_contents(tw)
    assert_same_priorities(tw)
    sampleable = jax_sampleable_ids(buf, tw.state)
    drawn = np.asarray(buf.sample(tw.state, jax.random.key(0), 512).ids)
    assert set(drawn.tolist()) <= set(sampleable.tolist())
    # The tree's leaves are what a rebuild from the priorities gives: no mass in the holes.
    pri = tw.state.priorities
    assert pri is not None
    rebuilt = buf._rebuild(tw.state).priorities
    assert rebuilt is not None
    np.testing.assert_allclose(np.asarray(pri.sums[0]), np.asarray(rebuilt.sums[0]))
    # Complete episodes: the abandoned ones are left out, as in the core.
    ep = jax_buffer(capacity=24, num_envs=2, finals_per_env=12)
    tw2 = Twins(ep)
    rng = np.random.default_rng(5)
    for i in range(30):
        tw2.add(random_step(rng, 2, p_end=0.25, p_trunc=0.0))
        if i % 4 == 2:
            tw2.abandon(i % 2)
    want = core_episodes(tw2)
    assert int(ep.num_episodes(tw2.state)) == len(want) > 0
    got = host_batch(ep.sample_episodes(tw2.state, jax.random.key(1), 256))
    assert set(got["ids"].tolist()) == set(want)


def filled(seed: int, abandon_at: tuple[int, ...] = ()) -> Twins:
    """25 steps of 2 envs (``CONFIGS["3-step, 2 envs"]``), env ``i % 2`` abandoned after
    step ``i`` for each ``i`` in ``abandon_at``."""
    buf = jax_buffer(**CONFIGS["3-step, 2 envs"])
    rng = np.random.default_rng(seed)
    tw = Twins(buf)
    for i in range(25):
        tw.add(random_step(rng, 2, p_end=0.05, p_trunc=0.0))
        if i in abandon_at:
            tw.abandon(i % 2)
    return tw


def holed(seed: int) -> Twins:
    """:func:`filled` with holes inside the sampleable ranges."""
    tw = filled(seed, abandon_at=(14, 17, 21))
    assert np.asarray(tw.state.hole).max() >= int(np.asarray(tw.state.lo).min())
    return tw


def test_uniform_draws_over_the_sampleable_steps() -> None:
    """With holes inside the ranges: uniform over the sampleable ids, the recent part over
    each env's newest sampleable ones (the core's set), no duplicates without replacement."""
    tw = holed(7)
    buf = tw.buf
    everything = np.sort(tw.np_buf.sampleable_ids())
    recent = recent_set(tw.np_buf, 3)
    batch, ratio = 8, 0.5
    k = 4

    @jax.jit
    def draws(state: rrj.BufferState, key: Any) -> Any:
        def one(kk: Any) -> Any:
            plain = buf.sample(state, kk, batch).ids
            mix = buf.sample(state, kk, batch, recent_ratio=ratio, recent_steps=3).ids
            distinct = buf.sample(state, kk, 4, replacement=False).ids  # of 6
            return plain, mix, distinct

        return jax.vmap(one)(jax.random.split(key, 600))

    plain, mix, distinct = (np.asarray(x) for x in draws(tw.state, jax.random.key(3)))
    for part, allowed in ((plain, everything), (mix[:, :k], recent), (mix[:, k:], everything),
                          (distinct, everything)):  # fmt: skip
        counts = np.array([(part == i).sum() for i in allowed])
        assert counts.sum() == part.size  # only allowed ids
        assert stats.chisquare(counts).pvalue > 1e-3
    assert all(len(set(row.tolist())) == 4 for row in distinct)
    core = np.concatenate(
        [tw.np_buf.sample(batch, recent_ratio=ratio, recent_steps=3)["ids"][:k]
         for _ in range(50)]
    )  # fmt: skip
    assert set(core.tolist()) <= set(recent.tolist())


def hole_ids(tw: Twins, state: rrj.BufferState) -> set[int]:
    """The stored ids that lie in holes, by the state's marks."""
    ids = stored_ids(tw)
    E, C = tw.buf.num_envs, tw.buf.env_capacity
    t = ids // E
    return set(ids[np.asarray(state.hole)[(t % C) * E + ids % E] == t].tolist())


def test_conversions_keep_the_cut() -> None:
    for name in ("3-step, 2 envs", "prioritized, 3-step, stack 2"):
        tw = scripted(name, steps=23, seed=9)
        buf = tw.buf
        np_buf = rrj.to_replay_buffer(buf, tw.state)
        np.testing.assert_array_equal(
            np.sort(np_buf.sampleable_ids()), np.sort(tw.np_buf.sampleable_ids())
        )
        _, back = rrj.from_replay_buffer(np_buf, finals_per_env=buf.config.finals_per_env)
        assert hole_ids(tw, back) == hole_ids(tw, tw.state) != set()
        for name in ("head", "lo", "hi", "last_end", "last_cut"):
            np.testing.assert_array_equal(getattr(back, name), getattr(tw.state, name), name)
        # The core's own buffer converts too, and both go on alike.
        _, from_core = rrj.from_replay_buffer(tw.np_buf, finals_per_env=buf.config.finals_per_env)
        tw.state = from_core
        rng = np.random.default_rng(10)
        for _ in range(4):
            tw.add(random_step(rng, buf.num_envs, p_end=0.1))
            assert_same_contents(tw)
            assert_same_priorities(tw)


def test_inside_jit_scan_and_vmap() -> None:
    """Traced env ids and masks inside a jitted scan, one buffer per seed under ``vmap``:
    each seed's state is the one the host calls give."""
    buf = jax_buffer(**CONFIGS["prioritized, 3-step, stack 2"])
    seeds, T = 3, 24
    rng = np.random.default_rng(11)
    steps = [[random_step(rng, 2, p_end=0.1) for _ in range(T)] for _ in range(seeds)]
    stacked = {k: np.stack([np.stack([s[k] for s in run]) for run in steps]) for k in steps[0][0]}
    who = rng.integers(-1, 3, (seeds, T))  # -1: no abandon; 2: out of range, ignored
    masks = rng.random((seeds, T, 2)) < 0.2

    def run(state: rrj.BufferState, xs: Any) -> Any:
        def body(state: rrj.BufferState, x: Any) -> Any:
            step, env, mask = x
            state = buf.add(state, step)
            state = jax.lax.cond(
                env >= 0, lambda s: buf.abandon_episode(s, env), lambda s: s, state
            )
            state = buf.abandon_episode(state, mask)
            return state, buf.sample(state, jax.random.key(0), 4).ids

        return jax.lax.scan(body, state, xs)

    init = jax.vmap(lambda _: buf.init())(jnp.arange(seeds))
    vmapped = jax.jit(jax.vmap(run), donate_argnums=0)
    states, ids = vmapped(init, (stacked, jnp.asarray(who, jnp.int32), jnp.asarray(masks)))
    for s in range(seeds):
        tw = Twins(buf)
        for t in range(T):
            tw.add(steps[s][t])
            if 0 <= who[s, t] < 2:
                tw.abandon(int(who[s, t]))
            for e in np.flatnonzero(masks[s, t]):
                tw.abandon(int(e))
        mine = jax.tree.map(lambda x, s=s: x[s], states)
        for a, b in zip(jax.tree.leaves(tw.state), jax.tree.leaves(mine), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        assert_same_contents(tw)
        drawn = np.asarray(ids[s, -1])
        assert np.asarray(buf.sampleable(tw.state, padded(drawn, 4))).all()


def test_bad_env_ids() -> None:
    buf = rrj.make_buffer(8, FIELDS, num_envs=2)
    state = buf.init()
    with pytest.raises(rr.InvalidIdError, match="env_id"):
        buf.abandon_episode(state, 2)
    with pytest.raises(rr.ConfigError, match="env_id"):
        buf.abandon_episode(state, 0.5)
    with pytest.raises(rr.ConfigError, match="env_id"):
        buf.abandon_episode(state, True)
    with pytest.raises(rr.ConfigError, match="shape"):
        buf.abandon_episode(state, np.array([True, False, True]))
    with pytest.raises(rr.ConfigError, match="env_id"):
        buf.abandon_episode(state, np.zeros(2, np.int32))


def test_vmap_draws_are_each_states_own() -> None:
    """Under ``vmap`` (nested too) a batch of states where only some have holes draws, for
    each state, what that state draws alone with the same key (one branch serves the whole
    batch: the exact one is exact for states without holes too)."""
    with_holes = holed(7)
    without = [filled(seed) for seed in (1, 2, 3)]
    buf = with_holes.buf
    states = [with_holes.state, *(tw.state for tw in without)]
    keys = jax.random.split(jax.random.key(9), 4)
    alone = [
        (np.asarray(buf.sample(s, k, 8).ids), np.asarray(buf.sample(s, k, 8, recent_ratio=0.5,
         recent_steps=2).ids), int(buf.num_sampleable(s)))
        for s, k in zip(states, keys, strict=True)
    ]  # fmt: skip

    def draws(s: rrj.BufferState, k: Any) -> Any:
        mix = buf.sample(s, k, 8, recent_ratio=0.5, recent_steps=2).ids
        return buf.sample(s, k, 8).ids, mix, buf.num_sampleable(s)

    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *states)
    flat = jax.jit(jax.vmap(draws))(stacked, keys)
    nested_states = jax.tree.map(lambda x: x.reshape(2, 2, *x.shape[1:]), stacked)
    nested = jax.jit(jax.vmap(jax.vmap(draws)))(nested_states, keys.reshape(2, 2))
    nested = jax.tree.map(lambda x: x.reshape(4, *x.shape[2:]), nested)
    # Only the first state has holes: the rest alone take the plain branch.
    assert [bool(np.asarray(s.hole).max() >= 0) for s in states] == [True, False, False, False]
    for got in (flat, nested):
        for i, (plain, mix, n) in enumerate(alone):
            np.testing.assert_array_equal(np.asarray(got[0][i]), plain)
            np.testing.assert_array_equal(np.asarray(got[1][i]), mix)
            assert int(got[2][i]) == n
    # The state with holes draws sampleable ids only.
    assert set(alone[0][0].tolist()) <= set(jax_sampleable_ids(buf, states[0]).tolist())
