"""ALF's ``update_priority`` with negative, NaN and infinite priorities (issue 13).

Seed 001 documents ``update_priority(env_ids, positions, priorities)`` with "1-D float Tensor"
priorities and no check; ALF writes them into its sum and max segment trees, which store any
value. ``get_batch`` then asserts ``summary() > 0`` ("There is no data in the buffer or the data
has not been assigned valid priority"), draws ``find_sum_bound(rand * summary())`` and weighs a
row by ``priority * nnz / summary()`` (seed: "priority divided by the average of all non-zero
priorities"). The reference below is ALF's tree written out: float32 nodes, its descent.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

import rlreplay as rr
from tests.compat.test_alf import prioritized
from tests.compat.test_alf_trees import alf_find_sum_bound


def alf_tree(leaves: np.ndarray) -> torch.Tensor:
    """ALF's node array for a power-of-two capacity: leaves at ``capacity + i``, float32 sums."""
    C = leaves.shape[0]
    nodes = torch.zeros(2 * C, dtype=torch.float32)
    nodes[C:] = torch.from_numpy(leaves.astype(np.float32))
    for i in range(C - 1, 0, -1):
        nodes[i] = nodes[2 * i] + nodes[2 * i + 1]
    return nodes


def descent_law(leaves: np.ndarray, grid: int = 20000) -> np.ndarray:
    """P(leaf) of ALF's draw ``find_sum_bound(u * summary())``, u uniform (on a fine grid)."""
    nodes = alf_tree(leaves)
    total = float(nodes[1])
    hits = np.zeros(leaves.shape[0])
    for u in (np.arange(grid) + 0.5) / grid:
        hits[alf_find_sum_bound(nodes, leaves.shape[0], float(np.float32(u) * total))] += 1
    out: np.ndarray = hits / grid
    return out


def test_negative_nan_and_infinite_priorities_are_stored_not_refused() -> None:
    d = prioritized(num_envs=1, max_length=8)
    d.run(6)
    pos = torch.arange(6)
    prio = torch.tensor([2.0, -1.0, math.nan, math.inf, 1.0, 1.0])
    d.rb.update_priority(torch.zeros(6, dtype=torch.int64), pos, prio)  # ALF: no check
    assert math.isnan(d.rb.initial_priority.item())  # ALF's max tree: max(inf, NaN) is NaN
    with pytest.raises(AssertionError, match="valid priority"):  # NaN > 0 is False
        d.rb.get_batch(4, 1)


def test_a_sum_that_is_not_positive_fails_alfs_assertion() -> None:
    d = prioritized(num_envs=1, max_length=8)
    d.run(4)
    envs = torch.zeros(4, dtype=torch.int64)
    d.rb.update_priority(envs, torch.arange(4), torch.tensor([1.0, -3.0, 1.0, 0.5]))
    with pytest.raises(AssertionError, match="valid priority") as err:
        d.rb.get_batch(4, 1)
    assert isinstance(err.value, rr.ReplayError)


def test_negative_priorities_draw_by_alfs_descent_and_weigh_p_nnz_over_sum() -> None:
    torch.manual_seed(3)
    d = prioritized(num_envs=1, max_length=8)
    d.run(8)  # positions 0..7, slots 0..7; with batch_length=1 all 8 are starts
    p = np.array([1.0, -0.5, 2.0, 0.0, 1.5, -1.0, 3.0, 1.0], np.float32)
    d.rb.update_priority(torch.zeros(8, dtype=torch.int64), torch.arange(8), torch.from_numpy(p))
    law = descent_law(p)
    counts = np.zeros(8)
    total, nnz = float(p.sum()), int(np.count_nonzero(p))
    for _ in range(200):
        _, info = d.rb.get_batch(50, 1)
        pos = info.positions.numpy()
        np.add.at(counts, pos, 1)
        expected = (p[pos] * np.float32(nnz / total)).astype(np.float32)
        np.testing.assert_allclose(info.importance_weights.numpy(), expected, rtol=1e-6)
    assert counts[law == 0].sum() == 0  # never a leaf ALF's descent cannot reach
    live = law > 0
    assert chisquare(counts[live], law[live] * counts.sum()).pvalue > 1e-4


def test_a_regular_priority_brings_back_the_plain_law() -> None:
    torch.manual_seed(4)
    d = prioritized(num_envs=1, max_length=8)
    d.run(4)
    envs = torch.zeros(4, dtype=torch.int64)
    d.rb.update_priority(envs, torch.arange(4), torch.tensor([1.0, -0.5, 1.0, 2.0]))
    d.rb.update_priority(envs[:1], torch.tensor([1]), torch.tensor([1.0]))  # -0.5 -> 1.0
    _, info = d.rb.get_batch(200, 1)
    p = np.array([1.0, 1.0, 1.0, 2.0])
    np.testing.assert_allclose(
        info.importance_weights.numpy(), p[info.positions.numpy()] * 4 / 5, rtol=1e-6
    )
    assert d.rb.core.get_priorities(np.array([1])).tolist() == [1.0]


def test_odd_priorities_survive_a_checkpoint_and_leave_with_dequeue() -> None:
    torch.manual_seed(5)
    d = prioritized(num_envs=1, max_length=8, enable_checkpoint=True)
    d.run(4)
    envs = torch.zeros(4, dtype=torch.int64)
    d.rb.update_priority(envs, torch.arange(4), torch.tensor([2.0, 1.0, -1.0, 2.0]))
    other = prioritized(num_envs=1, max_length=8, enable_checkpoint=True)
    other.rb.load_state_dict(d.rb.state_dict())
    _, info = other.rb.get_batch(100, 1)
    got = set(info.positions.tolist())
    np.testing.assert_allclose(
        info.importance_weights.numpy(),
        np.array([2.0, 1.0, -1.0, 2.0])[info.positions.numpy()] * 4 / 4,
        rtol=1e-6,
    )
    assert got <= {0, 1, 2, 3}
    d.rb.dequeue(n=3)  # the -1 at position 2 is no longer an experience of the buffer
    d.add()
    _, info = d.rb.get_batch(20, 1)
    assert (info.importance_weights.numpy() > 0).all()


def test_after_an_infinite_priority_new_steps_get_it_too() -> None:
    """Seed: a new step gets "the maximum of this value and the current maximum priority of
    all experiences": inf once a step holds inf (the core cannot hold it; ALF's tree does)."""
    torch.manual_seed(6)
    d = prioritized(num_envs=2, max_length=4)
    d.run(3)
    d.rb.update_priority(torch.tensor([0]), torch.tensor([2]), torch.tensor([math.inf]))
    d.add()  # position 3 of both envs gets priority inf
    _, info = d.rb.get_batch(8, 1)
    assert d.rb.initial_priority.item() == math.inf
    assert d.rb.core.get_priorities(np.array([7])).tolist() == [0.0]  # 0 in the core
    w = info.importance_weights.numpy()
    inf_rows = np.array(
        [(e, p) in {(0, 2), (0, 3), (1, 3)} for e, p in zip(info.env_ids.tolist(),
                                                          info.positions.tolist(), strict=True)]
    )  # fmt: skip
    # ALF's arithmetic: priority * nnz / summary() with summary() = inf
    assert np.isnan(w[inf_rows]).all() and (w[~inf_rows] == 0).all()


def test_a_nan_priority_becomes_every_new_steps_priority_as_in_alf() -> None:
    """Seed: a new step gets "the maximum of this value and the current maximum priority of
    all experiences", ALF's max segment tree, whose ``torch.max`` propagates NaN. So while a
    stored step holds a NaN priority, new steps get NaN too, and ``get_batch`` fails ALF's
    ``summary() > 0`` assertion; it recovers once no stored step holds NaN (loudly failing
    all along, so the front-end follows ALF here)."""
    torch.manual_seed(7)
    d = prioritized(num_envs=1, max_length=8, enable_checkpoint=True)
    d.run(3)
    env1 = torch.zeros(1, dtype=torch.int64)
    d.rb.update_priority(env1, torch.tensor([1]), torch.tensor([math.nan]))
    assert math.isnan(d.rb.initial_priority.item())
    d.add()  # position 3 gets NaN, as ALF's max tree gives it
    with pytest.raises(AssertionError, match="valid priority"):
        d.rb.get_batch(4, 1)
    copy = prioritized(num_envs=1, max_length=8, enable_checkpoint=True)
    copy.rb.load_state_dict(d.rb.state_dict())
    assert math.isnan(copy.rb.initial_priority.item())  # kept by a checkpoint
    d.rb.update_priority(env1, torch.tensor([1]), torch.tensor([2.0]))
    assert math.isnan(d.rb.initial_priority.item())  # position 3 still holds NaN
    d.rb.update_priority(env1, torch.tensor([3]), torch.tensor([0.5]))
    assert d.rb.initial_priority.item() == 2.0  # max(1.0, 2.0): no NaN left
    _, info = d.rb.get_batch(20, 1)
    assert np.isfinite(info.importance_weights.numpy()).all()
    d.rb.update_priority(env1, torch.tensor([0]), torch.tensor([math.nan]))
    d.rb.dequeue(n=1)  # the NaN step leaves the buffer: it is no experience any more
    assert d.rb.initial_priority.item() == 2.0
    d.rb.update_priority(env1, torch.tensor([2]), torch.tensor([math.nan]))
    d.rb.clear()
    assert d.rb.initial_priority.item() == 1.0
