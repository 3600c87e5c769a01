"""ALF front-end as a drop-in (issue 13): result shapes, options ALF accepts, ALF's error types.

Each test cites the ALF documentation it follows (``/work/shared/seeds/001_*.txt``, ALF's
``replay_buffer`` and ``segment_tree`` API docs).
"""

from __future__ import annotations

import collections
import operator
import threading
import time
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rlreplay as rr
from rlreplay.compat.alf import StepType, TensorSpec
from rlreplay.compat.alf.replay_buffer import ReplayBuffer
from rlreplay.compat.alf.segment_tree import (
    MaxSegmentTree,
    MinSegmentTree,
    SegmentTree,
    SumSegmentTree,
)

Exp = collections.namedtuple("Exp", "step_type reward discount observation")
SPEC = Exp(
    step_type=TensorSpec((), torch.int32),
    reward=TensorSpec(()),
    discount=TensorSpec(()),
    observation=TensorSpec((2,)),
)


def exp(E: int, t: int, step_type: int = StepType.MID) -> Exp:
    return Exp(
        step_type=torch.full((E,), step_type, dtype=torch.int32),
        reward=torch.full((E,), float(t)),
        discount=torch.ones(E),
        observation=torch.full((E, 2), float(t)),
    )


# ---------------------------------------------------------------------- shapes of results
@pytest.mark.parametrize("cls", [SumSegmentTree, MinSegmentTree, MaxSegmentTree])
def test_summary_is_a_scalar_tensor(cls: type[SegmentTree]) -> None:
    # Seed, SegmentTree.summary(): "Returns: a scalar".
    tree = cls(4)
    assert tree.summary().shape == torch.Size([])
    tree[torch.tensor([1, 2])] = torch.tensor([3.0, 5.0])
    s = tree.summary()
    assert s.shape == torch.Size([]) and s.dtype == torch.float32
    assert tree.nnz.shape == torch.Size([])


def test_tree_values_keep_the_shape_of_the_indices() -> None:
    # ALF indexes its values tensor with the indices: a 0-d index gives a 0-d value.
    tree = SumSegmentTree(4)
    tree[torch.tensor([0, 3])] = torch.tensor([1.0, 2.0])
    assert tree[torch.tensor(3)].shape == torch.Size([]) and tree[torch.tensor(3)].item() == 2.0
    assert tree[torch.tensor([[0, 3]])].shape == (1, 2)
    assert tree.find_sum_bound(torch.tensor(0.5)).shape == torch.Size([])


def test_position_queries_keep_the_broadcast_shape_even_0d() -> None:
    # Seed, get_field: "Returns: with the same shape as broadcasted shape of env_ids and
    # positions"; steps_to_episode_end: "tensor of shape L" (the shape of pos).
    rb = ReplayBuffer(SPEC, 2, max_length=8, keep_episodic_info=True)
    for t in range(3):
        rb.add_batch(exp(2, t, StepType.FIRST if t == 0 else StepType.MID))
    env, pos = torch.tensor(1), torch.tensor(2)
    assert rb.get_field("reward", env, pos).shape == torch.Size([])
    assert rb.get_field("reward", env, pos).item() == 2.0
    assert rb.get_field("observation", env, pos).shape == (2,)
    assert rb.steps_to_episode_end(pos, env).shape == torch.Size([])
    assert rb.get_episode_begin_position(pos, env).shape == torch.Size([])
    assert rb.get_field("reward", torch.tensor([0, 1]), pos).shape == (2,)
    assert rb.total_size.shape == torch.Size([]) and rb.initial_priority.shape == torch.Size([])


# ---------------------------------------------------------------------- options ALF accepts
def test_ignored_frames_turn_episodic_info_on_even_when_given_false() -> None:
    # Seed: "keep_episodic_info will be set to True if num_earliest_frames_ignored > 0 as
    # FrameStacker need episode information."
    rb = ReplayBuffer(
        SPEC, 1, max_length=8, num_earliest_frames_ignored=1, keep_episodic_info=False
    )
    rb.add_batch(exp(1, 0, StepType.FIRST))
    rb.add_batch(exp(1, 1, StepType.LAST))
    assert rb.steps_to_episode_end(torch.tensor([0]), torch.tensor([0])).tolist() == [1]


def test_record_episodic_return_with_episodic_info_off_is_alfs_assertion() -> None:
    # Seed, record_episodic_return: "Assumes keep_episodic_info to be True."
    with pytest.raises(AssertionError, match="keep_episodic_info") as info:
        ReplayBuffer(SPEC, 1, record_episodic_return=True, keep_episodic_info=False)
    assert isinstance(info.value, rr.ConfigError)


def leaf_node(i: int, capacity: int) -> int:
    """The node of leaf ``i``: the ``i``-th of ``capacity .. 2 * capacity - 1`` in-order."""

    def in_order(node: int) -> list[int]:
        if node >= capacity:
            return [node]
        return in_order(2 * node) + in_order(2 * node + 1)

    return in_order(1)[i] if capacity > 1 else 1


def alf_tree(capacity: int, op: Any, dtype: torch.dtype) -> tuple[Any, Any, Any]:
    """ALF's segment tree, written from its documentation (the slow reference).

    Seed: "values[1] is the root. values[capacity: 2*capacity] are the leaves. The two children
    of an internal node values[i] are values[2*i] and values[2*i+1]. And values[i] is set to
    op(values[2*i], values[2*i+1]). ... All the nodes of tree are initialized to be zeros."
    Leaf ``i`` is the ``i``-th leaf met in-order (find_sum_bound's prefix sums run by index):
    see :func:`leaf_node`.
    """
    values = torch.zeros(2 * capacity, dtype=dtype)

    def set_(i: int, v: float) -> None:
        node = leaf_node(i, capacity)
        values[node] = torch.tensor(v, dtype=torch.float64).to(dtype)
        node //= 2
        while node >= 1:
            values[node] = op(values[2 * node], values[2 * node + 1])
            node //= 2

    return values, set_, lambda: values[1]


@settings(max_examples=40, deadline=None)
@given(
    capacity=st.integers(1, 9),
    writes=st.lists(st.tuples(st.integers(0, 8), st.floats(-3, 3, width=32)), max_size=20),
    which=st.sampled_from(["mul", "sub", "lambda_max"]),
)
def test_any_op_works_as_in_alf(capacity: int, writes: list[tuple[int, float]], which: str) -> None:
    # Seed: SegmentTree(capacity, op, dtype=torch.float32, device='cpu', name='SegmentTree'):
    # op is any function of two tensors; the summary is values[1].
    op = {"mul": torch.mul, "sub": torch.sub, "lambda_max": lambda a, b: torch.maximum(a, b)}[which]
    tree = SegmentTree(capacity, op)
    values, set_, root = alf_tree(capacity, op, torch.float32)
    for i, v in writes:
        i %= capacity
        tree[torch.tensor([i])] = torch.tensor([v])
        set_(i, v)
        assert torch.equal(tree.summary(), root())
    leaves = torch.arange(capacity)
    assert torch.equal(tree[leaves], values[[leaf_node(i, capacity) for i in range(capacity)]])
    assert tree.nnz.item() == int(torch.count_nonzero(values[capacity:]))


def test_any_op_batch_writes_duplicates_and_state() -> None:
    tree = SegmentTree(4, torch.mul, dtype=torch.float64)
    tree[torch.tensor([0, 1, 2, 3])] = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    assert tree.summary().item() == 24.0 and tree.summary().dtype == torch.float64
    tree[torch.tensor([1, 1])] = torch.tensor([5.0, 6.0], dtype=torch.float64)  # last wins
    assert tree[torch.tensor([1])].tolist() == [6.0] and tree.summary().item() == 72.0
    other = SegmentTree(4, torch.mul, dtype=torch.float64)
    other.load_state_dict(tree.state_dict())
    assert other.summary().item() == 72.0 and other.nnz.item() == 4
    with pytest.raises(ValueError):
        tree[torch.tensor([4])] = torch.tensor([1.0])


@pytest.mark.parametrize("op", [torch.add, operator.add, np.add])
def test_the_three_ops_still_run_on_the_core_trees(op: Any) -> None:
    tree = SegmentTree(4, op)
    tree[torch.tensor([0, 2])] = torch.tensor([1.0, 2.0])
    assert tree._tree.__class__ is rr.SumTree  # the fast float64 kernels, not the fallback
    assert tree.summary().item() == 3.0


# ---------------------------------------------------------------------- add_batch values
def test_add_batch_broadcasts_values_as_alfs_indexed_write() -> None:
    # ALF's RingBuffer writes every leaf with ``buffer[(env_ids, idx)] = value``: torch
    # broadcasts the value to ``[batch_size] + spec.shape``.
    rb = ReplayBuffer(SPEC, 2, max_length=4)
    step = exp(2, 0)._replace(observation=torch.tensor([[1.0], [2.0]]), discount=torch.tensor(1.0))
    rb.add_batch(step)
    got, _ = rb.gather_all()
    assert got.observation.tolist() == [[[1.0, 1.0]], [[2.0, 2.0]]]
    assert got.discount.tolist() == [[1.0], [1.0]]


def test_add_batch_shape_and_dtype_errors_are_runtime_errors_as_in_alf() -> None:
    # torch's indexed write raises RuntimeError for a value that does not broadcast, and for a
    # dtype it cannot hold ("Index put requires the source and destination dtypes match").
    rb = ReplayBuffer(SPEC, 2, max_length=4)
    with pytest.raises(RuntimeError) as shape:
        rb.add_batch(exp(2, 0)._replace(observation=torch.zeros(2, 3)))
    assert isinstance(shape.value, rr.ShapeError)
    uint8 = Exp(
        step_type=TensorSpec((), torch.int32),
        reward=TensorSpec(()),
        discount=TensorSpec(()),
        observation=TensorSpec((2,), torch.uint8),
    )
    rb = ReplayBuffer(uint8, 2, max_length=4)
    with pytest.raises(RuntimeError) as dtype:
        rb.add_batch(exp(2, 0)._replace(observation=torch.full((2, 2), 3.5)))
    assert isinstance(dtype.value, rr.DTypeError)
    assert rb.total_size.item() == 0  # nothing was written


def test_a_batch_of_another_size_is_refused_without_env_ids() -> None:
    # Seed, add_batch: "env_ids (Tensor) - If None, batch_size must be num_environments."
    rb = ReplayBuffer(SPEC, 2, max_length=4)
    with pytest.raises(RuntimeError, match="batch_size 1"):
        rb.add_batch(exp(1, 0))
    assert rb.total_size.item() == 0


# ---------------------------------------------------------------------- stop and revive
JOIN = 20.0  # seconds: a thread still alive after this is deadlocked


def test_stop_ends_only_blocking_calls_and_revive_restores_them() -> None:
    # ALF's RingBuffer: stop() "Stop waiting processes from being blocked. Only checked in
    # blocking mode of dequeue and enqueue. All blocked processes will return None."
    # revive() "Clears the stop Event so blocking mode will start working again."
    rb = ReplayBuffer(SPEC, 1, max_length=2)
    got: list[Any] = []
    th = threading.Thread(target=lambda: got.append(rb.dequeue(blocking=True)))
    th.start()
    time.sleep(0.05)
    rb.stop()
    th.join(JOIN)
    assert not th.is_alive() and got == [None]
    # Non-blocking calls go on working while stopped.
    rb.add_batch(exp(1, 0, StepType.FIRST))
    rb.add_batch(exp(1, 1))
    assert rb.total_size.item() == 2
    assert rb.dequeue(blocking=True) is None  # blocking while stopped: None at once
    assert rb.add_batch(exp(1, 2), blocking=True) is None and rb.total_size.item() == 2
    batch, _ = rb.get_batch(batch_size=1, batch_length=2)
    assert batch.reward.tolist() == [[0.0, 1.0]]
    rb.revive()
    first = rb.dequeue(blocking=True, timeout=5)
    assert first.reward.tolist() == [[0.0]]
    # Blocking again: a blocked add waits for room, and a dequeue makes it.
    rb.add_batch(exp(1, 2))
    done = threading.Event()
    th = threading.Thread(target=lambda: (rb.add_batch(exp(1, 3), blocking=True), done.set()))
    th.start()
    assert not done.wait(0.2)
    rb.dequeue()
    th.join(JOIN)
    assert done.is_set()
    data, info = rb.gather_all()
    assert info.positions.tolist() == [2] and data.reward.tolist() == [[2.0, 3.0]]


def test_blocking_timeouts_count_from_the_call() -> None:
    rb = ReplayBuffer(SPEC, 1, max_length=2)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match=r"timeout=0\.2"):
        rb.dequeue(blocking=True, timeout=0.2)
    assert 0.15 < time.monotonic() - t0 < 5
    with pytest.raises(TimeoutError):
        rb.dequeue(blocking=True, timeout=0)
    with pytest.raises(ValueError):
        rb.dequeue(blocking=True, timeout=-1)
