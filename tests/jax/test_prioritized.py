"""Prioritized draws follow the NumPy core's law: the same priorities after the same writes and
updates (new transitions at ``max(initial, largest applied)``, clipping, ``eps``, stale ids
ignored), draw frequencies proportional to ``p ** alpha`` over the sampleable transitions
(chi-square), importance weights normalised by the smallest probability over the buffer."""

from __future__ import annotations

import functools
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
    jax_buffer,
    jax_sampleable_ids,
    random_step,
)

Array = np.ndarray[Any, Any]

# eps = 0: a priority of 0 is a mass of 0 (never drawn), as in the core with eps=0.
PER = dict(capacity=40, num_envs=2, n_step=2, prioritized=True, finals_per_env=20, eps=0.0)


def core_priorities(np_buf: rr.ReplayBuffer, ids: Array) -> Array:
    """The NumPy core's priority of each (stored) id, from its public state."""
    sd = np_buf.state_dict()
    E, C = np_buf.num_envs, np_buf.env_capacity
    prio: Array = sd["arrays"]["priorities/prio"]
    return prio[(ids % E) * C + (ids // E) % C]


def jax_priorities(buf: rrj.JaxBuffer, state: rrj.BufferState, ids: Array) -> Array:
    assert state.priorities is not None
    rows = (ids // buf.num_envs) % buf.env_capacity * buf.num_envs + ids % buf.num_envs
    return np.abs(np.asarray(state.priorities.prio)[rows])  # (holes' are kept negated)


def law(buf: rrj.JaxBuffer, state: rrj.BufferState, ids: Array, alpha: float) -> Array:
    """``P(i) = p_i ** alpha / sum p ** alpha`` over ``ids``, from the JAX priorities."""
    m = jax_priorities(buf, state, ids).astype(np.float64) ** alpha
    out: Array = m / m.sum()
    return out


@functools.cache
def many_draws(buf: rrj.JaxBuffer, rounds: int, batch: int) -> Any:
    """``rounds`` batches of ids and probabilities in one compiled call."""

    def draw(state: rrj.BufferState, key: Any) -> Any:
        b = buf.sample(state, key, batch)
        return b["ids"], b["probabilities"], b["weights"]

    return jax.jit(
        lambda state, key: jax.vmap(lambda k: draw(state, k))(jax.random.split(key, rounds))
    )


def filled(stratified: bool = True, seed: int = 0) -> tuple[Twins, Array]:
    buf = jax_buffer(**PER, stratified=stratified)
    rng = np.random.default_rng(seed)
    tw = Twins(buf)
    for _ in range(45):
        tw.add(random_step(rng, 2, p_end=0.15))
    ids = jax_sampleable_ids(buf, tw.state)
    prios = rng.uniform(0.05, 4.0, ids.shape[0])
    prios[:3] = 0.0  # never drawn
    tw.state = buf.update_priorities(tw.state, ids, prios)
    tw.np_buf.update_priorities(ids, prios)
    return tw, ids


@pytest.mark.parametrize("stratified", [True, False])
def test_draw_frequencies_follow_the_priorities(stratified: bool) -> None:
    tw, ids = filled(stratified)
    buf, state = tw.buf, tw.state
    p = law(buf, state, ids, buf.config.alpha)
    # The core's law from its own priorities (float64): the same up to float32 rounding.
    want = core_priorities(tw.np_buf, ids) ** buf.config.alpha
    np.testing.assert_allclose(p, want / want.sum(), rtol=1e-5)
    got_ids, probs, weights = (np.asarray(a) for a in many_draws(buf, 400, 64)(
        state, jax.random.key(7)))  # fmt: skip
    counts = np.array([(got_ids == i).sum() for i in ids])
    assert counts.sum() == got_ids.size  # only sampleable ids
    assert counts[:3].sum() == 0  # priority 0: never drawn
    keep = p > 0
    chi = stats.chisquare(counts[keep], p[keep] * got_ids.size)
    assert chi.pvalue > 1e-3, chi
    # Each draw reports its probability, and its weight (P_min / P) ** beta.
    pos = np.searchsorted(ids, got_ids)
    np.testing.assert_allclose(probs, p[pos], rtol=1e-4)
    beta = buf.config.beta
    np.testing.assert_allclose(weights, (p[keep].min() / p[pos]) ** beta, rtol=1e-4)


def test_priorities_follow_the_core_through_writes_and_updates() -> None:
    buf = jax_buffer(**PER, stratified=True)
    rng = np.random.default_rng(4)
    tw = Twins(buf)
    issued: list[int] = []
    for i in range(70):
        step = random_step(rng, 2, p_end=0.1)
        tw.add(step)
        issued.extend([2 * i, 2 * i + 1])
        if i % 4 == 3:
            # Sampleable, stored-but-not-yet-sampleable and overwritten ids alike; the values
            # cover clipping, zero and large priorities. Distinct ids (see the duplicates test).
            ids = rng.choice(issued, size=min(12, len(issued)), replace=False)
            values = rng.choice([0.0, 0.3, 2.5, 40.0], size=ids.shape[0])
            tw.state = buf.update_priorities(tw.state, ids, values)
            tw.np_buf.update_priorities(ids, values)
        stored = np.arange(max(0, tw.count - buf.env_capacity) * 2, tw.count * 2)
        np.testing.assert_allclose(
            jax_priorities(buf, tw.state, stored), core_priorities(tw.np_buf, stored), rtol=1e-6
        )
    assert tw.state.priorities is not None
    top = tw.np_buf.state_dict()["meta"]["priorities"]["max_priority"]
    np.testing.assert_allclose(float(tw.state.priorities.max_priority), top, rtol=1e-6)
    live = jax_sampleable_ids(buf, tw.state)
    mass = tw.np_buf.priority_mass()
    m = jax_priorities(buf, tw.state, live).astype(np.float64) ** buf.config.alpha
    np.testing.assert_allclose(m.sum(), mass.total, rtol=1e-5)
    np.testing.assert_allclose(float(tw.state.priorities.sums[-1][0]), mass.total, rtol=1e-5)
    np.testing.assert_allclose(float(tw.state.priorities.mins[-1][0]), mass.smallest, rtol=1e-5)


def test_clip_and_eps_as_the_core() -> None:
    buf = rrj.make_buffer(
        16, FIELDS, num_envs=1, prioritized=True, priority_clip=(0.5, 2.0), eps=0.25,
        finals_per_env=16, alpha=1.0,
    )  # fmt: skip
    np_buf = rr.PrioritizedReplayBuffer(16, FIELDS, priority_clip=(0.5, 2.0), eps=0.25, alpha=1.0)
    state = buf.init()
    rng = np.random.default_rng(0)
    for _ in range(6):
        step = random_step(rng, 1, p_end=0.0, p_trunc=0.0)
        state = buf.add(state, step)
        np_buf.add(**{k: v[0] for k, v in step.items()})
    ids = np.arange(5)
    values = np.array([0.0, 0.7, 5.0, 1.0, 3.0])
    state = buf.update_priorities(state, ids, values)
    np_buf.update_priorities(ids, values)
    np.testing.assert_allclose(
        jax_priorities(buf, state, ids), core_priorities(np_buf, ids), rtol=1e-6
    )
    # The next transitions get the largest priority applied so far (2.25), as in the core.
    step = random_step(rng, 1, p_end=0.0, p_trunc=0.0)
    state = buf.add(state, step)
    np_buf.add(**{k: v[0] for k, v in step.items()})
    assert jax_priorities(buf, state, np.array([6]))[0] == pytest.approx(2.25)
    assert core_priorities(np_buf, np.array([6]))[0] == pytest.approx(2.25)


def test_stale_invalid_and_duplicate_ids() -> None:
    buf = jax_buffer(**PER, stratified=True)
    rng = np.random.default_rng(9)
    tw = Twins(buf)
    for _ in range(30):  # 60 ids issued, 40 stored: 0 .. 19 overwritten
        tw.add(random_step(rng, 2, p_end=0.0, p_trunc=0.0))
    before = np.asarray(tw.state.priorities.prio).copy()
    ids = np.array([3, 17, 1000, -4, 30, 31, 32])
    values = np.array([9.0, 9.0, 9.0, 9.0, np.nan, -1.0, np.inf])
    state = buf.update_priorities(tw.state, ids, values)
    # Overwritten, never issued, and NaN / negative / infinite values: nothing changes.
    np.testing.assert_array_equal(np.asarray(state.priorities.prio), before)
    assert float(state.priorities.max_priority) == 0.0
    assert int(state.priorities.beta_step) == 1  # the schedule still moves
    # An id given several times gets the largest of its values.
    state = buf.update_priorities(state, np.array([40, 40, 41, 40]), np.array([0.5, 3, 1, 2]))
    got = jax_priorities(buf, state, np.array([40, 41]))
    np.testing.assert_allclose(got, [3 + buf.config.eps, 1 + buf.config.eps], rtol=1e-6)


def test_beta_anneals_with_updates_and_can_be_given() -> None:
    buf = rrj.make_buffer(
        32, FIELDS, num_envs=2, prioritized=True, beta=0.4, beta_final=1.0, beta_steps=4,
        finals_per_env=16,
    )  # fmt: skip
    state = buf.init()
    rng = np.random.default_rng(1)
    for _ in range(10):
        state = buf.add(state, random_step(rng, 2, p_end=0.1))
    ids = np.array([0, 1, 2, 3])
    state = buf.update_priorities(state, ids, np.array([1.0, 2.0, 4.0, 8.0]))
    key = jax.random.key(0)
    b = buf.sample(state, key, 16)
    p, w = np.asarray(b["probabilities"]), np.asarray(b["weights"])
    # One update: beta = 0.4 + 0.6 / 4; the smallest probability is that of priority 1.
    smallest = float(state.priorities.mins[-1][0]) / float(state.priorities.sums[-1][0])
    np.testing.assert_allclose(w, (smallest / p) ** 0.55, rtol=1e-5)
    w1 = np.asarray(buf.sample(state, key, 16, beta=1.0)["weights"])
    np.testing.assert_allclose(w1, smallest / p, rtol=1e-5)
    for _ in range(5):
        state = buf.update_priorities(state, ids, np.array([1.0, 2.0, 4.0, 8.0]))
    w_end = np.asarray(buf.sample(state, key, 16)["weights"])
    np.testing.assert_allclose(w_end, w1, rtol=1e-5)  # beta_final after beta_steps


def test_empty_and_zero_mass_buffers_sample_without_crashing() -> None:
    buf = jax_buffer(**PER, stratified=True)
    state = buf.init()
    sample = jax.jit(lambda s, k: buf.sample(s, k, 8))
    assert not bool(buf.can_sample(state, 8))
    b = sample(state, jax.random.key(0))
    assert np.asarray(b["weights"]).tolist() == [0.0] * 8
    rng = np.random.default_rng(0)
    for _ in range(6):
        state = buf.add(state, random_step(rng, 2, p_end=0.0, p_trunc=0.0))
    assert bool(buf.can_sample(state, 8))
    live = jax_sampleable_ids(buf, state)
    state = buf.update_priorities(state, live, np.zeros(live.shape[0]))
    assert not bool(buf.can_sample(state, 8))  # sampleable, but no mass
    b = sample(state, jax.random.key(1))
    assert np.isfinite(np.asarray(b["weights"])).all()


def test_stale_rank_sorts_and_uniform_updates_are_refused() -> None:
    with pytest.raises(rr.ConfigError, match="sort_interval"):
        rrj.make_buffer(16, FIELDS, prioritized=True, variant="rank_based", sort_interval=5)
    buf = jax_buffer(capacity=16, num_envs=2, n_step=3, finals_per_env=8)
    with pytest.raises(rr.ConfigError, match="prioritized=True"):
        buf.update_priorities(buf.init(), jnp.zeros(2, jnp.int32), jnp.ones(2))
