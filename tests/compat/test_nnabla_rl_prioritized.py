"""nnabla-rl prioritized replay front-end against nnabla-rl 0.16.0's own code.

The reference is nnabla-rl 0.16.0's ``prioritized_replay_buffer`` module transcribed in
``tests/compat/_nnabla_rl_reference.py`` (its bugs included). Given generators seeded alike,
the front-end must draw the same experiences, give bit-identical weights, raise the same
exception types and leave its trees and heap in the same state, over Hypothesis sequences of
appends, samples (``num_steps`` 1-3), ``sample_indices`` and updates. The fixes of nnabla-rl's
real bugs are tested on their own (and listed in docs/migrating/nnabla_rl.md).
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rlreplay.compat.nnabla_rl.random as rl_random
import rlreplay.compat.nnabla_rl.replay_buffers as RB
import rlreplay.compat.nnabla_rl.replay_buffers.prioritized_replay_buffer as per
from rlreplay.compat.nnabla_rl.replay_buffer import ReplayBuffer
from tests.compat import _nnabla_rl_reference as ref


def experience(t: int) -> tuple[Any, ...]:
    s = np.full(2, t, np.float32)
    return (s, np.array([t % 3]), float(t), 1.0, s + 1, {"t": t})


def names(experiences: Any, tuples: bool) -> Any:
    """Append numbers of sampled experiences (lists, or a tuple of lists per step)."""
    if isinstance(experiences, tuple):
        return tuple(names(e, tuples) for e in experiences)
    return [int(e[2]) if tuples else e for e in experiences]


def outcome(call: Any) -> tuple[str, Any]:
    try:
        with np.errstate(all="ignore"):  # both warn alike on zero masses (epsilon=0)
            return "ok", call()
    except Exception as e:  # the exception *type* is compared
        return "error", type(e)


def same_type(mine: type, theirs: type) -> bool:
    return issubclass(mine, theirs)


def pair(rank_based: bool, capacity: int, seed: int, **kw: Any) -> tuple[Any, Any]:
    if rank_based:
        mine: Any = per.RankBasedPrioritizedReplayBuffer(capacity, **kw, seed=seed)
        theirs: Any = ref.RankBasedPrioritizedReplayBuffer(capacity, **kw)
    else:
        mine = per.ProportionalPrioritizedReplayBuffer(capacity, **kw, seed=seed)
        theirs = ref.ProportionalPrioritizedReplayBuffer(capacity, **kw)
    theirs._rng = np.random.default_rng(seed)
    return mine, theirs


settings_ = settings(max_examples=25, deadline=None)
ops = st.lists(
    st.tuples(
        st.sampled_from(["append", "append", "sample", "indices"]),
        st.integers(1, 6),  # num_samples
        st.integers(1, 3),  # num_steps
        st.lists(st.sampled_from([0.0, 0.25, -0.5, 1.0, -3.0, 2.0]), min_size=6, max_size=6),
        st.booleans(),  # errors as (k, 1)
    ),
    max_size=40,
)


@settings_
@given(
    capacity=st.sampled_from([2, 3, 5, 8, 11]),
    alpha=st.sampled_from([0.0, 0.6, 1.0]),
    epsilon=st.sampled_from([0.0, 0.05, 0.5]),
    init_max_error=st.sampled_from([1.0, 2.0, 0.5]),
    method=st.sampled_from(["buffer_max", "batch_max"]),
    clip=st.sampled_from([None, (-1, 1)]),
    tuples=st.booleans(),
    seed=st.integers(0, 2**16),
    steps=ops,
)
def test_proportional_matches_nnabla_rl(
    capacity: int,
    alpha: float,
    epsilon: float,
    init_max_error: float,
    method: str,
    clip: Any,
    tuples: bool,
    seed: int,
    steps: list[Any],
) -> None:
    kw = dict(
        alpha=alpha, beta=0.4, betasteps=7, error_clip=clip, epsilon=epsilon,
        init_max_error=init_max_error, normalization_method=method,
    )  # fmt: skip
    mine, theirs = pair(False, capacity, seed, **kw)
    run_sequence(mine, theirs, steps, tuples, max_steps=1 if epsilon == 0.0 else 3)
    np.testing.assert_array_equal(
        mine._sum_tree._tree, [n.value for n in theirs._buffer._sum_tree._tree]
    )


@settings_
@given(
    capacity=st.sampled_from([2, 3, 5, 8, 11]),
    alpha=st.sampled_from([0.0, 0.5, 0.7, 1.3]),
    reset=st.sampled_from([1, 3, 1000]),
    sort=st.sampled_from([1, 2, 5, 1000000]),
    clip=st.sampled_from([None, (-1, 1)]),
    tuples=st.booleans(),
    seed=st.integers(0, 2**16),
    steps=ops,
)
def test_rank_based_matches_nnabla_rl(
    capacity: int,
    alpha: float,
    reset: int,
    sort: int,
    clip: Any,
    tuples: bool,
    seed: int,
    steps: list[Any],
) -> None:
    kw = dict(
        alpha=alpha, beta=0.5, betasteps=7, error_clip=clip, reset_segment_interval=reset,
        sort_interval=sort,
    )  # fmt: skip
    mine, theirs = pair(True, capacity, seed, **kw)
    run_sequence(mine, theirs, steps, tuples, max_steps=3)
    heap = theirs._buffer._max_heap
    for h in range(capacity):
        item = heap[h]
        assert mine._max_heap[h] == (None if item is None else (item[0], per_float(item[1])))


def per_float(value: Any) -> float:
    return float(np.asarray(value, np.float64).reshape(-1)[0])  # nnabla-rl may keep (1,) arrays


def run_sequence(mine: Any, theirs: Any, steps: list[Any], tuples: bool, max_steps: int) -> None:
    t = 0
    for op, k, num_steps, errors, column in steps:
        if op == "append" or len(theirs) == 0:
            mine.append(experience(t) if tuples else t)
            theirs.append(t)
            t += 1
            continue
        num_steps = min(num_steps, max_steps)
        if op == "sample":
            got = outcome(lambda: mine.sample(k, num_steps))  # noqa: B023
            if got[0] == "error" and issubclass(got[1], per.EndlessDrawError):
                return  # nnabla-rl would loop for ever here (tested on its own below)
            want = outcome(lambda: theirs.sample(k, num_steps))  # noqa: B023
        else:
            idx = list(range(max(0, len(theirs) - num_steps - k + 1), len(theirs)))[:k]
            got = outcome(lambda: mine.sample_indices(idx, num_steps))  # noqa: B023
            want = outcome(lambda: theirs.sample_indices(idx, num_steps))  # noqa: B023
        assert got[0] == want[0], (got, want)
        if got[0] == "error":
            assert same_type(got[1], want[1]), (got, want)
            continue
        (e_mine, i_mine), (e_theirs, i_theirs) = got[1], want[1]
        assert names(e_mine, tuples) == names(e_theirs, False)
        w_mine, w_theirs = i_mine["weights"], np.asarray(i_theirs["weights"], np.float64)
        assert w_mine.dtype == np.float64 and w_mine.shape == w_theirs.shape
        np.testing.assert_array_equal(w_mine, w_theirs)
        n = len(e_theirs[0]) if isinstance(e_theirs, tuple) else len(e_theirs)
        e = np.array(errors[:n])
        e = e[:, None] if column else e
        mine.update_priorities(e)
        theirs.update_priorities(e)
    assert mine._beta == theirs._beta


# ------------------------------------------------------------------ helper classes
@settings(max_examples=40, deadline=None)
@given(
    capacity=st.integers(1, 9),
    steps=st.lists(
        st.tuples(
            st.sampled_from(["append", "update", "query"]), st.integers(0, 8), st.floats(0, 4)
        ),
        max_size=30,
    ),
)
def test_trees_match_nnabla_rl(capacity: int, steps: list[Any]) -> None:
    mine = (per.SumTree(capacity), per.MinTree(capacity))
    theirs = (ref.SumTree(capacity), ref.MinTree(capacity))
    for op, a, v in steps:
        a %= capacity
        if op == "append":
            for x in (*mine, *theirs):
                x.append(v)
        elif op == "update":
            for x in (*mine, *theirs):
                x.update(a, v)
        elif capacity > 1:  # nnabla-rl's one-leaf SumTree has no descent (see below)
            q = v * mine[0].sum() / 4
            assert mine[0].get_absolute_index_from_query(q) == theirs[
                0
            ].get_absolute_index_from_query(q)
        for m, r in zip(mine, theirs, strict=True):
            assert len(m) == len(r)
            assert [m[i] for i in range(2 * capacity - 1)] == [
                r[i] for i in range(2 * capacity - 1)
            ]
    assert mine[0].sum() == theirs[0].sum() and mine[1].min() == theirs[1].min()
    with pytest.raises(ValueError, match="You must use value between"):
        mine[0].get_absolute_index_from_query(mine[0].sum() + 1)


@settings(max_examples=40, deadline=None)
@given(
    capacity=st.integers(1, 9),
    steps=st.lists(
        st.tuples(
            st.sampled_from(["append", "update", "sort"]),
            st.integers(0, 8),
            st.sampled_from([0.0, 0.5, 1.0, 2.0, float("inf"), float("nan")]),
        ),
        max_size=30,
    ),
)
def test_max_heap_matches_nnabla_rl(capacity: int, steps: list[Any]) -> None:
    mine, theirs = per.MaxHeap(capacity), ref.MaxHeap(capacity)
    for op, a, v in steps:
        if op == "append":
            mine.append(v)
            theirs.append(v)
        elif op == "update" and len(theirs):
            mine.update(a % len(theirs), v)
            theirs.update(a % len(theirs), v)
        elif op == "sort":
            mine.sort_data()
            theirs.sort_data()
        assert len(mine) == len(theirs)
        for h in range(capacity):
            item = theirs[h]
            got = mine[h]
            if item is None:
                assert got is None
            else:
                assert got is not None and got[0] == item[0]
                assert got[1] == item[1] or (np.isnan(got[1]) and np.isnan(item[1]))
            assert mine.heap_to_absolute_index(h) == theirs.heap_to_absolute_index(h)
            assert mine.absolute_to_heap_index(h) == theirs.absolute_to_heap_index(h)


def test_data_holders_match_nnabla_rl() -> None:
    mine, theirs = per.SumTreeDataHolder(3, 1.5), ref.SumTreeDataHolder(3, 1.5)
    for holder in (mine, theirs):
        for item in "abcd":
            holder.append(item)
        holder.update_priority(0, 4.0)
    assert [mine[i] for i in range(3)] == [theirs[i] for i in range(3)] == ["b", "c", "d"]
    assert mine.sum_priority() == theirs.sum_priority() == 7.0
    assert mine.min_priority() == theirs.min_priority() == 1.5
    assert [mine.get_priority(i) for i in range(3)] == [4.0, 1.5, 1.5]
    assert mine.get_index_from_query(4.5) == theirs.get_index_from_query(4.5) == 1
    with pytest.raises(KeyError):
        mine[3]
    no_min = per.SumTreeDataHolder(2, 1.0, keep_min=False)
    with pytest.raises(AttributeError):
        no_min.min_priority()

    ranked, rranked = per.MaxHeapDataHolder(3, alpha=1.0), ref.MaxHeapDataHolder(3, alpha=1.0)
    for holder in (ranked, rranked):
        for item in "abcd":  # enters with inf: the newest items rank among the first
            holder.append(item)
        holder.update_priority(0, 0.1)
        holder.update_priority(2, 5.0)
        holder.sort_data()
    assert [ranked.get_priority(i) for i in range(3)] == [rranked.get_priority(i) for i in range(3)]
    got = [ranked.get_relative_index_from_heap_index(h) for h in range(3)]
    assert got == [rranked.get_relative_index_from_heap_index(h) for h in range(3)]


# ------------------------------------------------------------------ API and exceptions
def test_signatures_are_nnabla_rls() -> None:
    def params(f: Any) -> list[str]:
        return [p for p in inspect.signature(f).parameters if p not in ("self", "seed")]

    assert params(per.ProportionalPrioritizedReplayBuffer) == [
        "capacity", "alpha", "beta", "betasteps", "error_clip", "epsilon", "init_max_error",
        "normalization_method",
    ]  # fmt: skip
    assert params(per.RankBasedPrioritizedReplayBuffer) == [
        "capacity", "alpha", "beta", "betasteps", "error_clip", "reset_segment_interval",
        "sort_interval",
    ]  # fmt: skip
    assert params(RB.ProportionalPrioritizedAtariBuffer) == [
        "capacity", "alpha", "beta", "betasteps", "error_clip", "epsilon",
        "normalization_method", "stacked_frames",
    ]  # fmt: skip
    assert params(RB.RankBasedPrioritizedAtariBuffer) == [
        "capacity", "alpha", "beta", "betasteps", "error_clip", "reset_segment_interval",
        "sort_interval", "stacked_frames",
    ]  # fmt: skip
    for cls in (RB.ProportionalPrioritizedAtariBuffer, RB.RankBasedPrioritizedAtariBuffer):
        assert inspect.signature(cls).parameters["betasteps"].default == 50000000
    defaults = inspect.signature(per.PrioritizedReplayBuffer).parameters
    assert defaults["alpha"].default == 0.6 and defaults["variant"].default == "proportional"


def test_constructor_errors_are_nnabla_rls() -> None:
    for cls in (per.ProportionalPrioritizedReplayBuffer, per.RankBasedPrioritizedReplayBuffer):
        for capacity in (None, 0, -1):
            with pytest.raises(ValueError, match="buffer size must be greater than 0"):
                cls(capacity)
        with pytest.raises(ZeroDivisionError):
            cls(4, betasteps=0)
    for method in ("buffer", "batch", "max"):
        with pytest.raises(AssertionError):
            per.ProportionalPrioritizedReplayBuffer(4, normalization_method=method)
    with pytest.raises(ValueError, match="Unknown prioritized replay buffer variant"):
        per.PrioritizedReplayBuffer(4, variant="uniform")
    wrapper = per.PrioritizedReplayBuffer(4, variant="rank_based", seed=0)
    assert isinstance(wrapper, ReplayBuffer) and wrapper.capacity == 4


@pytest.mark.parametrize("rank_based", [False, True])
def test_sampling_errors_are_nnabla_rls(rank_based: bool) -> None:
    mine, theirs = pair(rank_based, 5, 0)
    for b in (mine, theirs):
        b.append_all(range(3))
    for k, steps, error in ((4, 1, ValueError), (1, 4, RuntimeError), (-1, 1, None)):
        got, want = outcome(lambda: mine.sample(k, steps)), outcome(lambda: theirs.sample(k, steps))  # noqa: B023
        assert got[0] == want[0] == "error" and same_type(got[1], want[1]), (got, want)
        assert error is None or issubclass(got[1], error)
    with pytest.raises(ZeroDivisionError):  # nnabla-rl divides by num_samples
        mine.sample(0)
    with pytest.raises(ZeroDivisionError):
        theirs.sample(0)
    for b in (mine, theirs):
        with pytest.raises(ValueError, match="Indices are empty"):
            b.sample_indices([])
        with pytest.raises(TypeError):  # nothing sampled: nnabla-rl zips None
            b.update_priorities([1.0])
        b.sample(2)
        with pytest.raises(RuntimeError, match="without updating priority"):
            b.sample(1)
        b.update_priorities([0.5, 0.5])
        with pytest.raises(KeyError):
            b.sample_indices([-1])


def test_sample_indices_advances_beta_and_accepts_num_steps_zero() -> None:
    for rank_based in (False, True):
        mine, theirs = pair(rank_based, 4, 0, beta=0.5, betasteps=2)
        for b in (mine, theirs):
            b.append_all(range(4))
            experiences, info = b.sample_indices([0, 1], num_steps=0)
            assert experiences == () and info["weights"].shape == (2, 1)
            b.update_priorities([0.0, 1.0])
        assert mine._beta == theirs._beta == 0.75


def test_proportional_scalar_error_is_zipped_as_one() -> None:
    mine, theirs = pair(False, 4, 0)
    for b in (mine, theirs):
        b.append_all(range(4))
        b.sample_indices([2, 3])
        b.update_priorities(0.25)  # flattened to one error: only index 2 changes
    assert mine._sum_tree.values([2, 3]).tolist() == [
        theirs._buffer.get_priority(2),
        theirs._buffer.get_priority(3),
    ]
    rank, _ = pair(True, 4, 0)
    rank.append_all(range(4))
    rank.sample_indices([0])
    with pytest.raises(TypeError):  # nnabla-rl's rank buffer iterates a 0-d array
        rank.update_priorities(0.25)


def test_global_generator_is_drawn_as_nnabla_rl_draws() -> None:
    rl_random.seed(7)
    mine = per.RankBasedPrioritizedReplayBuffer(50)
    theirs = ref.RankBasedPrioritizedReplayBuffer(50)
    theirs._rng = np.random.default_rng(7)
    mine.append_all(range(50))
    theirs.append_all(range(50))
    assert mine.sample(8)[0] == theirs.sample(8)[0]


# ------------------------------------------------------------------ fixes of real bugs
@pytest.mark.parametrize("rank_based", [False, True])
def test_update_follows_the_sampled_experience_across_appends(rank_based: bool) -> None:
    """nnabla-rl keeps relative indices: once the ring moves they name other experiences."""
    mine, theirs = pair(rank_based, 3, 0, error_clip=None)
    for b in (mine, theirs):
        b.append_all(range(3))
        b.sample_indices([1])  # experience 1
        b.append(3)  # experience 0 dropped: relative index 1 is now experience 2
        b.update_priorities([5.0])
    # experience t lives in slot t % 3: mine gave 5.0 to slot 1, nnabla-rl to slot 2
    if rank_based:
        assert mine._max_heap[mine._max_heap.absolute_to_heap_index(1)] == (1, 5.0)
        assert theirs._buffer._max_heap[theirs._buffer._max_heap.absolute_to_heap_index(2)] == (
            2,
            5.0,
        )
    else:
        assert mine._sum_tree.values([1, 2]).tolist() == [(5.0 + 1e-8) ** 0.6, 1.0]
        assert theirs._buffer._sum_tree[theirs._buffer._sum_tree.absolute_to_tree_index(2)] > 2.0
    mine.sample_indices([0])  # experience 1 again, then overwritten before the update
    mine.append_all([4, 5])
    mine.update_priorities([0.0])  # skipped: experience 1 is gone
    assert 1 not in [mine[i] for i in range(3)]


def test_one_slot_proportional_buffer_samples() -> None:
    """nnabla-rl's SumTree of one leaf never sets the leaf it returns (UnboundLocalError)."""
    theirs = ref.ProportionalPrioritizedReplayBuffer(1)
    theirs.append(0)
    with pytest.raises(UnboundLocalError):
        theirs.sample(1)
    mine = per.ProportionalPrioritizedReplayBuffer(1, seed=0)
    mine.append_all([0, 1])
    assert mine.sample(1)[0] == [1]


def test_endless_draws_raise_instead_of_hanging() -> None:
    # proportional, every mass 0 (epsilon=0): every query is 0 and reaches one fixed leaf
    # (right-most path); when it holds the newest experience, nnabla-rl draws it for ever
    prop = per.ProportionalPrioritizedReplayBuffer(4, epsilon=0.0, seed=0)
    prop.append_all(range(4))
    prop.sample_indices([0, 1, 2, 3])
    prop.update_priorities([0.0, 0.0, 0.0, 0.0])
    with pytest.warns(RuntimeWarning):  # weights 0 / 0, NaN with NumPy's warning, as there
        assert prop.sample(2, num_steps=1)[0] == [3, 3]  # nnabla-rl's leaf: absolute index 3
    prop.update_priorities([0.0, 0.0])
    with pytest.raises(RuntimeError, match="for ever"):
        prop.sample(1, num_steps=2)
    # a slice of the mass that only the newest experience covers
    prop2 = per.ProportionalPrioritizedReplayBuffer(4, epsilon=0.0, error_clip=None, seed=0)
    prop2.append_all(range(4))
    prop2.sample_indices([0, 1, 2, 3])
    prop2.update_priorities([1.0, 0.0, 0.0, 3.0])  # slice [2, 4) lies in experience 3
    with pytest.raises(RuntimeError, match="for ever"):
        prop2.sample(2, num_steps=2)
    # (rank-based draws always end: the segments reach the N0 >= num_steps heap positions of
    # the length they were computed for, and at most num_steps - 1 experiences are too new)
