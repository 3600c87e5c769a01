"""Hypothesis: random sequences of add, sample, update_priorities, clear and round trips through
``to_replay_buffer`` / ``from_replay_buffer``, run on the device buffer and on the NumPy core
side by side; after every operation both hold the same sampleable transitions, bit for bit,
and the same priorities and tree leaves."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rlreplay.torch as rrt
from tests.torch_buffer.helpers import (
    Twins,
    assert_bit_identical,
    assert_same_contents,
    host,
    random_step,
)
from tests.torch_buffer.helpers import make as make_buffer
from tests.torch_buffer.test_prioritized import assert_same_priorities

CONFIGS: list[dict[str, Any]] = [
    dict(capacity=16, num_envs=2, n_step=3, finals_per_env=8, recent_ratio=0.5),
    dict(capacity=18, num_envs=3, n_step=2, frame_stack=3, finals_per_env=6, replacement=False),
    dict(capacity=20, num_envs=2, n_step=3, frame_stack=2, prioritized=True),
    dict(capacity=40, num_envs=2, n_step=2, prioritized=True, eps=0.0),
    dict(capacity=24, num_envs=2, n_step=2, frame_stack=3, stack_pad="first", finals_per_env=2),
    dict(capacity=24, num_envs=2, n_step=2, frame_stack=3, prioritized=True, finals_per_env=2),
]
BATCH = 16

add_op = st.tuples(
    st.just("add"), st.sampled_from([0.0, 0.1, 0.4, 0.9]), st.sampled_from([0.0, 0.2])
)
sample_op = st.tuples(st.just("sample"), st.just(0), st.just(0))
update_op = st.tuples(st.just("update"), st.integers(0, 2**31 - 1), st.integers(1, 8))
trip_op = st.tuples(st.just("round trip"), st.just(0), st.just(0))
clear_op = st.tuples(st.just("clear"), st.just(0), st.just(0))
ops = st.lists(
    st.one_of(add_op, add_op, add_op, sample_op, update_op, trip_op, clear_op),
    min_size=1,
    max_size=30,
)


@settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(config=st.sampled_from(range(len(CONFIGS))), script=ops, seed=st.integers(0, 2**16))
def test_random_operations_match_the_core(
    config: int, script: list[tuple[str, int | float, int]], seed: int
) -> None:
    buf = make_buffer("cpu", **CONFIGS[config], seed=seed)
    rng = np.random.default_rng(seed)
    tw = Twins(buf)
    prioritized = buf.config.prioritized
    for op, a, b in script:
        if op == "add":
            tw.add(random_step(rng, buf.num_envs, p_end=float(a), p_trunc=float(b)))
        elif op == "sample":
            can = bool(tw.buf.can_sample(BATCH))
            batch = host(tw.buf.sample(BATCH))
            if not can:
                assert (batch["weights"] == 0).all()
                continue
            assert tw.buf.sampleable(batch["ids"]).all()
            theirs = tw.np_buf.get_transitions(batch["ids"])
            drawn = {k: v for k, v in batch.items() if k != "probabilities"}
            if prioritized:  # weights are the law's; the core's get_transitions has ones
                drawn["weights"] = np.ones(BATCH, np.float32)
            assert_bit_identical(drawn, {k: np.asarray(v) for k, v in theirs.items()})
        elif op == "update":
            if not prioritized or tw.count == 0:
                continue
            pick = np.random.default_rng(int(a))
            issued = tw.count * buf.num_envs
            ids = pick.choice(issued, size=min(int(b), issued), replace=False)
            values = pick.choice([0.0, 0.5, 1.5, 7.0], size=ids.shape[0])
            stale = tw.np_buf.update_priorities(ids, values)  # type: ignore[attr-defined]
            assert int(tw.buf.update_priorities(ids, values)) == stale  # type: ignore[attr-defined]
        elif op == "clear":
            tw.clear()
        else:  # round trip: through a NumPy buffer and back
            np_buf = tw.buf.to_replay_buffer()
            tw.buf = rrt.from_replay_buffer(np_buf, finals_per_env=tw.buf.finals_per_env)
            np.testing.assert_array_equal(np_buf.sampleable_ids(), tw.np_buf.sampleable_ids())
        assert_same_contents(tw)
        if prioritized:
            assert_same_priorities(tw)
