"""Sequences hold what the core's hold: for every stored start, ``get_sequences`` is
bit-identical to :meth:`rlreplay.ReplayBuffer.get_sequences` (masks, padding, ``next_obs``
and ``next_known``, within episodes or across them, lengths past the ring); sampled starts
follow the core's laws (uniform over stored steps, over whole runs with ``pad=False``, by
priority over the sampleable ones, renormalised over whole runs), by chi-square."""

from __future__ import annotations

import functools
from typing import Any

import pytest

jax = pytest.importorskip("jax")
stats = pytest.importorskip("scipy.stats")

import numpy as np  # noqa: E402

import rlreplay as rr  # noqa: E402
import rlreplay.jax as rrj  # noqa: E402
from tests.jax.helpers import (  # noqa: E402
    Twins,
    assert_bit_identical,
    host_batch,
    jax_buffer,
    jax_sampleable_ids,
    padded,
    random_step,
    update_padded,
)

Array = np.ndarray[Any, Any]

CONFIGS = {
    "3-step, 2 envs": dict(capacity=16, num_envs=2, n_step=3, finals_per_env=8),
    "drops episodes, stack 3": dict(
        capacity=24, num_envs=2, n_step=2, frame_stack=3, finals_per_env=2
    ),
    "prioritized, 3-step, stack 2": dict(
        capacity=20, num_envs=2, n_step=3, frame_stack=2, prioritized=True, finals_per_env=10
    ),
}
# (length, within_episode): 13 > env_capacity only pads more. The long version runs them all.
CASES = [(13, True), (4, False)]
ALL_CASES = [(length, within) for length in (1, 4, 13) for within in (True, False)]


def stored_ids(tw: Twins) -> Array:
    E = tw.buf.num_envs
    heads = np.asarray(tw.state.head)
    ids = [t * E + e for e in range(E) for t in range(int(heads[e]), tw.count)]
    return np.sort(np.asarray(ids, np.int64))


def assert_same_sequences(tw: Twins, cases: list[tuple[int, bool]]) -> None:
    ids = stored_ids(tw)
    if ids.shape[0] == 0:
        return
    for length, within in cases:
        got = tw.buf.get_sequences(tw.state, padded(ids, tw.buf.capacity), length,
                                   within_episode=within)  # fmt: skip
        ours = host_batch(got, ids.shape[0])
        theirs = tw.np_buf.get_sequences(ids, length, within_episode=within)
        assert_bit_identical(ours, {k: np.asarray(v) for k, v in theirs.items()})


def run_get_sequences(name: str, cases: list[tuple[int, bool]]) -> None:
    buf = jax_buffer(**CONFIGS[name])
    rng = np.random.default_rng(len(name))
    tw = Twins(buf)
    for i in range(30):
        tw.add(random_step(rng, 2, p_end=0.2, p_trunc=0.1))
        if i % 6 == 5:
            assert_same_sequences(tw, cases)
        if i == 20:
            tw.clear()  # a running episode goes on past a clear
    assert_same_sequences(tw, cases)


def test_get_sequences_is_the_core_s() -> None:
    run_get_sequences("drops episodes, stack 3", CASES)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CONFIGS))
def test_get_sequences_is_the_core_s_everywhere(name: str) -> None:
    run_get_sequences(name, ALL_CASES)


def start_counts(ids: Array, allowed: Array) -> Array:
    counts = np.array([(ids == i).sum() for i in allowed])
    assert counts.sum() == ids.size, "a start outside the allowed set"
    return counts


@functools.cache
def many_starts(
    buf: rrj.JaxBuffer, length: int, pad: bool, rounds: int = 300, balance: bool = False
) -> Any:
    def draw(state: rrj.BufferState, key: Any) -> Any:
        def one(k: Any) -> Any:
            b = buf.sample_sequences(state, k, 16, length, pad=pad, balance_envs=balance)
            return b["ids"], b.get("probabilities", b["weights"]), b["weights"], b["mask"]

        return jax.vmap(one)(jax.random.split(key, rounds))

    return jax.jit(draw)


def whole_starts(tw: Twins, length: int) -> Array:
    """Stored starts whose ``length`` steps are all real within their episode (the core)."""
    ids = stored_ids(tw)
    mask = tw.np_buf.get_sequences(ids, length)["mask"]
    out: Array = ids[mask.all(axis=1)]
    return out


def test_uniform_starts_follow_the_core_law() -> None:
    buf = jax_buffer(**CONFIGS["3-step, 2 envs"])
    rng = np.random.default_rng(1)
    tw = Twins(buf)
    for _ in range(40):
        tw.add(random_step(rng, 2, p_end=0.15, p_trunc=0.05))
    for pad, allowed in ((True, stored_ids(tw)), (False, whole_starts(tw, 4))):
        ids, _, weights, mask = (np.asarray(a) for a in many_starts(buf, 4, pad)(
            tw.state, jax.random.key(3)))  # fmt: skip
        chi = stats.chisquare(start_counts(ids, allowed))
        assert chi.pvalue > 1e-3, (pad, chi)
        assert (weights == 1).all()
        if not pad:
            assert mask.all()
        # The core draws its starts from the same set.
        core = tw.np_buf.sample_sequences(64, 4, pad=pad)["ids"]
        assert set(core.tolist()) <= set(allowed.tolist())


def test_rare_whole_starts_are_drawn_exactly() -> None:
    """Short episodes and one of 4 steps: 16 redraws often miss the one whole run of 4
    steps, and the exact draw among all whole runs takes over."""
    buf = jax_buffer(**CONFIGS["3-step, 2 envs"])
    tw = Twins(buf)
    rng = np.random.default_rng(2)
    for i in range(8):
        step = random_step(rng, 2, 0.0, 0.0)
        step["terminated"] = np.array([i % 2 == 1, i in (1, 3)])
        tw.add(step)
    allowed = whole_starts(tw, 4)
    assert allowed.shape[0] == 1
    ids, _, _, mask = (np.asarray(a) for a in many_starts(buf, 4, False)(
        tw.state, jax.random.key(0)))  # fmt: skip
    assert mask.all()
    start_counts(ids, allowed)


def run_balanced_starts(pads: tuple[bool, ...]) -> None:
    buf = jax_buffer(**CONFIGS["3-step, 2 envs"])
    rng = np.random.default_rng(11)
    tw = Twins(buf)
    for _ in range(40):
        tw.add(random_step(rng, 2, p_end=0.3))
    E = buf.num_envs
    for pad in pads:
        allowed = stored_ids(tw) if pad else whole_starts(tw, 4)
        per_env = np.bincount(allowed % E, minlength=E)
        assert pad or per_env.max() > per_env.min()  # unequal envs (or one without a start)
        # An env uniform among those with a start, then a start uniform within it.
        p = 1.0 / (np.count_nonzero(per_env) * per_env[allowed % E])
        ids, _, _, mask = (np.asarray(a) for a in many_starts(buf, 4, pad, 300, True)(
            tw.state, jax.random.key(4)))  # fmt: skip
        chi = stats.chisquare(start_counts(ids, allowed), p * ids.size)
        assert chi.pvalue > 1e-3, (pad, chi)
        assert (np.diff(ids % E, axis=1) >= 0).all()  # rows ordered by env
        assert pad or mask.all()
        core = tw.np_buf.sample_sequences(64, 4, pad=pad, balance_envs=True)["ids"]
        assert set(core.tolist()) <= set(allowed.tolist())
        assert (np.diff(core % E) >= 0).all()
    with pytest.raises(rr.ConfigError, match="balance_envs"):
        per = jax_buffer(**CONFIGS["prioritized, 3-step, stack 2"])
        per.sample_sequences(per.init(), jax.random.key(0), 4, 3, balance_envs=True)


def test_balanced_starts_follow_the_core_law() -> None:
    """Env-balanced starts (ALF ``get_batch``): an env uniform among those with a start, then
    a start uniform within it, rows ordered by env; here over whole runs, exactly."""
    run_balanced_starts((False,))


@pytest.mark.slow
def test_balanced_starts_follow_the_core_law_long() -> None:
    run_balanced_starts((True, False))


def run_prioritized_starts(pads: tuple[bool, ...]) -> None:
    buf = jax_buffer(**CONFIGS["prioritized, 3-step, stack 2"])
    rng = np.random.default_rng(5)
    tw = Twins(buf)
    for _ in range(30):
        tw.add(random_step(rng, 2, p_end=0.15))
    live = jax_sampleable_ids(buf, tw.state)
    prios = rng.uniform(0.2, 3.0, live.shape[0])
    tw.state = update_padded(buf, tw.state, live, prios)
    tw.np_buf.update_priorities(live, prios)
    core_p = dict(zip(live.tolist(), (prios + 1e-6) ** buf.config.alpha, strict=True))
    for pad in pads:
        allowed = live if pad else np.intersect1d(live, whole_starts(tw, 4))
        m = np.array([core_p[i] for i in allowed.tolist()])
        p = m / m.sum()
        ids, probs, weights, _ = (np.asarray(a) for a in many_starts(buf, 4, pad)(
            tw.state, jax.random.key(9)))  # fmt: skip
        chi = stats.chisquare(start_counts(ids, allowed), p * ids.size)
        assert chi.pvalue > 1e-3, (pad, chi)
        pos = np.searchsorted(allowed, ids)
        np.testing.assert_allclose(probs, p[pos], rtol=1e-4)
        np.testing.assert_allclose(weights, (p.min() / p[pos]) ** buf.config.beta, rtol=1e-4)
        # The core's probabilities for its own draws are the same law.
        core = tw.np_buf.sample_sequences(32, 4, pad=pad)
        np.testing.assert_allclose(
            core["probabilities"], p[np.searchsorted(allowed, core["ids"])], rtol=1e-5
        )


def test_prioritized_starts_follow_the_priorities() -> None:
    """Over the starts whose runs are whole: the law renormalised among them (with
    ``pad=True`` every sampleable transition is a start, :meth:`sample`'s own law)."""
    run_prioritized_starts((False,))


@pytest.mark.slow
def test_prioritized_starts_follow_the_priorities_long() -> None:
    run_prioritized_starts((True, False))


def test_sampled_sequences_are_their_get_sequences() -> None:
    buf = jax_buffer(**CONFIGS["drops episodes, stack 3"])
    rng = np.random.default_rng(7)
    tw = Twins(buf)
    for _ in range(25):
        tw.add(random_step(rng, 2, p_end=0.3))
    b = host_batch(buf.sample_sequences(tw.state, jax.random.key(0), 16, 13))
    again = host_batch(buf.get_sequences(tw.state, padded(b["ids"], buf.capacity), 13), 16)
    assert_bit_identical({k: v for k, v in b.items() if k != "weights"}, again)
    with pytest.raises(rr.ConfigError, match="pad"):
        buf.sample_sequences(tw.state, jax.random.key(0), 4, 3, pad=1)  # type: ignore[arg-type]
