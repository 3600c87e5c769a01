"""Hostile arguments to the JAX buffer's functions: answered, never hung, never allocated past
the size budget.

The contract of :mod:`tests.test_hostile` for :mod:`rlreplay.jax` (two envs, 2-step windows,
stacks of 2; uniform and prioritized): each call with host-side arguments Hypothesis makes
hostile (huge and negative counts, NaN and infinite floats, odd flags, odd arrays) returns or
raises an rlreplay error within :data:`~tests.test_hostile.BOUND` seconds. The functions are
pure, so a refusal cannot change the state; the state passed in is checked to be unchanged
anyway (no call donates it). Values inside arrays are not refused under ``jit`` by design
(``update_priorities`` ignores invalid ones), so array arguments here vary in shape and dtype.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

jax = pytest.importorskip("jax")

import numpy as np  # noqa: E402

import rlreplay as rr  # noqa: E402
from tests.jax.helpers import jax_buffer, random_step  # noqa: E402
from tests.test_hostile import (  # noqa: E402
    TEST_BUDGET,
    budget,
    count,
    flags,
    hostile,
    maybe,
    run_bounded,
)

EXAMPLES = 12
KINDS = ("uniform", "prioritized")


@functools.cache
def filled(kind: str) -> tuple[Any, Any]:
    buf = jax_buffer(
        capacity=32, num_envs=2, n_step=2, frame_stack=2, prioritized=kind == "prioritized",
        finals_per_env=16,
    )  # fmt: skip
    state = buf.init()
    rng = np.random.default_rng(0)
    for _ in range(20):
        state = buf.add(state, random_step(rng, 2, p_end=0.2))
    return buf, state


Call = Callable[[Any, Any], Any]


def call_of(name: str, *args: Any, key: bool = False, **kwargs: Any) -> Call:
    def call(buf: Any, state: Any) -> Any:
        head = (state, jax.random.key(0)) if key else (state,)
        return getattr(buf, name)(*head, *args, **kwargs)

    call.__name__ = f"{name}(*{args!r:.200}, **{kwargs!r:.200})"
    return call


def small_ids() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(st.integers(-5, 60), min_size=1, max_size=3).map(np.asarray),
        st.sampled_from([np.zeros(0, np.int64), np.zeros((2, 2), np.int32), 3, np.int64(7)]),
    )


def calls(kind: str, method: str) -> st.SearchStrategy[Call]:
    def build(*args: st.SearchStrategy[Any], key: bool = False,
              **options: st.SearchStrategy[Any]) -> st.SearchStrategy[Call]:  # fmt: skip
        return st.builds(
            lambda a, kw: call_of(method, *a, key=key, **kw), st.tuples(*args), maybe(**options)
        )

    if method == "sample":
        if kind == "prioritized":
            return build(count(4), key=True)
        return build(count(4), key=True, recent_ratio=hostile() | st.floats(0, 1),
                     recent_steps=count(), replacement=flags())  # fmt: skip
    if method == "sample_sequences":
        return build(count(3), count(3), key=True, within_episode=flags(), pad=flags(),
                     balance_envs=flags())  # fmt: skip
    if method == "sample_episodes":
        return build(count(3), key=True, max_length=count(4))
    if method == "get_sequences":
        return build(small_ids(), count(3), within_episode=flags())
    if method == "get_transitions":
        return build(small_ids())
    if method == "can_sample":
        return build(count())
    raise AssertionError(method)


METHODS = ["sample", "sample_sequences", "sample_episodes", "get_sequences", "get_transitions",
           "can_sample"]  # fmt: skip


def check_call(kind: str, call: Call) -> None:
    buf, state = filled(kind)
    before = [np.asarray(leaf).copy() for leaf in jax.tree_util.tree_leaves(state)]
    with budget(TEST_BUDGET):
        _, exc = run_bounded(lambda: call(buf, state), call.__name__)
    if exc is not None and not isinstance(exc, rr.ReplayError):
        raise AssertionError(
            f"{call.__name__} raised {type(exc).__name__}, not an rlreplay error: {exc}"
        ) from exc
    after = jax.tree_util.tree_leaves(state)
    assert all(np.array_equal(a, np.asarray(b)) for a, b in zip(before, after, strict=True))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("method", METHODS)
@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
@given(data=st.data())
def test_hostile_jax_calls(kind: str, method: str, data: st.DataObject) -> None:
    check_call(kind, data.draw(calls(kind, method), label="call"))


def test_sizes_beyond_the_budget_are_refused_before_tracing() -> None:
    buf, state = filled("uniform")
    key = jax.random.key(0)
    with budget(TEST_BUDGET):
        refused: tuple[tuple[Callable[[], Any], str], ...] = (
            (lambda: buf.sample(state, key, 2**31), "batch_size"),
            (lambda: buf.sample_sequences(state, key, 2, 10**9), "length"),
            (lambda: buf.sample_episodes(state, key, 10**9), "batch_size"),
            (lambda: buf.get_sequences(state, np.zeros(0, np.int64), 10**9), "length"),
            (lambda: buf.get_transitions(state, np.zeros(10**7, np.int32)), "ids"),
        )
        for call, name in refused:
            with pytest.raises(rr.ConfigError, match=rf"^{name}: "):
                call()
