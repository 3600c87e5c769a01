"""Stand-in for ``alf.experience_replayers.segment_tree``: ALF's segment trees on rlreplay's.

ALF keeps a segment tree in one torch tensor of ``2 * capacity`` nodes in ``dtype``. Here the
tree is rlreplay's float64 Numba tree (:class:`rlreplay.SumTree`, :class:`rlreplay.MinTree`,
:class:`rlreplay.MaxTree`): the same leaves and the same summaries, with the torch API on
top. Values are rounded to ``dtype`` when they are set, so every leaf equals ALF's. A sum
tree also keeps ALF's node array in ``dtype`` (ALF's update cost, O(log capacity) per leaf
set): its root is ``summary()``, bit for bit ALF's (a float64 sum rounded to ``dtype`` can
differ from ALF's sum in ``dtype`` in its last bit), and
:meth:`SumSegmentTree.find_sum_bound` descends it in ``dtype`` as ALF does (``_descent``).
Min and max summaries are exact in any order. Tensors handed back are of ``dtype`` on
``device``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from rlreplay import (
    ConfigError,
    DTypeError,
    InvalidIdError,
    MaxTree,
    MinTree,
    PriorityError,
    SumTree,
)
from rlreplay.compat.alf._descent import find_sum_bound, leaf_nodes
from rlreplay.compat.alf.tensor_specs import carrier

__all__ = ["MaxSegmentTree", "MinSegmentTree", "SegmentTree", "SumSegmentTree"]

Array = np.ndarray[Any, Any]

#: ALF's ``op`` argument -> the rlreplay tree that computes it.
_TREES: dict[Any, type[SumTree | MinTree | MaxTree]] = {
    torch.add: SumTree,
    operator.add: SumTree,
    np.add: SumTree,
    torch.min: MinTree,
    min: MinTree,
    np.minimum: MinTree,
    torch.max: MaxTree,
    max: MaxTree,
    np.maximum: MaxTree,
}


def _hashable(op: Any) -> bool:
    try:
        hash(op)
    except TypeError:
        return False
    return True


def check_device(device: Any, what: str) -> torch.device:
    """``device`` as a :class:`torch.device`: ``"cpu"`` or an available CUDA device.

    Raises:
        ConfigError: Another device type, or CUDA asked for where it is not available.
    """
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ConfigError(f"{what}: expected 'cpu' or 'cuda', got {device!r}") from None
    if dev.type not in ("cpu", "cuda"):
        raise ConfigError(f"{what}: expected 'cpu' or 'cuda', got {device!r}")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            f"{what}: device={device!r} but CUDA is not available in this torch build "
            f"({torch.__version__}); use device='cpu'"
        )
    return dev


def as_numpy(value: Any) -> Array:
    """A NumPy array from a torch tensor (any device), an array or an array-like.

    A tensor of a dtype NumPy lacks (``bfloat16``) comes as its exact wider dtype (float32).
    """
    if isinstance(value, torch.Tensor):
        tensor = value.detach().cpu()
        out: Array = tensor.to(carrier(tensor.dtype)).numpy()
        return out
    return np.asarray(value)


class _OpTree:
    """ALF's own tree for an ``op`` or values that rlreplay's kernels do not compute.

    ALF's layout and arithmetic, in ``dtype`` (so every node equals ALF's): ``values[1]`` is the
    root, the leaves are ``values[capacity:]`` (in-order, :func:`leaf_nodes`) and ``values[i]
    = op(values[2i], values[2i+1])``, recomputed level by level for the ancestors of the
    leaves set. All nodes start at 0. Used for any ``op`` other than add, min and max, and
    for a sum tree given a negative or infinite value (or any tree given a NaN), which ALF
    stores without a check.
    """

    def __init__(self, capacity: int, op: Callable[..., Any], dtype: torch.dtype) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int | np.integer):
            raise ConfigError(f"capacity: expected an int >= 1, got {capacity!r}")
        if capacity < 1:
            raise ConfigError(f"capacity: expected an int >= 1, got {capacity!r}")
        self.capacity = int(capacity)
        self._op = op
        self._values = torch.zeros(2 * self.capacity, dtype=dtype)

    def _leaves(self, idx: Array) -> torch.Tensor:
        bad = (idx < 0) | (idx >= self.capacity)
        if bad.any():
            raise InvalidIdError(
                f"indices: expected values in [0, {self.capacity}), got {idx[bad][:5].tolist()}"
            )
        return torch.from_numpy(np.ascontiguousarray(leaf_nodes(idx, self.capacity)))

    def get(self, idx: Array) -> Array:
        out: Array = self._values[self._leaves(np.asarray(idx))].double().numpy()
        return out

    def set(self, idx: Array, values: Array) -> None:
        idx = np.asarray(idx)
        self._leaves(idx)  # validates
        flat = idx.reshape(-1)
        vals = np.broadcast_to(values, idx.shape).reshape(-1)
        # With duplicate indices the last value wins (torch's indexed write leaves it open).
        uniq, last = np.unique(flat[::-1], return_index=True)
        nodes = torch.from_numpy(leaf_nodes(uniq, self.capacity))
        self._values[nodes] = torch.as_tensor(vals[::-1][last]).to(self._values.dtype)
        parents = np.unique(nodes.numpy() // 2)
        parents = parents[parents >= 1]
        while parents.shape[0]:
            p = torch.from_numpy(parents)
            self._values[p] = self._op(self._values[2 * p], self._values[2 * p + 1])
            parents = np.unique(parents // 2)
            parents = parents[parents >= 1]

    @property
    def root(self) -> float:
        return float(self._values[1])

    def find_sum_bound(self, thresholds: Array) -> Array:
        """ALF's ``find_sum_bound`` on this node array, in ``dtype`` (see ``_descent``)."""
        out: Array = find_sum_bound(self._values, self.capacity, thresholds)
        return out.reshape(np.shape(thresholds))

    def state_dict(self) -> dict[str, Any]:
        return {"values": self._values.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._values.copy_(torch.as_tensor(state["values"]))


class SegmentTree(torch.nn.Module):
    """Summary (sum, min or max) over ``capacity`` leaves, each update O(log capacity).

    All leaves start at 0, as in ALF. ``values[capacity:]`` of ALF's layout are the leaves of
    rlreplay's tree; its internal nodes are recomputed from their children on every update
    (float64, no drift).

    Args:
        capacity: Number of leaves.
        op: Elementwise binary function of tensors. ``torch.add``, ``torch.min`` and
            ``torch.max`` (or ``operator.add``, ``min``, ``max`` and their NumPy counterparts)
            run on rlreplay's float64 trees; any other ``op`` runs ALF's own algorithm in
            ``dtype``.
        dtype: dtype of the values handed back (and the precision values are stored with);
            an integer dtype runs ALF's own algorithm in that dtype, as ALF builds any dtype.
        device: ``"cpu"`` or ``"cuda"``: where handed-back tensors are created.
        name: Name of the tree.

    Raises:
        ConfigError: An ``op`` that is not callable, a bad ``capacity`` or an unavailable
            device.
    """

    def __init__(
        self,
        capacity: int,
        op: Callable[..., Any],
        dtype: torch.dtype = torch.float32,
        device: Any = "cpu",
        name: str = "SegmentTree",
    ) -> None:
        super().__init__()
        tree_cls = _TREES.get(op) if _hashable(op) else None
        if not callable(op):
            raise ConfigError(f"op: expected a binary function of tensors, got {op!r}")
        if not isinstance(dtype, torch.dtype):
            raise ConfigError(f"dtype: expected a torch dtype, got {dtype!r}")
        self._name = name
        self._op = op
        self._dtype = dtype
        self._device = check_device(device, "device")
        self._tree: SumTree | MinTree | MaxTree | _OpTree
        self._is_sum = tree_cls is SumTree
        # ALF builds its node array in any torch dtype (torch.zeros(..., dtype=dtype)): an
        # integer tree sums, mins and maxes in that dtype, so it runs ALF's own algorithm.
        self._tree_cls = tree_cls if dtype.is_floating_point else None
        # A sum tree's summary is ALF's root: its node array in dtype, kept beside the core's
        # float64 tree (whose rounded total can differ from ALF's sum in dtype in the last bit).
        self._alf_sums: _OpTree | None = None
        if self._tree_cls is SumTree:
            self._alf_sums = _OpTree(capacity, torch.add, dtype)  # np.add etc.: same sums
        if self._tree_cls is None:  # any other op or dtype: ALF's algorithm, in dtype
            self._tree = _OpTree(capacity, op, dtype)
            if self._is_sum:
                self._alf_sums = self._tree
        else:
            self._tree = self._tree_cls(capacity)
            if (
                self._tree_cls is not SumTree
            ):  # ALF's nodes start at 0, rlreplay's at the neutral one
                self._tree.set(np.arange(self._tree.capacity), 0.0)
        self._capacity = self._tree.capacity
        self._nnz = 0

    @property
    def capacity(self) -> int:
        """Number of leaves."""
        return self._capacity

    @property
    def name(self) -> str:
        """The tree's name."""
        return self._name

    def _out(self, array: Array) -> torch.Tensor:
        # Shape kept: np.ascontiguousarray turns a 0-d array into shape (1,).
        arr = np.asarray(array)
        out = torch.from_numpy(np.ascontiguousarray(arr)).reshape(arr.shape)
        return out.to(self._device, self._dtype)

    def _indices(self, indices: Any) -> Array:
        idx = as_numpy(indices)
        if idx.dtype.kind not in "iu":
            raise DTypeError(f"indices: expected integers, got dtype {idx.dtype}")
        return idx.astype(np.int64, copy=False)

    def __setitem__(self, indices: Any, values: Any) -> None:
        """Set the leaves ``indices`` to ``values`` (same shape, or a scalar).

        Values are rounded to ``dtype`` first; with duplicate indices the last value wins.

        Raises:
            rlreplay.InvalidIdError: An index outside ``[0, capacity)``.
            rlreplay.ShapeError: ``values`` of another shape than ``indices``.

        Any value is stored, as in ALF: a negative or infinite value in a sum tree, or a NaN in
        any tree, moves the tree to ALF's own algorithm in ``dtype`` (see :class:`SegmentTree`).
        """
        idx = self._indices(indices)
        if isinstance(values, torch.Tensor):
            vals = values.detach().to(self._dtype).double().cpu().numpy()
        else:
            vals = torch.as_tensor(np.asarray(values, np.float64)).to(self._dtype).double().numpy()
        old = self._tree.get(idx)  # validates the indices before anything is written
        if not isinstance(self._tree, _OpTree) and self._refused(vals):
            self._to_op_tree()
        self._tree.set(idx, vals)
        if self._alf_sums is not None and self._alf_sums is not self._tree:
            self._alf_sums.set(idx, vals)
        # The number of non-zero leaves changes by the final value of each distinct index.
        flat = idx.reshape(-1)
        uniq, first_rev = np.unique(flat[::-1], return_index=True)
        final = self._tree.get(uniq)
        before = old.reshape(-1)[flat.size - 1 - first_rev]
        self._nnz += int(np.count_nonzero(final)) - int(np.count_nonzero(before))

    def _refused(self, vals: Array) -> bool:
        """Whether rlreplay's tree refuses ``vals`` (ALF stores any value without a check)."""
        if isinstance(self._tree, SumTree):
            return bool(((vals < 0) | ~np.isfinite(vals)).any())
        return bool(np.isnan(vals).any())

    def _to_op_tree(self) -> None:
        """Go on with ALF's own algorithm in ``dtype``, from the same leaves."""
        if self._alf_sums is not None:  # ALF's node array is there already
            self._tree = self._alf_sums
            return
        tree = _OpTree(self._capacity, self._op, self._dtype)
        every = np.arange(self._capacity)
        tree.set(every, self._tree.get(every))
        self._tree = tree

    def __getitem__(self, indices: Any) -> torch.Tensor:
        """The leaves at ``indices`` (same shape), as ``dtype`` on ``device``."""
        return self._out(self._tree.get(self._indices(indices)))

    def summary(self) -> torch.Tensor:
        """The sum (``torch.add``), min (``torch.min``) or max (``torch.max``) of all leaves.

        Returns:
            A scalar tensor of ``dtype`` on ``device``.
        """
        return self._out(np.array(self._total()))

    def _total(self) -> float:
        """The summary: ALF's root for sums (in ``dtype``), the core's min or max."""
        if isinstance(self._tree, _OpTree):
            return self._tree.root
        if self._alf_sums is not None or isinstance(self._tree, SumTree):
            assert self._alf_sums is not None  # kept for every sum tree
            return self._alf_sums.root
        if isinstance(self._tree, MinTree):
            return self._tree.min
        return self._tree.max

    @property
    def nnz(self) -> torch.Tensor:
        """The number of non-zero leaves (a scalar int64 tensor on ``device``)."""
        return torch.tensor(self._nnz, dtype=torch.int64, device=self._device)

    def get_extra_state(self) -> dict[str, Any]:
        """The leaves (``state_dict()`` carries them under ``_extra_state``)."""
        return self._tree.state_dict()

    def set_extra_state(self, state: Any) -> None:
        """Restore the leaves of :meth:`get_extra_state`."""
        if "values" in state and not isinstance(self._tree, _OpTree):  # saved by ALF's algorithm
            self._tree = _OpTree(self._capacity, self._op, self._dtype)
        elif "values" not in state and self._tree_cls is not None:  # saved by rlreplay's tree
            self._tree = self._tree_cls(self._capacity)
        self._tree.load_state_dict(state)
        every = np.arange(self._capacity)
        if self._is_sum:  # ALF's node array, from the loaded leaves
            self._alf_sums = (
                self._tree
                if isinstance(self._tree, _OpTree)
                else _OpTree(self._capacity, torch.add, self._dtype)
            )
            if self._alf_sums is not self._tree:
                self._alf_sums.set(every, self._tree.get(every))
        self._nnz = int(np.count_nonzero(self._tree.get(every)))

    def extra_repr(self) -> str:
        return f"name={self._name!r}, capacity={self._capacity}, dtype={self._dtype}"


class SumSegmentTree(SegmentTree):
    """Segment tree with the sum operation; finds the leaf under a prefix sum.

    Example:
        >>> import torch
        >>> from rlreplay.compat.alf.segment_tree import SumSegmentTree
        >>> tree = SumSegmentTree(4)
        >>> tree[torch.tensor([0, 2])] = torch.tensor([1.0, 2.0])
        >>> tree.find_sum_bound(torch.tensor([0.5, 1.0, 3.0])).tolist()
        [0, 2, 2]
    """

    def __init__(
        self,
        capacity: int,
        dtype: torch.dtype = torch.float32,
        device: Any = "cpu",
        name: str = "SumSegmentTree",
    ) -> None:
        super().__init__(capacity, torch.add, dtype=dtype, device=device, name=name)

    def find_sum_bound(self, thresholds: Any) -> torch.Tensor:
        """For each threshold, the smallest ``idx`` with ``threshold < sum(values[: idx + 1])``.

        ALF's descent over its node array in ``dtype`` (left while ``threshold < left
        child``, else right with the left child subtracted), so a threshold at a rounding
        boundary lands where ALF's does; then ALF's documented guarantees: ``values[result[i]]`` is
        never 0 (a descent that rounding sent onto a zero leaf moves back to the non-zero leaf
        before it), and a threshold equal to :meth:`summary` gives the largest index of a
        non-zero value. Outside ALF's documented range the descent answers: a negative or NaN
        threshold gives 0, and on an all-zero tree a threshold of 0 gives ``capacity - 1``.

        Args:
            thresholds: 1-D tensor of thresholds, documented in ``[0, summary()]``.

        Returns:
            int64 tensor of the shape of ``thresholds``, on ``device``.

        Raises:
            ValueError: A threshold greater than :meth:`summary` (``rlreplay.PriorityError``),
                ALF's only documented error.
        """
        th = as_numpy(thresholds)
        if th.dtype.kind not in "iuf":
            raise DTypeError(f"thresholds: expected real numbers, got dtype {th.dtype}")
        th = th.astype(np.float64)
        shown = self._total()  # ALF's root in dtype: the error's bound, as in ALF
        if (th > shown).any():
            bad = float(th[th > shown].reshape(-1)[0])
            raise PriorityError(
                f"find_sum_bound: thresholds must not exceed summary() = {shown!r}, got {bad!r}"
            )
        if self._alf_sums is None:  # pragma: no cover - the constructor fixes the op
            raise TypeError("find_sum_bound needs a sum tree")
        out = self._alf_sums.find_sum_bound(th)
        return torch.from_numpy(np.asarray(out, np.int64)).to(self._device)


class MinSegmentTree(SegmentTree):
    """Segment tree with the min operation (all leaves start at 0, as in ALF)."""

    def __init__(
        self,
        capacity: int,
        dtype: torch.dtype = torch.float32,
        device: Any = "cpu",
        name: str = "MinSegmentTree",
    ) -> None:
        super().__init__(capacity, torch.min, dtype=dtype, device=device, name=name)


class MaxSegmentTree(SegmentTree):
    """Segment tree with the max operation (all leaves start at 0, as in ALF)."""

    def __init__(
        self,
        capacity: int,
        dtype: torch.dtype = torch.float32,
        device: Any = "cpu",
        name: str = "MaxSegmentTree",
    ) -> None:
        super().__init__(capacity, torch.max, dtype=dtype, device=device, name=name)
