"""Hypothesis: random sequences of add, sample, update_priorities, clear, abandon_episode and
round trips through ``to_replay_buffer`` / ``from_replay_buffer``, run on the JAX buffer and
on the NumPy core side by side; after every operation both hold the same sampleable
transitions, bit for bit, with the same priorities."""

from __future__ import annotations

import pytest

jax = pytest.importorskip("jax")

import numpy as np  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import rlreplay.jax as rrj  # noqa: E402
from tests.jax.helpers import (  # noqa: E402
    Twins,
    assert_bit_identical,
    assert_same_contents,
    host_batch,
    jax_buffer,
    random_step,
)
from tests.jax.test_prioritized import core_priorities, jax_priorities  # noqa: E402

# The configurations of the other test files (compiled once per session), two of which drop
# episodes for lack of final records.
CONFIGS = [
    dict(capacity=16, num_envs=2, n_step=3, finals_per_env=8),
    dict(capacity=18, num_envs=3, n_step=2, frame_stack=3, finals_per_env=6),
    dict(capacity=20, num_envs=2, n_step=3, frame_stack=2, prioritized=True, finals_per_env=10),
    dict(capacity=40, num_envs=2, n_step=2, prioritized=True, finals_per_env=20, eps=0.0),
    dict(capacity=24, num_envs=2, n_step=2, frame_stack=3, finals_per_env=2),
    dict(capacity=24, num_envs=2, n_step=2, frame_stack=3, prioritized=True, finals_per_env=2),
]
BATCH = 16  # one compiled sample per configuration

add_op = st.tuples(
    st.just("add"), st.sampled_from([0.0, 0.1, 0.4, 0.9]), st.sampled_from([0.0, 0.2])
)
sample_op = st.tuples(st.just("sample"), st.integers(0, 2**31 - 1), st.just(0))
update_op = st.tuples(st.just("update"), st.integers(0, 2**31 - 1), st.integers(1, 8))
trip_op = st.tuples(st.just("round trip"), st.just(0), st.just(0))
clear_op = st.tuples(st.just("clear"), st.just(0), st.just(0))
abandon_op = st.tuples(st.just("abandon"), st.integers(0, 2), st.just(0))
ops = st.lists(
    st.one_of(add_op, add_op, add_op, sample_op, update_op, trip_op, clear_op, abandon_op),
    min_size=1, max_size=40,
)  # fmt: skip


def assert_same_priorities(tw: Twins) -> None:
    if not tw.buf.prioritized:
        return
    C, E = tw.buf.env_capacity, tw.buf.num_envs
    heads = np.asarray(tw.state.head)
    stored = np.array(
        [t * E + e for e in range(E) for t in range(int(heads[e]), tw.count)], np.int64
    )
    if stored.shape[0]:
        np.testing.assert_allclose(
            jax_priorities(tw.buf, tw.state, stored), core_priorities(tw.np_buf, stored),
            rtol=1e-6,
        )  # fmt: skip
    assert stored.shape[0] <= C * E


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=st.sampled_from(range(len(CONFIGS))), script=ops, seed=st.integers(0, 2**16))
def test_random_operations_match_the_core(
    config: int, script: list[tuple[str, int | float, int]], seed: int
) -> None:
    buf = jax_buffer(**CONFIGS[config])
    rng = np.random.default_rng(seed)
    tw = Twins(buf)
    for op, a, b in script:
        if op == "add":
            tw.add(random_step(rng, buf.num_envs, p_end=float(a), p_trunc=float(b)))
        elif op == "sample":
            if not bool(buf.can_sample(tw.state, BATCH)):
                continue
            batch = host_batch(buf.sample(tw.state, jax.random.key(int(a)), BATCH))
            assert np.asarray(buf.sampleable(tw.state, batch["ids"])).all()
            theirs = tw.np_buf.get_transitions(batch["ids"])
            drawn = {k: v for k, v in batch.items() if k != "probabilities"}
            if buf.prioritized:  # weights are the law's; the core's get_transitions has ones
                drawn["weights"] = np.ones(BATCH, np.float32)
            assert_bit_identical(drawn, {k: np.asarray(v) for k, v in theirs.items()})
        elif op == "update":
            if not buf.prioritized or tw.count == 0:
                continue
            pick = np.random.default_rng(int(a))
            issued = tw.count * buf.num_envs
            ids = pick.choice(issued, size=min(int(b), issued), replace=False)
            values = pick.choice([0.0, 0.5, 1.5, 7.0], size=ids.shape[0])
            tw.np_buf.update_priorities(ids, values)
            # Padded to 8 with -1 (ignored): one compiled update per configuration.
            ids = np.concatenate([ids, np.full(8 - ids.shape[0], -1)])
            values = np.concatenate([values, np.zeros(8 - values.shape[0])])
            tw.state = buf.update_priorities(tw.state, ids, values)
        elif op == "clear":
            tw.clear()
        elif op == "abandon":
            tw.abandon(int(a) % buf.num_envs)
        else:  # round trip: the state through a NumPy buffer and back
            np_buf = rrj.to_replay_buffer(buf, tw.state)
            _, tw.state = rrj.from_replay_buffer(np_buf, finals_per_env=buf.config.finals_per_env)
            ids = np.sort(np_buf.sampleable_ids())
            np.testing.assert_array_equal(ids, np.sort(tw.np_buf.sampleable_ids()))
        assert_same_contents(tw)
        assert_same_priorities(tw)
