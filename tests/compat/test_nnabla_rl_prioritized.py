"""nnabla-rl prioritized replay front-end: the law, the weights, the protocol, the helpers.

Written from nnabla-rl's documented behaviour (the seed, ``/work/shared/seeds/003``: the
``PrioritizedReplayBuffer(capacity, alpha=0.6, beta=0.4, betasteps=10000, error_clip=(-1, 1),
epsilon=1e-8, reset_segment_interval=1000, sort_interval=1000000, variant='proportional')``
signature and ``sample``'s ValueError/RuntimeError) and from nnabla-rl's prioritized module
(``ProportionalPrioritizedReplayBuffer``, ``RankBasedPrioritizedReplayBuffer``,
``normalization_method="buffer_max" | "batch_max"``, weights ``(P(i) / P_min) ** -beta`` of
shape ``(num_samples, 1)``, priorities ``|clip(error)| + epsilon`` zipped with the sampled
indices, new experiences at the largest priority so far). Every law is checked against a slow
reference that writes the probabilities out.

Experiences are ``(s, a, r, non_terminal, s_next, info)`` with ``r`` = the append number, so a
sampled experience names its position.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

import rlreplay as rr
import rlreplay.compat.nnabla_rl.replay_buffers as RB
import rlreplay.compat.nnabla_rl.replay_buffers.prioritized_replay_buffer as per
from rlreplay.compat.nnabla_rl.replay_buffer import ReplayBuffer
from rlreplay.compat.nnabla_rl.replay_buffers.prioritized_replay_buffer import (
    MaxHeap,
    MaxHeapDataHolder,
    MinTree,
    PrioritizedReplayBuffer,
    ProportionalPrioritizedReplayBuffer,
    RankBasedPrioritizedReplayBuffer,
    SumTree,
    SumTreeDataHolder,
)

P_CHI = 1e-3  # seeded chi-square tests: fail only on a real mismatch of the law
# beta + (1 - beta) / 10**18 rounds back to beta in float64: beta stays put. (betasteps=0
# raises ZeroDivisionError, as nnabla-rl's (1.0 - beta) / betasteps does.)
BETA_FIXED = 10**18
Buffer = ProportionalPrioritizedReplayBuffer | RankBasedPrioritizedReplayBuffer


def experience(t: int, *, last: bool = False) -> tuple[Any, ...]:
    s = np.full(2, t, np.float32)
    return (s, np.array([t % 3]), float(t), 0.0 if last else 1.0, s + 1, {"t": t})


def filled(cls: type[Any], n: int, **kwargs: Any) -> Any:
    kwargs.setdefault("seed", 0)
    buffer = cls(**kwargs)
    buffer.append_all([experience(t) for t in range(n)])
    return buffer


def numbers(experiences: Any) -> list[int]:
    """Append numbers of sampled experiences (their rewards)."""
    return [int(e[2]) for e in experiences]


def positions_of(buffer: Any, experiences: Any) -> np.ndarray[Any, Any]:
    first = int(buffer[0][2])
    return np.array(numbers(experiences)) - first


def set_errors(buffer: Any, errors: np.ndarray[Any, Any]) -> None:
    """Give position ``i`` the TD error ``errors[i]`` (one sample_indices + update)."""
    buffer.sample_indices(list(range(len(buffer))))
    buffer.update_priorities(errors)


# ---------------------------------------------------------------------------- references
def reference_priorities(errors: Any, clip: Any, eps: float) -> np.ndarray[Any, Any]:
    e = np.asarray(errors, np.float64)
    if clip is not None:
        e = np.clip(e, *clip)
    return np.abs(e) + eps


def reference_probabilities(priorities: Any, alpha: float, rank_based: bool) -> Any:
    p = np.asarray(priorities, np.float64)
    if rank_based:
        # competition ranking: rank = 1 + #{larger priorities}
        rank = np.array([1 + np.sum(p > x) for x in p], np.float64)
        mass = rank**-alpha
    else:
        mass = p**alpha
    return mass / mass.sum()


def reference_weights(probs: Any, picked: Any, beta: float, method: str) -> Any:
    p = np.asarray(probs)[picked]
    smallest = np.min(probs) if method == "buffer_max" else p.min()
    return ((p / smallest) ** -beta)[:, None]


# ---------------------------------------------------------------------------- layout
def test_module_exports_nnabla_rl_names() -> None:
    for name in (
        "MaxHeap",
        "MaxHeapDataHolder",
        "MinTree",
        "PrioritizedReplayBuffer",
        "ProportionalPrioritizedReplayBuffer",
        "RankBasedPrioritizedReplayBuffer",
        "SumTree",
        "SumTreeDataHolder",
    ):
        assert name in per.__all__ and hasattr(per, name)
    assert RB.PrioritizedReplayBuffer is PrioritizedReplayBuffer
    assert RB.ProportionalPrioritizedReplayBuffer is ProportionalPrioritizedReplayBuffer
    assert RB.RankBasedPrioritizedReplayBuffer is RankBasedPrioritizedReplayBuffer
    for cls in (
        PrioritizedReplayBuffer,
        ProportionalPrioritizedReplayBuffer,
        RankBasedPrioritizedReplayBuffer,
    ):
        assert issubclass(cls, ReplayBuffer)  # "All replay_buffers are derived from ReplayBuffer"


def test_constructor_defaults_and_errors() -> None:
    buffer = PrioritizedReplayBuffer(capacity=10)
    assert buffer.capacity == 10 and buffer.variant == "proportional"
    assert PrioritizedReplayBuffer(capacity=10, variant="rank_based").variant == "rank_based"
    for cls in (PrioritizedReplayBuffer, ProportionalPrioritizedReplayBuffer):
        for capacity in (None, 0, -3):
            with pytest.raises(ValueError, match="buffer size must be greater than 0"):
                cls(capacity=capacity)
    with pytest.raises(ValueError, match="Unknown prioritized replay buffer variant"):
        PrioritizedReplayBuffer(capacity=10, variant="sum")
    for cls2 in (ProportionalPrioritizedReplayBuffer, RankBasedPrioritizedReplayBuffer):
        with pytest.raises(ValueError, match="normalization"):
            cls2(capacity=10, normalization_method="max")
        for method in ("buffer_max", "batch_max", "buffer", "batch"):
            cls2(capacity=10, normalization_method=method)
    # nnabla-rl does not check these: neither does the front-end (never stricter).
    for kwargs in (
        {"alpha": -1.0},
        {"error_clip": (1, -1)},
        {"error_clip": None},
        {"sort_interval": 0},
        {"reset_segment_interval": 0},
    ):
        PrioritizedReplayBuffer(capacity=10, **kwargs)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- the law
@pytest.mark.parametrize("rank_based", [False, True])
def test_sampling_law_matches_the_reference(rank_based: bool) -> None:
    n, alpha = 12, 0.7
    cls = RankBasedPrioritizedReplayBuffer if rank_based else ProportionalPrioritizedReplayBuffer
    kwargs: dict[str, Any] = {"capacity": 20, "alpha": alpha, "betasteps": BETA_FIXED, "seed": 3}
    if rank_based:
        kwargs["sort_interval"] = 1  # exact ranks at every draw
    buffer = filled(cls, n, **kwargs)
    errors = np.linspace(-1.5, 1.5, n) ** 3  # clipped to [-1, 1]: ties at both ends
    set_errors(buffer, errors)
    eps = 1e-8
    probs = reference_probabilities(reference_priorities(errors, (-1, 1), eps), alpha, rank_based)
    counts: Counter[int] = Counter()
    draws = 0
    for _ in range(400):
        experiences, _ = buffer.sample(num_samples=8)
        pos = positions_of(buffer, experiences)
        counts.update(pos.tolist())
        draws += len(pos)
        buffer.update_priorities(errors[pos])  # the same priorities again: the law stays
    observed = np.array([counts[i] for i in range(n)])
    assert chisquare(observed, probs * draws).pvalue > P_CHI


@pytest.mark.parametrize("rank_based", [False, True])
@pytest.mark.parametrize("method", ["buffer_max", "batch_max"])
def test_weights_match_the_reference_exactly(rank_based: bool, method: str) -> None:
    n, alpha, beta, betasteps = 9, 0.6, 0.4, 4
    cls = RankBasedPrioritizedReplayBuffer if rank_based else ProportionalPrioritizedReplayBuffer
    kwargs: dict[str, Any] = {"capacity": 9, "alpha": alpha, "beta": beta, "betasteps": betasteps}
    if rank_based:
        kwargs["sort_interval"] = 1
    buffer = filled(cls, n, normalization_method=method, error_clip=None, **kwargs)
    errors = np.array([0.3, -2.0, 0.0, 1.0, 0.3, 4.5, -0.01, 2.0, 0.7])
    set_errors(buffer, errors)
    eps = 0.0 if rank_based else 1e-8
    probs = reference_probabilities(reference_priorities(errors, None, eps), alpha, rank_based)
    # sample_indices: every position, then arbitrary subsets, at the current beta
    everything = np.arange(n)
    _, info = buffer.sample_indices(everything)
    want = reference_weights(probs, everything, beta, method)
    assert info["weights"].shape == (n, 1) and info["weights"].dtype == np.float64
    np.testing.assert_allclose(info["weights"], want, rtol=1e-9)
    buffer.update_priorities(errors)
    # sample: weights at the beta of that call, then beta += (1 - beta0) / betasteps
    for k in range(6):
        current = min(beta + k * (1 - beta) / betasteps, 1.0)
        experiences, info = buffer.sample(num_samples=4)
        pos = positions_of(buffer, experiences)
        np.testing.assert_allclose(
            info["weights"], reference_weights(probs, pos, current, method), rtol=1e-9
        )
        buffer.update_priorities(errors[pos])
    if method == "buffer_max":  # the buffer's largest weight is exactly 1
        _, info = buffer.sample_indices(everything)
        assert info["weights"].max() == 1.0


def test_exact_enumeration_of_a_two_item_buffer() -> None:
    """``P = p ** alpha / sum``: with masses 1 and 3, stratified pairs are (0, 1) or (1, 1)."""
    buffer = filled(ProportionalPrioritizedReplayBuffer, 2, capacity=2, alpha=1.0, epsilon=0.0)
    buffer.sample_indices([0, 1])
    buffer.update_priorities([1.0, 3.0])  # clipped to 1: equal masses
    buffer.sample_indices([0, 1])
    buffer.update_priorities(np.array([[0.25], [0.75]]))
    seen: Counter[tuple[int, ...]] = Counter()
    for _ in range(2000):
        experiences, _ = buffer.sample(num_samples=2)
        pos = tuple(positions_of(buffer, experiences).tolist())
        seen[pos] += 1
        buffer.update_priorities(np.array([0.25, 0.75])[list(pos)])
    # stratum 0 is [0, 0.5): position 0 with probability 0.5; stratum 1 is [0.5, 1): always 1
    assert set(seen) == {(0, 1), (1, 1)}
    assert chisquare([seen[(0, 1)], seen[(1, 1)]], [1000, 1000]).pvalue > P_CHI


@pytest.mark.parametrize("rank_based", [False, True])
def test_num_steps_draws_follow_the_conditional_law(rank_based: bool) -> None:
    n, steps = 8, 3
    cls = RankBasedPrioritizedReplayBuffer if rank_based else ProportionalPrioritizedReplayBuffer
    buffer = filled(cls, n, capacity=n, alpha=1.0, sort_interval=1) if rank_based else None
    if buffer is None:
        buffer = filled(cls, n, capacity=n, alpha=1.0)
    errors = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.9, 0.9, 0.9])
    set_errors(buffer, errors)
    probs = reference_probabilities(
        reference_priorities(errors, (-1, 1), 0.0 if rank_based else 1e-8), 1.0, rank_based
    )
    valid = probs[: n - steps + 1] / probs[: n - steps + 1].sum()
    counts: Counter[int] = Counter()
    for _ in range(300):
        experiences, _ = buffer.sample(num_samples=4, num_steps=steps)
        assert isinstance(experiences, tuple) and len(experiences) == steps
        pos = positions_of(buffer, experiences[0])
        for j in range(steps):
            assert positions_of(buffer, experiences[j]).tolist() == (pos + j).tolist()
        counts.update(pos.tolist())
        buffer.update_priorities(errors[pos])
    observed = np.array([counts[i] for i in range(n - steps + 1)])
    assert sum(counts.values()) == observed.sum()  # nothing past len - num_steps
    assert chisquare(observed, valid * observed.sum()).pvalue > P_CHI


def test_agrees_with_the_native_core() -> None:
    """Same priorities, same law: weights of the core's draws equal the front-end's."""
    n = 10
    front = filled(ProportionalPrioritizedReplayBuffer, n, capacity=n, alpha=0.6, beta=0.4)
    core = rr.PrioritizedReplayBuffer(
        n, {"obs": rr.Field((2,), np.float32)}, alpha=0.6, beta=0.4, beta_steps=0, eps=1e-8,
        seed=0,
    )  # fmt: skip
    for t in range(n):
        core.add(
            obs=np.full(2, t, np.float32), reward=float(t), next_obs=np.full(2, t + 1, np.float32),
            terminated=t == n - 1, truncated=False,
        )  # fmt: skip
    errors = np.random.default_rng(1).uniform(-1, 1, n)
    set_errors(front, errors)
    core.update_priorities(np.arange(n), np.abs(errors))
    batch = core.sample(32)
    _, info = front.sample_indices(batch.ids)  # ids are positions: one episode, no wrap
    np.testing.assert_allclose(info["weights"][:, 0], batch.weights, rtol=1e-6)
    np.testing.assert_allclose(core.get_priorities(np.arange(n)), np.abs(errors) + 1e-8)


# ---------------------------------------------------------------------------- writing
def test_newest_experience_is_drawable_at_once() -> None:
    """nnabla-rl draws from every stored experience, the one just appended included."""
    buffer = ProportionalPrioritizedReplayBuffer(capacity=5, seed=0)
    buffer.append(experience(0))
    experiences, info = buffer.sample()
    assert numbers(experiences) == [0] and info["weights"].tolist() == [[1.0]]
    buffer.update_priorities([0.0])  # tiny priority: the next one dominates
    buffer.append(experience(1))
    experiences, _ = buffer.sample()
    assert numbers(experiences) == [1]


@pytest.mark.parametrize("rank_based", [False, True])
def test_new_experiences_get_the_largest_priority_so_far(rank_based: bool) -> None:
    cls = RankBasedPrioritizedReplayBuffer if rank_based else ProportionalPrioritizedReplayBuffer
    buffer = filled(cls, 4, capacity=10, alpha=1.0, error_clip=None, normalization_method="batch")
    set_errors(buffer, np.array([0.5, 3.0, 0.25, 1.0]))
    buffer.append(experience(4))
    _, info = buffer.sample_indices([1, 4])
    assert info["weights"].tolist() == [[1.0], [1.0]]  # equal priorities (3 + eps, the max)
    buffer.update_priorities([3.0, 3.0])


def test_ring_wraps_and_drops_the_oldest() -> None:
    buffer = filled(ProportionalPrioritizedReplayBuffer, 10, capacity=3)
    assert len(buffer) == 3 and numbers([buffer[i] for i in range(3)]) == [7, 8, 9]
    for _ in range(30):
        experiences, _ = buffer.sample(num_samples=3)
        assert set(numbers(experiences)) <= {7, 8, 9}
        buffer.update_priorities(np.ones(3))


def test_update_follows_the_sampled_experiences_across_appends() -> None:
    """nnabla-rl updates by position, and positions shift with every append: a priority would
    land on another experience (a real bug). The update follows the sampled experience, and an
    experience overwritten since the sample is skipped."""
    buffer = filled(ProportionalPrioritizedReplayBuffer, 4, capacity=4, alpha=1.0, epsilon=0.0)
    buffer.sample_indices([0, 3])  # experiences 0 and 3
    buffer.append(experience(4))  # drops experience 0; experience 3 is now position 2
    buffer.update_priorities([0.5, 0.25])
    _, info = buffer.sample_indices([0, 1, 2, 3])  # experiences 1, 2, 3, 4
    assert info["weights"][:, 0].tolist() == [
        pytest.approx((1.0 / 0.25) ** -0.4),
        pytest.approx((1.0 / 0.25) ** -0.4),
        1.0,
        pytest.approx((1.0 / 0.25) ** -0.4),
    ]
    buffer.update_priorities(np.ones(4))


def test_arbitrary_objects_are_stored_and_returned() -> None:
    """Whatever the base ReplayBuffer stores (any Python object), the prioritized one does."""
    buffer = ProportionalPrioritizedReplayBuffer(capacity=4, seed=0)
    items: list[Any] = [7, {"a": 1}, ("s", "a"), None, "x"]
    buffer.append_all(items)
    assert len(buffer) == 4 and [buffer[i] for i in range(4)] == items[1:]
    experiences, _ = buffer.sample(num_samples=4)
    assert all(any(e is x or e == x for x in items[1:]) for e in experiences)
    buffer.update_priorities(np.zeros(4))


# ---------------------------------------------------------------------------- protocol
def test_sample_update_protocol_and_errors() -> None:
    buffer = filled(PrioritizedReplayBuffer, 6, capacity=10)
    with pytest.raises(TypeError):  # nnabla-rl: zip(None, priorities)
        buffer.update_priorities(np.zeros(2))
    buffer.sample(num_samples=2)
    with pytest.raises(RuntimeError, match="without updating priority"):
        buffer.sample(num_samples=2)
    with pytest.raises(RuntimeError, match="without updating priority"):
        buffer.sample_indices([0])
    buffer.update_priorities(np.zeros(2))
    with pytest.raises(ValueError, match="num_samples"):
        buffer.sample(num_samples=7)
    with pytest.raises(ValueError, match="num_steps"):
        buffer.sample(num_steps=0)
    with pytest.raises(RuntimeError, match="Insufficient buffer length"):
        buffer.sample(num_samples=1, num_steps=7)
    with pytest.raises(ValueError, match="Indices are empty"):
        buffer.sample_indices([])
    with pytest.raises(KeyError):  # a bounded nnabla-rl buffer: KeyError out of range
        buffer.sample_indices([6])
    assert buffer.sample(num_samples=6)[0]  # with replacement, up to len


@pytest.mark.parametrize(
    "errors",
    [np.array([0.5, 0.2]), np.array([[0.5], [0.2]]), [0.5, 0.2], (0.5, 0.2), [[0.5], [0.2]]],
)
def test_update_priorities_accepts_nnabla_rl_inputs(errors: Any) -> None:
    buffer = filled(ProportionalPrioritizedReplayBuffer, 4, capacity=4, alpha=1.0, epsilon=0.0)
    buffer.sample_indices([1, 2])
    buffer.update_priorities(errors)
    _, info = buffer.sample_indices([1, 2])
    np.testing.assert_allclose(info["weights"][:, 0], [(0.5 / 0.2) ** -0.4, 1.0])
    buffer.update_priorities(errors)


def test_update_priorities_pairs_like_zip() -> None:
    buffer = filled(ProportionalPrioritizedReplayBuffer, 4, capacity=4, alpha=1.0, epsilon=0.0)
    buffer.sample_indices([0, 1, 2])
    buffer.update_priorities([0.5])  # only position 0 is updated
    _, info = buffer.sample_indices([0, 1])
    np.testing.assert_allclose(info["weights"][:, 0], [1.0, (1.0 / 0.5) ** -0.4])
    buffer.update_priorities([0.5, 0.5, 9.0, 9.0])  # extras ignored
    with pytest.raises(TypeError):
        buffer.sample_indices([0])
        buffer.update_priorities(0.5)  # a scalar is not iterable
    buffer2 = filled(ProportionalPrioritizedReplayBuffer, 4, capacity=4)
    buffer2.sample_indices([0, 1])
    with pytest.raises(ValueError):
        buffer2.update_priorities(np.ones((2, 2)))  # one sequence per experience
    with pytest.raises(ValueError):  # rr.PriorityError: a NaN would poison the trees
        buffer2.update_priorities([float("nan"), 0.0])


def test_seed_wrapper_builds_the_variant() -> None:
    """The seed's ``PrioritizedReplayBuffer(variant=...)`` draws as the class it builds."""
    for variant, cls in (
        ("proportional", ProportionalPrioritizedReplayBuffer),
        ("rank_based", RankBasedPrioritizedReplayBuffer),
    ):
        a = filled(PrioritizedReplayBuffer, 12, capacity=12, variant=variant, sort_interval=5)
        kwargs: dict[str, Any] = {"alpha": 0.6, "beta": 0.4}
        if variant == "rank_based":
            kwargs["sort_interval"] = 5
        b = filled(cls, 12, capacity=12, **kwargs)
        errors = np.random.default_rng(0).normal(size=6)
        for _ in range(5):
            ea, ia = a.sample(num_samples=6)
            eb, ib = b.sample(num_samples=6)
            assert numbers(ea) == numbers(eb)
            np.testing.assert_array_equal(ia["weights"], ib["weights"])
            a.update_priorities(errors)
            b.update_priorities(errors)


def test_same_seed_same_samples() -> None:
    a = filled(PrioritizedReplayBuffer, 20, capacity=20, seed=5)
    b = filled(PrioritizedReplayBuffer, 20, capacity=20, seed=5)
    for _ in range(5):
        ea, _ = a.sample(num_samples=5)
        eb, _ = b.sample(num_samples=5)
        assert numbers(ea) == numbers(eb)
        a.update_priorities(np.arange(5) / 5)
        b.update_priorities(np.arange(5) / 5)


# ---------------------------------------------------------------------------- helper classes
@settings(max_examples=40, deadline=None)
@given(
    capacity=st.integers(1, 9),
    ops=st.lists(
        st.tuples(st.booleans(), st.integers(0, 8), st.floats(0.0, 10.0, allow_nan=False)),
        max_size=40,
    ),
)
def test_sum_and_min_trees_match_a_naive_ring(capacity: int, ops: list[Any]) -> None:
    sums, mins = SumTree(capacity), MinTree(capacity)
    ring: list[float | None] = [None] * capacity
    tail = appended = 0
    for is_append, index, value in ops:
        if is_append:
            appended += 1
            sums.append(value)
            mins.append(value)
            ring[tail] = value
            tail = (tail + 1) % capacity
        else:
            k = index % capacity
            sums.update(k, value)
            mins.update(k, value)
            ring[k] = value
        held = [v for v in ring if v is not None]
        assert sums.sum() == pytest.approx(sum(held), abs=1e-9)
        assert mins.min() == (min(held) if held else np.inf)
        assert len(sums) == len(mins) == min(appended, capacity)
        for k, v in enumerate(ring):
            assert sums[k] == (0.0 if v is None else v)
    total = sums.sum()
    leaves = [0.0 if v is None else v for v in ring]
    for q in np.linspace(0, total, 7):  # an all-zero tree too
        assert sums.get_absolute_index_from_query(float(q)) == nnabla_descent(leaves, float(q))


def nnabla_descent(leaves: list[float], query: float) -> int:
    """nnabla-rl's SumTree, written out: a heap array of 2c - 1 nodes, leaf k at node k + c - 1,
    parents summed pairwise; the descent goes left while query <= left, else right with
    query - left."""
    c = len(leaves)
    tree = [0.0] * (2 * c - 1)
    for k, v in enumerate(leaves):
        i = k + c - 1
        tree[i] = v
        while i > 0:
            i = (i - 1) // 2
            tree[i] = tree[2 * i + 1] + tree[2 * i + 2]
    i = 0
    while 2 * i + 1 < len(tree):
        if query <= tree[2 * i + 1]:
            i = 2 * i + 1
        else:
            query -= tree[2 * i + 1]
            i = 2 * i + 2
    return i - (c - 1)


def test_helper_trees_store_any_float_as_nnabla_rl() -> None:
    """nnabla-rl's trees are Python lists that store whatever float they are given: a negative
    or NaN value enters the sum, the min, and the descent as it does there."""
    sums, mins = SumTree(5), MinTree(5)
    values = [2.0, -1.0, 3.0, 0.5, -0.25]
    for v in values:
        sums.append(v)
        mins.append(v)
    assert sums.sum() == nnabla_sum(values) and mins.min() == -1.0
    assert [sums[k] for k in range(5)] == values
    for q in (0.0, 0.5, 1.0, 2.5, 4.0, sums.sum()):
        assert sums.get_absolute_index_from_query(q) == nnabla_descent(values, q)
    with pytest.raises(ValueError):  # a query above the sum (or below 0)
        sums.get_absolute_index_from_query(sums.sum() + 1.0)
    sums.update(2, float("nan"))
    mins.update(2, float("nan"))
    assert np.isnan(sums.sum()) and np.isnan(sums[2])
    # Python's min(a, b) is a unless b < a: a NaN on the left of a pair wins, on the right not
    # (leaf 2 is node 6 = right child of node 2, whose left child node 5 holds leaf 1 = -1.0)
    assert mins.min() == -1.0
    # with capacity 3 the leaves lie on two levels: nnabla-rl's descent meets leaf 1 first
    three = SumTree(3)
    for v in (4.0, 2.0, 3.0):
        three.append(v)
    assert [three.get_absolute_index_from_query(q) for q in (1.0, 4.5, 8.0)] == [1, 2, 0]


def nnabla_sum(values: list[float]) -> float:
    c = len(values)
    tree = [0.0] * (2 * c - 1)
    tree[c - 1 :] = values
    for i in range(c - 2, -1, -1):
        tree[i] = tree[2 * i + 1] + tree[2 * i + 2]
    return tree[0]


@settings(max_examples=40, deadline=None)
@given(
    capacity=st.integers(1, 8),
    ops=st.lists(st.tuples(st.sampled_from(["append", "update", "sort"]), st.integers(0, 7),
                           st.integers(0, 5)), max_size=40),
)  # fmt: skip
def test_max_heap_keeps_the_heap_order(capacity: int, ops: list[Any]) -> None:
    heap = MaxHeap(capacity)
    ref: dict[int, float] = {}  # absolute index -> priority
    tail = 0
    for op, index, value in ops:
        if op == "append":
            heap.append(float(value))
            ref[tail] = float(value)
            tail = (tail + 1) % capacity
        elif op == "update" and ref:
            k = sorted(ref)[index % len(ref)]
            heap.update(k, float(value))
            ref[k] = float(value)
        elif op == "sort":
            heap.sort_data()
            got = [
                heap.get_priority(heap.get_absolute_index_from_heap_index(h))
                for h in range(len(heap))
            ]
            assert got == sorted(ref.values(), reverse=True)
        assert len(heap) == len(ref)
        by_position = [heap.get_absolute_index_from_heap_index(h) for h in range(len(heap))]
        assert sorted(by_position) == sorted(ref)
        for h, k in enumerate(by_position):
            assert heap.get_heap_index_from_absolute_index(k) == h
            assert heap.get_priority(k) == ref[k]
            if h:
                assert ref[by_position[(h - 1) // 2]] >= ref[k]  # heap property
        assert heap.max() == (max(ref.values()) if ref else -np.inf)


def test_sum_tree_data_holder_matches_a_naive_reference() -> None:
    rng = np.random.default_rng(0)
    alpha = 0.5
    holder = SumTreeDataHolder(capacity=5, initial_max_priority=1.0, alpha=alpha)
    items: list[tuple[str, float]] = []  # (data, raw priority), oldest first
    top = 1.0
    for step in range(30):
        if step % 3 == 2 and items:
            i = int(rng.integers(len(items)))
            p = float(rng.uniform(0, 4))
            holder.update_priority(i, p)
            items[i] = (items[i][0], p)
            top = max(top, p)
        elif step % 2:
            p = float(rng.uniform(0, 2))
            holder.append_with_priority(f"d{step}", p)
            items.append((f"d{step}", p))
            top = max(top, p)
        else:
            holder.append(f"d{step}")
            items.append((f"d{step}", top))
        items = items[-5:]
        masses = [p**alpha for _, p in items]
        assert len(holder) == len(items)
        assert [holder[i] for i in range(len(items))] == [d for d, _ in items]
        assert holder.sum_priority() == pytest.approx(sum(masses))
        assert holder.min_priority() == pytest.approx(min(masses))
        assert holder.max_priority() == top
        for i in range(len(items)):
            assert holder.get_priority(i) == pytest.approx(masses[i])
        # the tree runs over ring slots: relative index i sits in slot (head + i) % capacity
        appended = step + 1 - sum(1 for k in range(step + 1) if k % 3 == 2 and k > 0)
        head = (appended - len(items)) % 5
        by_slot = [0.0] * 5
        for i, m in enumerate(masses):
            by_slot[(head + i) % 5] = m
        q = float(rng.uniform(0, holder.sum_priority()))
        slot = nnabla_descent(by_slot, q)  # nnabla-rl's tree layout and descent
        assert holder.get_index_from_query(q) == (slot - head) % 5
    with pytest.raises(KeyError):
        holder[5]


def test_max_heap_data_holder_ranks_by_priority() -> None:
    holder = MaxHeapDataHolder(capacity=3, alpha=0.7)
    holder.append("a")  # empty holder: priority 1.0
    holder.append_with_priority("b", 4.0)
    holder.append_with_priority("c", 0.5)
    holder.append("d")  # the largest priority held (4.0); drops "a"
    assert [holder[i] for i in range(3)] == ["b", "c", "d"]
    assert [holder.get_priority(i) for i in range(3)] == [4.0, 0.5, 4.0]
    holder.update_priority(1, 9.0)
    holder.sort_data()
    assert holder[holder.get_index_from_heap_index(0)] == "c" and holder.get_rank(1) == 1
    assert sorted(holder.get_rank(i) for i in range(3)) == [1, 2, 3]


@settings(max_examples=30, deadline=None)
@given(
    capacity=st.integers(1, 6),
    ops=st.lists(
        st.one_of(
            st.just(("append",)),
            st.tuples(st.just("update"), st.lists(st.integers(0, 5), min_size=1, max_size=4),
                      st.lists(st.floats(-3, 3, allow_nan=False), min_size=1, max_size=4)),
        ),
        max_size=25,
    ),
    method=st.sampled_from(["buffer_max", "batch_max"]),
)  # fmt: skip
def test_random_operations_match_a_reference_model(
    capacity: int, ops: list[Any], method: str
) -> None:
    """Appends (the largest priority so far) and updates, through ring wraps: the weights of
    every position equal the reference model's, priorities kept per append number."""
    buffer = ProportionalPrioritizedReplayBuffer(
        capacity=capacity, alpha=0.5, beta=0.6, betasteps=BETA_FIXED, normalization_method=method
    )
    model: dict[int, float] = {}  # append number -> priority
    top, appended = 1.0, 0
    for op in ops:
        if op[0] == "append":
            buffer.append(experience(appended))
            model[appended] = top
            model.pop(appended - capacity, None)
            appended += 1
        elif model:
            first = appended - len(model)
            picked = [i % len(model) for i in op[1]]
            buffer.sample_indices(picked)
            buffer.update_priorities(op[2])
            for i, e in zip(picked, op[2], strict=False):  # the shorter list wins
                model[first + i] = abs(min(max(e, -1.0), 1.0)) + 1e-8
                top = max(top, model[first + i])
        if model:
            assert len(buffer) == len(model)
            assert numbers([buffer[i] for i in range(len(model))]) == sorted(model)
            everything = np.arange(len(model))
            _, info = buffer.sample_indices(everything)
            probs = reference_probabilities([model[k] for k in sorted(model)], 0.5, False)
            want = reference_weights(probs, everything, 0.6, method)
            np.testing.assert_allclose(info["weights"], want, rtol=1e-6)  # eps round trips
            buffer.update_priorities([model[k] - 1e-8 for k in sorted(model)])  # unchanged
