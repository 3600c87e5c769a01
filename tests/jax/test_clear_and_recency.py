"""``clear`` drops what the core's ``clear`` drops (ids keep counting, a running episode goes
on); the recency mix draws ``ceil(recent_ratio * B)`` transitions, first in the batch, uniform
over the ``recent_steps`` newest sampleable transitions of each env (the core's set), the rest
uniform over all of them (chi-square)."""

from __future__ import annotations

from typing import Any

import pytest

jax = pytest.importorskip("jax")
stats = pytest.importorskip("scipy.stats")

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import rlreplay as rr  # noqa: E402
import rlreplay.jax as rrj  # noqa: E402
from rlreplay.jax.draws import recent_count  # noqa: E402
from tests.jax.helpers import (  # noqa: E402
    FIELDS,
    Twins,
    assert_same_contents,
    jax_buffer,
    random_step,
)
from tests.jax.test_prioritized import core_priorities, jax_priorities  # noqa: E402

Array = np.ndarray[Any, Any]

CLEARED = {
    "3-step, 2 envs": dict(capacity=16, num_envs=2, n_step=3, finals_per_env=8),
    "prioritized, 3-step, stack 2": dict(
        capacity=20, num_envs=2, n_step=3, frame_stack=2, prioritized=True, finals_per_env=10
    ),
}


def run_clear(name: str, rounds: int) -> None:
    buf = jax_buffer(**CLEARED[name])
    rng = np.random.default_rng(len(name))
    tw = Twins(buf)
    for round_ in range(rounds):
        for i in range(7 + 5 * round_):  # a partial ring, then past a wraparound
            tw.add(random_step(rng, 2, p_end=0.15))
            if i % 4 == 3:
                assert_same_contents(tw)
        before = tw.count * buf.num_envs
        if buf.prioritized:
            ids = np.arange(before - 8, before)  # (8: the shape other tests compiled)
            values = rng.uniform(0.5, 3.0, 8)
            tw.state = buf.update_priorities(tw.state, ids, values)
            tw.np_buf.update_priorities(ids, values)
        tw.clear()
        assert int(buf.num_sampleable(tw.state)) == 0 == tw.np_buf.num_sampleable
        assert not bool(buf.can_sample(tw.state))
        assert not np.asarray(buf.sampleable(tw.state, np.arange(before))).any()
        for i in range(buf.config.n_step + 3):
            tw.add(random_step(rng, 2, p_end=0.15))
            if i % 2:
                assert_same_contents(tw)
        # Ids go on from where they were.
        ids = np.asarray(buf.sample(tw.state, jax.random.key(round_), 16)["ids"])
        assert (ids >= before).all() or not bool(buf.can_sample(tw.state))
        if buf.prioritized:
            stored = np.arange(before, tw.count * buf.num_envs)
            np.testing.assert_allclose(
                jax_priorities(buf, tw.state, stored), core_priorities(tw.np_buf, stored),
                rtol=1e-6,
            )  # fmt: skip


def test_clear_matches_the_core() -> None:
    run_clear("prioritized, 3-step, stack 2", 2)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CLEARED))
def test_clear_matches_the_core_long(name: str) -> None:
    run_clear(name, 6)


def test_clear_inside_a_jitted_scan() -> None:
    buf = jax_buffer(**CLEARED["3-step, 2 envs"])
    step = jax.tree.map(jnp.asarray, random_step(np.random.default_rng(0), 2, 0.0, 0.0))

    def body(state: rrj.BufferState, i: Any) -> tuple[rrj.BufferState, Any]:
        state = buf.add(state, step)
        state = jax.lax.cond(i == 9, buf.clear, lambda s: s, state)
        return state, buf.num_sampleable(state)

    state, sizes = jax.jit(lambda s: jax.lax.scan(body, s, jnp.arange(12)))(buf.init())
    # Windows known 3 steps on, 8 steps kept per env; cleared at the 10th step, and the
    # next 2 steps know no window yet.
    assert np.asarray(sizes).tolist() == [0, 0, 0, 2, 4, 6, 8, 10, 10, 0, 0, 0]
    assert int(state.count) == 12


# Recency is an option of the draw: a buffer of the other tests, with per-draw overrides.
RECENT = dict(capacity=16, num_envs=2, n_step=3, finals_per_env=8)


def recent_set(np_buf: rr.ReplayBuffer, recent_steps: int) -> Array:
    """The ``recent_steps`` newest sampleable ids of each env, from the core's ids."""
    ids = np.sort(np_buf.sampleable_ids())
    E = np_buf.num_envs
    out = [ids[ids % E == e][-recent_steps:] for e in range(E)]
    return np.sort(np.concatenate(out))


def run_recent(ratio: float, steps: int) -> None:
    buf = jax_buffer(**RECENT)
    rng = np.random.default_rng(3)
    tw = Twins(buf)
    for _ in range(25):
        tw.add(random_step(rng, 2, p_end=0.1))
    batch = 16
    k = recent_count(ratio, batch)

    @jax.jit
    def draws(state: rrj.BufferState, key: Any, recent_steps: Any) -> Any:
        def one(kk: Any) -> Any:
            b = buf.sample(state, kk, batch, recent_ratio=ratio, recent_steps=recent_steps)
            return b["ids"]

        return jax.vmap(one)(jax.random.split(key, 500))

    ids = np.asarray(draws(tw.state, jax.random.key(5), jnp.int32(steps)))  # a traced count
    everything = np.sort(tw.np_buf.sampleable_ids())
    recent = recent_set(tw.np_buf, steps)
    for part, allowed in ((ids[:, :k], recent), (ids[:, k:], everything)):
        if part.size == 0:  # recent_ratio=1: the whole batch is recent
            continue
        counts = np.array([(part == i).sum() for i in allowed])
        assert counts.sum() == part.size  # only allowed ids
        chi = stats.chisquare(counts)
        assert chi.pvalue > 1e-3, chi
    # The core draws its recent part from the same set.
    core = np.concatenate(
        [tw.np_buf.sample(batch, recent_ratio=ratio, recent_steps=steps)["ids"][:k]
         for _ in range(50)]
    )  # fmt: skip
    assert set(core.tolist()) <= set(recent.tolist())


def test_recent_draws_follow_the_core_law() -> None:
    run_recent(0.25, 3)


@pytest.mark.slow
@pytest.mark.parametrize(("ratio", "steps"), [(0.55, 1), (1.0, 50)])
def test_recent_draws_follow_the_core_law_long(ratio: float, steps: int) -> None:
    run_recent(ratio, steps)


def test_recency_options_are_checked_and_kept() -> None:
    assert recent_count(0.55, 100) == 55  # rounded as the core rounds
    assert recent_count(0.25, 16) == 4
    buf = jax_buffer(**RECENT)
    state = buf.init()
    with pytest.raises(rr.ConfigError, match="recent_ratio"):
        buf.sample(state, jax.random.key(0), 8, recent_ratio=2.0)
    with pytest.raises(rr.ConfigError, match="recent_steps"):
        buf.sample(state, jax.random.key(0), 8, recent_ratio=0.5, recent_steps=0)
    per = jax_buffer(**CLEARED["prioritized, 3-step, stack 2"])
    with pytest.raises(rr.ConfigError, match="uniform-only"):
        per.sample(per.init(), jax.random.key(0), 8, recent_ratio=0.5)
    # A buffer's own options: kept through conversions.
    mixed = rrj.make_buffer(16, FIELDS, num_envs=2, recent_ratio=0.25, recent_steps=3)
    np_buf = rrj.to_replay_buffer(mixed, mixed.init())
    assert np_buf.draw_options.recent_ratio == 0.25
    assert np_buf.draw_options.recent_steps == 3
    back, _ = rrj.from_replay_buffer(np_buf)
    assert (back.config.recent_ratio, back.config.recent_steps) == (0.25, 3)


def test_draws_without_replacement_follow_the_core_law() -> None:
    """``replacement=False``: no duplicates in a batch while enough are sampleable, recent
    draws first; per-id frequencies match the core's (two-sample chi-square); a batch larger
    than the sampleable set is drawn with replacement, as in the core."""
    buf = jax_buffer(**RECENT)
    rng = np.random.default_rng(6)
    tw = Twins(buf)
    for _ in range(25):
        tw.add(random_step(rng, 2, p_end=0.1))
    everything = np.sort(tw.np_buf.sampleable_ids())
    recent = recent_set(tw.np_buf, 2)
    batch, ratio = 6, 0.5
    k = recent_count(ratio, batch)

    @jax.jit
    def draws(state: rrj.BufferState, key: Any) -> Any:
        def one(kk: Any) -> Any:
            return buf.sample(state, kk, batch, recent_ratio=ratio, recent_steps=2,
                              replacement=False)["ids"]  # fmt: skip

        return jax.vmap(one)(jax.random.split(key, 600))

    ids = np.asarray(draws(tw.state, jax.random.key(8)))
    assert all(len(set(row.tolist())) == batch for row in ids)
    assert np.isin(ids[:, :k], recent).all()
    core = np.stack([
        tw.np_buf.sample(batch, recent_ratio=ratio, recent_steps=2, replacement=False)["ids"]
        for _ in range(600)
    ])  # fmt: skip
    for part in (slice(0, k), slice(k, batch)):
        table = np.array([[(d[:, part] == i).sum() for i in everything] for d in (ids, core)])
        table = table[:, table.sum(axis=0) > 0]
        test = stats.chi2_contingency(table)
        assert test.pvalue > 1e-3, test
    # More recent draws asked than recent transitions: all of them first, then the others.
    whole = buf.sample(tw.state, jax.random.key(1), everything.shape[0], recent_ratio=0.8,
                       recent_steps=2, replacement=False).ids  # fmt: skip
    whole = np.asarray(whole)
    assert sorted(whole.tolist()) == everything.tolist()
    assert sorted(whole[: recent.shape[0]].tolist()) == recent.tolist()
    too_many = everything.shape[0] + 3
    more = np.asarray(buf.sample(tw.state, jax.random.key(0), too_many, replacement=False).ids)
    assert np.isin(more, everything).all() and len(set(more.tolist())) < too_many
