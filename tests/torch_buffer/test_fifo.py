"""dequeue and gather_all on the device buffer: for the same stream (envs in lockstep or
subsets) they return what the NumPy core's return, bit for bit, and leave the same sampleable
transitions, sequences and priorities; refusals change nothing."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rlreplay as rr
from tests.torch_buffer.helpers import (
    assert_bit_identical,
    assert_same_contents,
    host,
    make,
    random_step,
)
from tests.torch_buffer.test_env_ids import (
    SubsetTwins,
    assert_same_priorities,
    assert_same_sequences,
)

Array = np.ndarray[Any, Any]

CONFIGS: list[dict[str, Any]] = [
    dict(capacity=18, num_envs=3, n_step=3, finals_per_env=6),
    dict(
        capacity=24, num_envs=3, n_step=2, frame_stack=3, finals_per_env=8, next_fields=("action",)
    ),
    dict(capacity=16, num_envs=2, frame_stack=2, stack_pad="first", finals_per_env=8),
    dict(capacity=24, num_envs=3, n_step=2, frame_stack=2, finals_per_env=2),
    dict(capacity=24, num_envs=3, n_step=2, frame_stack=2, prioritized=True),
]


def core(batch: Any) -> dict[str, Array]:
    return {k: np.asarray(v) for k, v in batch.items()}


def dequeue_both(tw: SubsetTwins, n: int, envs: Array | None, kind: str) -> None:
    """The same dequeue on both; the same batch, or the same refusal (nothing removed)."""
    given_envs: Any = (
        None
        if envs is None
        else {
            "list": None if envs is None else envs.tolist(),
            "tensor": None if envs is None else torch.from_numpy(envs).to(tw.buf.device),
        }[kind]
    )
    try:
        theirs = core(tw.np_buf.dequeue(n, env_ids=envs))
    except rr.ReplayError as exc:
        with pytest.raises(type(exc)):
            tw.buf.dequeue(n, given_envs)  # type: ignore[attr-defined]
        return
    ours = host(tw.buf.dequeue(n, given_envs))  # type: ignore[attr-defined]
    assert_bit_identical(ours, theirs)
    stepped = np.arange(tw.buf.num_envs) if envs is None else envs
    tw.np_head[stepped] += n


def check(tw: SubsetTwins) -> None:
    assert_same_contents(tw)  # type: ignore[arg-type]
    assert_bit_identical(host(tw.buf.gather_all()), core(tw.np_buf.gather_all()))  # type: ignore[attr-defined]
    assert_same_sequences(tw, 3)
    if tw.buf.config.prioritized:
        assert_same_priorities(tw)


ops = st.lists(
    st.one_of(
        st.tuples(st.just("adds"), st.integers(0, 2**31 - 1), st.integers(1, 12)),
        st.tuples(st.just("dequeue"), st.integers(0, 2**31 - 1), st.integers(1, 9)),
        st.tuples(st.just("clear"), st.just(0), st.just(0)),
    ),
    min_size=1,
    max_size=20,
)


@settings(deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow])
@given(config=st.sampled_from(range(len(CONFIGS))), script=ops, seed=st.integers(0, 2**16))
def test_random_fifo_use_matches_the_core(
    config: int, script: list[tuple[str, int, int]], seed: int
) -> None:
    buf = make("cpu", **CONFIGS[config], seed=seed)
    tw = SubsetTwins(buf)
    rng = np.random.default_rng(seed)
    E = buf.num_envs
    for op, a, b in script:
        pick = np.random.default_rng(a)
        if op == "adds":
            for _ in range(b):
                lockstep = pick.random() < 0.5
                envs = None if lockstep else pick.permutation(E)[: pick.integers(1, E + 1)]
                tw.add(random_step(rng, E, p_end=0.25), envs, "tensor" if a % 2 else "list")
        elif op == "dequeue":
            envs = None if pick.random() < 0.3 else pick.permutation(E)[: pick.integers(0, E + 1)]
            dequeue_both(tw, b, envs, "tensor" if a % 2 else "list")
        else:
            tw.clear()
        check(tw)


@pytest.mark.parametrize("config", [0, 1, 4])
def test_dequeue_in_lockstep_and_gather_all(device: str, config: int) -> None:
    buf = make(device, **CONFIGS[config])
    tw = SubsetTwins(buf)
    rng = np.random.default_rng(config)
    E = buf.num_envs
    for i in range(40):
        tw.add(random_step(rng, E, p_end=0.3), None, "list")
        if i % 7 == 6:
            dequeue_both(tw, 3, None, "list")
            check(tw)
        if i % 11 == 10:
            dequeue_both(tw, 2, np.array([E - 1, 0]), "tensor")
            check(tw)
    assert not buf._ring.per_env  # dequeue keeps one host count


def test_dequeue_refusals_change_nothing(device: str) -> None:
    buf = make(device, capacity=16, num_envs=2)
    tw = SubsetTwins(buf)
    rng = np.random.default_rng(0)
    for _ in range(3):
        tw.add(random_step(rng, 2), None, "list")
    before = host(buf.gather_all())
    with pytest.raises(rr.EmptyBufferError, match=r"4 steps per env requested, envs hold \[3, 3\]"):
        buf.dequeue(4)
    with pytest.raises(rr.ShapeError, match="env_capacity 8"):
        buf.dequeue(9)
    with pytest.raises(rr.ConfigError, match="n"):
        buf.dequeue(0)
    with pytest.raises(rr.ConfigError, match="block"):
        buf.dequeue(1, block=True)
    with pytest.raises(rr.ConfigError, match="timeout"):
        buf.dequeue(1, timeout=-1.0)
    with pytest.raises(rr.InvalidIdError, match="unique"):
        buf.dequeue(1, [0, 0])
    with pytest.raises(rr.InvalidIdError, match=r"\[0, 2\)"):
        buf.dequeue(1, torch.tensor([2]))
    assert_bit_identical(host(buf.gather_all()), before)
    assert_same_contents(tw)  # type: ignore[arg-type]


def test_gather_all_of_an_empty_buffer(device: str) -> None:
    buf = make(device, capacity=16, num_envs=2)
    tw = SubsetTwins(buf)
    assert_bit_identical(host(buf.gather_all()), core(tw.np_buf.gather_all()))
