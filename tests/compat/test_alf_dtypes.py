"""ALF front-end: ``TensorSpec`` dtypes without a NumPy counterpart (``torch.bfloat16``).

ALF keeps each leaf of ``data_spec`` in a torch tensor of the spec's dtype (seed 001:
``data_spec (alf.TensorSpec) - spec of an entry nest in the buffer``), writes a batch with an
indexed write ``buffer[(env_ids, idx)] = value`` and hands back tensors of that dtype from
``get_batch``, ``gather_all``, ``dequeue`` and ``get_field``. The front-end stores a
``bfloat16`` leaf as float32, which holds every ``bfloat16`` value exactly, rounds what is
added to ``bfloat16`` first (NumPy arrays and Python numbers of the same kind; a torch tensor
must be of the leaf's dtype, as torch's ``index_put_`` requires in ALF) and hands back
``bfloat16`` tensors: the same values and dtypes as ALF's buffer.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import rlreplay as rr
from rlreplay.compat.alf import ReplayBuffer, StepType, TensorSpec
from rlreplay.compat.alf.segment_tree import SumSegmentTree

BF = torch.bfloat16
SPEC = {
    "step_type": TensorSpec((), torch.int32),
    "reward": TensorSpec((), BF),
    "discount": TensorSpec((), BF),
    "obs": {"x": TensorSpec((3,), BF), "n": TensorSpec((), torch.int64)},
}


def step(t: int, kind: int = StepType.MID, dtype: torch.dtype = BF) -> dict[str, Any]:
    """Step ``t`` of two envs; ``x`` is computed in float64 (values that are not bfloat16
    numbers), then cast to ``dtype``."""
    return {
        "step_type": torch.full((2,), kind, dtype=torch.int32),
        "reward": torch.tensor([1 / 3, 2 / 3], dtype=dtype),
        "discount": torch.ones(2, dtype=dtype),
        "obs": {
            "x": (torch.arange(6, dtype=torch.float64).reshape(2, 3) / 7 + t).to(dtype),
            "n": torch.tensor([t, 100 + t]),
        },
    }


def rounded(value: torch.Tensor) -> torch.Tensor:
    """What ALF's bfloat16 buffer holds for ``value``: torch's rounding to bfloat16."""
    return value.to(BF)


def test_bfloat16_leaves_come_back_as_bfloat16_everywhere() -> None:
    rb = ReplayBuffer(SPEC, num_environments=2, max_length=4)
    added = [step(t, StepType.FIRST if t == 0 else StepType.MID) for t in range(3)]
    for s in added:
        rb.add_batch(s)
    want_x = torch.stack([rounded(s["obs"]["x"]) for s in added], dim=1)  # [E, T, 3]
    batch, info = rb.gather_all()
    assert batch["obs"]["x"].dtype == BF and batch["reward"].dtype == BF
    assert batch["obs"]["n"].dtype == torch.int64
    assert torch.equal(batch["obs"]["x"], want_x)
    assert torch.equal(batch["reward"][:, 0], rounded(added[0]["reward"]))
    got, info = rb.get_batch(batch_size=4, batch_length=2)
    assert got["obs"]["x"].dtype == BF and got["discount"].dtype == BF
    for row in range(4):
        e, p = int(info.env_ids[row]), int(info.positions[row])
        assert torch.equal(got["obs"]["x"][row], want_x[e, p : p + 2])
    field = rb.get_field("obs.x", torch.tensor([1, 0]), torch.tensor([2, 1]))
    assert field.dtype == BF and torch.equal(field, torch.stack([want_x[1, 2], want_x[0, 1]]))
    sub = rb.get_field("obs", torch.tensor([0]), torch.tensor([0]))
    assert sub["x"].dtype == BF and sub["n"].dtype == torch.int64
    out = rb.dequeue(n=2)
    assert out["obs"]["x"].dtype == BF and torch.equal(out["obs"]["x"], want_x[:, :2])


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_tensors_of_another_float_dtype_raise_as_torchs_index_put(dtype: torch.dtype) -> None:
    """ALF's ``buffer[(env_ids, idx)] = value`` is torch's ``index_put_``, which refuses a
    source of another dtype (``RuntimeError: Index put requires the source and destination
    dtypes match``); nothing is added."""
    rb = ReplayBuffer(SPEC, num_environments=2, max_length=4)
    rb.add_batch(step(0, StepType.FIRST))
    with pytest.raises(RuntimeError, match="Index put requires the source and destination"):
        rb.add_batch(step(1, StepType.MID, dtype))
    assert int(rb.total_size) == 2
    bf = torch.zeros(4, 3, dtype=BF)  # what torch itself does with the same write
    with pytest.raises(RuntimeError, match="Index put requires the source and destination"):
        bf[(torch.tensor([0, 1]), torch.tensor([0, 0]))] = torch.ones(2, dtype=dtype)


def test_values_are_rounded_to_bfloat16_as_alfs_write_stores_them() -> None:
    """bfloat16 tensors are kept; NumPy arrays and Python numbers are rounded to bfloat16
    (torch's rounding)."""
    rb = ReplayBuffer(SPEC, num_environments=2, max_length=4)
    s = step(0, StepType.FIRST)
    rb.add_batch(s)
    np_step = step(1)
    np_step["obs"]["x"] = (torch.arange(6, dtype=torch.float64).reshape(2, 3) / 7 + 1).numpy()
    np_step["reward"] = 0.1  # a Python float, broadcast as ALF's indexed write does
    rb.add_batch(np_step)
    got, _ = rb.gather_all()
    assert torch.equal(got["obs"]["x"][:, 0], rounded(s["obs"]["x"]))
    assert torch.equal(got["obs"]["x"][:, 1], rounded(torch.from_numpy(np_step["obs"]["x"])))
    assert got["reward"][:, 1].tolist() == [rounded(torch.tensor(0.1)).item()] * 2
    assert rounded(torch.tensor(0.1)).item() != np.float32(0.1)  # the rounding is bfloat16's


def test_bfloat16_refuses_what_other_leaves_refuse_and_leaves_the_buffer_as_it_was() -> None:
    rb = ReplayBuffer(SPEC, num_environments=2, max_length=4)
    bad = step(0)
    bad["obs"]["x"] = torch.ones(2, 3, dtype=torch.complex64)
    with pytest.raises(RuntimeError, match=r"obs__x.*bfloat16.*complex64") as err:
        rb.add_batch(bad)
    assert isinstance(err.value, rr.DTypeError)
    assert int(rb.total_size) == 0


def test_bfloat16_checkpoint_priorities_and_returns() -> None:
    spec = dict(SPEC)
    rb = ReplayBuffer(
        spec, num_environments=2, max_length=8, prioritized_sampling=True,
        record_episodic_return=True, gamma=0.5, enable_checkpoint=True,
    )  # fmt: skip
    kinds = [StepType.FIRST, StepType.MID, StepType.LAST, StepType.FIRST]
    for t, kind in enumerate(kinds):
        rb.add_batch(step(t, kind))
    # Priorities may come as bfloat16 tensors (a bfloat16 loss), as ALF stores them.
    rb.update_priority(
        torch.tensor([0, 1]), torch.tensor([0, 1]), torch.tensor([2.0, 3.0], dtype=BF)
    )
    batch, info = rb.get_batch(batch_size=6, batch_length=1)
    assert batch["obs"]["x"].dtype == BF and info.importance_weights.dtype == torch.float32
    # The reward received on arriving at the step after pos counts: r(bf16) at pos 1 and 2.
    r = rounded(torch.tensor([1 / 3, 2 / 3])).float()
    _, all_info = rb.gather_all()
    assert torch.allclose(all_info.discounted_return[:, 0], r + 0.5 * r)
    copy = ReplayBuffer(
        spec, num_environments=2, max_length=8, prioritized_sampling=True,
        record_episodic_return=True, gamma=0.5, enable_checkpoint=True,
    )  # fmt: skip
    copy.load_state_dict(rb.state_dict())
    a, _ = rb.gather_all()
    b, _ = copy.gather_all()
    assert b["obs"]["x"].dtype == BF and torch.equal(a["obs"]["x"], b["obs"]["x"])


def test_bfloat16_segment_tree() -> None:
    """ALF's trees compute in their ``dtype``: bfloat16 leaves and sums, thresholds of any
    float dtype, results of the tree's dtype."""
    tree = SumSegmentTree(5, dtype=BF)
    tree[torch.tensor([0, 3])] = torch.tensor([1.1, 2.2])
    assert tree[torch.tensor([0, 3])].tolist() == [
        rounded(torch.tensor(x)).item() for x in (1.1, 2.2)
    ]
    assert tree.summary().dtype == BF
    assert tree.summary() == rounded(torch.tensor(1.1)) + rounded(torch.tensor(2.2))
    assert tree.find_sum_bound(torch.tensor([0.5, 1.5], dtype=BF)).tolist() == [0, 3]
