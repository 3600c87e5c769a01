"""Sum, min and max segment trees over float64 leaves as torch tensors, on any torch device.

:class:`TorchSumTree`, :class:`TorchMinTree` and :class:`TorchMaxTree` hold the nodes of
:class:`rlreplay.sampling.SumTree`, :class:`~rlreplay.sampling.MinTree` and
:class:`~rlreplay.sampling.MaxTree` in the same layout (a ``(groups, 8)`` float64 tensor:
fan-out 8, leaves first, root last; see :mod:`rlreplay.sampling.tree_kernels`) and compute
every node the same way (the left-to-right fold of its children: ``((c0 + c1) + c2) + ...``
for sums, ``c if c < acc else acc`` for minima, ``c if c > acc else acc`` for maxima). So for
the same leaves every node is bit for bit the NumPy tree's, and a descent maps the same masses
(or uniforms) to the same leaves, rounding and ties included.

Every operation is a fixed sequence of vectorised torch ops whose shapes depend only on the
tree's capacity and the batch size, never on values:

* :meth:`~TorchSumTree.set` writes a batch of leaves (duplicates: the last value wins), then
  recomputes their ancestors level by level: while a level has more nodes than the batch, the
  parents on the batch's paths (gathered, folded, scattered; a parent shared by several paths
  gets the same value from each); above, the whole level at once (a slice, no gather). A
  fold is one reduction for min and max trees (a three-round tournament on a CPU), and for
  a sum tree the line's running sums (kept for descents): one ``cumsum`` on a CPU, seven
  ordered adds elsewhere. :meth:`~TorchSumTree.set_tensors` skips :meth:`set`'s checks and
  its last-wins pass for callers whose duplicates carry equal values, and trees of the same
  capacity can share one :meth:`~TorchSumTree.path` (the parents per level);
* :meth:`~TorchSumTree.sample` / :meth:`~TorchSumTree.find_prefix_sum` walk a batch of masses
  down one level per step: gather, for each mass, the running prefix sums of its line of 8
  children (a sum tree keeps them with each line, recomputed with the line's parent) and
  pick the child as :func:`rlreplay.sampling.tree_kernels._descend_all` does.

No host synchronisation: none of these reads a device value on the host (no ``.item()``,
``.cpu()``, ``.tolist()`` or ``bool()`` of a device tensor), so they queue on the device
without waiting, and the sequence can be captured in a CUDA graph. The price is that values
given as tensors are not checked (that would read them): give a sum tree finite values ``>= 0``
and a min tree non-NaN ones, and indices in ``[0, capacity)`` (an index out of range fails on
the device). Values and indices given as NumPy arrays or Python numbers are checked on the host
as the NumPy trees check them, at no device cost. :attr:`~TorchSumTree.total` and
:attr:`~TorchMinTree.min` are 0-d tensors. A sum tree whose total is 0 maps every mass to leaf
0: check that the tree is not empty where it costs no sync (e.g. from a count the host keeps).
:meth:`~TorchSumTree.state_dict` (NumPy leaves, the NumPy trees' format) waits for the device.

Torch is imported when a tree is made, not when this module is: ``import rlreplay`` and the
import of this module stay free of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Self

import numpy as np

from rlreplay.errors import CheckpointError, ConfigError, DTypeError, InvalidIdError, ShapeError
from rlreplay.sampling.trees import (
    _K,
    _SHIFT,
    _STATE_VERSION,
    MaxTree,
    MinTree,
    SumTree,
    _first_bad,
    _groups,
    _integer_at_least,
    _layout,
)
from rlreplay.sampling.trees import _SegmentTree as _NumpyTree

if TYPE_CHECKING:
    import torch
    from torch import Tensor

__all__ = ["TorchMaxTree", "TorchMinTree", "TorchSumTree"]


_SUM, _MIN, _MAX = 0, 1, 2

# Lanes of a sum tree's descent rows (see TorchSumTree.__init__): 0, p_0 .. p_7, last.
_LAST = _K + 1
_ROW = _LAST + 1


def _to(t: Tensor, device: torch.device, dtype: torch.dtype | None = None) -> Tensor:
    """``t`` on ``device`` (as ``dtype``): a copy from the host is queued without waiting; a copy
    from a device to the host waits for it (its result is read at once)."""
    return t.to(device=device, dtype=dtype, non_blocking=t.device.type == "cpu")


class _TorchSegmentTree:
    """Shared layout, updates and state of the torch trees (not public)."""

    _OP: ClassVar[int]
    _NUMPY: ClassVar[type[_NumpyTree]]

    def __init__(self, capacity: int, device: torch.device | str = "cpu") -> None:
        """Creates a tree whose ``capacity`` leaves all hold the neutral element (0 for a sum,
        ``+inf`` for a min, ``-inf`` for a max).

        Args:
            capacity: Number of leaves, any integer ``>= 1``.
            device: Any torch device.

        Raises:
            ConfigError: ``capacity`` is not an integer ``>= 1``, or ``device`` not a device.
        """
        import torch

        self._capacity = _integer_at_least("capacity", capacity, 1, ConfigError)
        # A one-leaf NumPy tree of the same kind checks host values as the NumPy trees do.
        self._check = self._NUMPY(1)
        try:
            self.device = torch.device(device)
        except (RuntimeError, TypeError) as exc:
            raise ConfigError(
                f"{type(self).__name__}: {device!r} is not a torch device ({exc})"
            ) from None
        levels = _layout(self._capacity)
        # (first group, node count) per level, root first: host ints, so that every shape and
        # slice below is known without reading the device.
        self._levels: list[tuple[int, int]] = [(int(a), int(b)) for a, b in levels]
        self._root = _groups(levels) - 1
        self._nodes = torch.full(
            (self._root + 1, _K), self._NUMPY._NEUTRAL, dtype=torch.float64, device=self.device
        )
        self._flat = self._nodes.view(-1)
        # Per level d below the root: the nodes of level d from the first (flat), and the
        # lines of children of level d's nodes (line p: node p's children), as views.
        self._level_nodes = [self._flat[first * _K :] for first, _ in self._levels]
        self._child_lines = [self._nodes[first:] for first, _ in self._levels[1:]]
        # For the last-value-wins rule on duplicate indices: scratch of one int64 per leaf.
        self._last = torch.zeros(self._capacity, dtype=torch.int64, device=self.device)
        self._inf = torch.full((), float("inf"), dtype=torch.float64, device=self.device)
        self._on_cpu = self.device.type == "cpu"

    @property
    def capacity(self) -> int:
        """Number of leaves (valid indices are ``0 .. capacity - 1``)."""
        return self._capacity

    @property
    def nodes(self) -> Tensor:
        """The ``(groups, 8)`` float64 node tensor (live; the layout of the NumPy tree's)."""
        return self._nodes

    def __len__(self) -> int:
        return self._capacity

    def __repr__(self) -> str:
        return f"{type(self).__name__}(capacity={self._capacity}, device={str(self.device)!r})"

    # ------------------------------------------------------------------ inputs
    def _indices(self, indices: Any) -> Tensor:
        """Flat int64 indices on the device; host indices are range-checked on the host."""
        import torch

        if isinstance(indices, torch.Tensor):
            kind = indices.dtype
            if kind.is_floating_point or kind.is_complex or kind == torch.bool:
                raise DTypeError(f"indices must be integers; got dtype {kind}")
            t = _to(indices, self.device, torch.int64)
            return t.reshape(-1)
        idx = np.asarray(indices)
        if idx.dtype.kind not in "iu":
            if idx.size:
                raise DTypeError(f"indices must be integers; got dtype {idx.dtype}")
            idx = np.zeros(idx.shape, np.int64)  # ``[]`` comes in as float64
        bad = (idx < 0) | (idx >= self._capacity)
        if bad.any():
            position, value = _first_bad(bad, idx)
            raise InvalidIdError(
                f"indices must be in [0, {self._capacity}) (capacity {self._capacity}); "
                f"got {value} at position {position}"
            )
        flat = np.array(idx.reshape(-1), dtype=np.int64)  # a fresh copy torch may own
        return torch.from_numpy(flat).to(self.device, non_blocking=True)

    def _values(self, values: Any, shape: tuple[int, ...], count: int) -> Tensor:
        """Flat float64 values on the device, one per index; host values are checked on the
        host (as the NumPy tree checks them)."""
        import torch

        if isinstance(values, torch.Tensor):
            t = _to(values, self.device, torch.float64)
            if t.dim() == 0:
                return t.expand(count)
            if tuple(t.shape) != shape:
                raise ShapeError(
                    f"values must be a scalar or have the shape of indices {shape}; "
                    f"got shape {tuple(t.shape)}"
                )
            return t.reshape(-1)
        vals = self._check._as_float_array(values, "values")
        if vals.ndim == 0:
            vals = np.full(count, vals.item(), dtype=np.float64)
        elif vals.shape != shape:
            raise ShapeError(
                f"values must be a scalar or have the shape of indices {shape}; "
                f"got shape {vals.shape}"
            )
        vals = np.ascontiguousarray(vals.reshape(-1), dtype=np.float64)
        self._check._check_values(vals)
        return torch.from_numpy(vals.copy()).to(self.device, non_blocking=True)

    # ------------------------------------------------------------------ updates
    def set(self, indices: Any, values: Any) -> None:
        """Sets leaves ``indices`` to ``values`` and recomputes every ancestor from its children.

        Args:
            indices: Integer leaf indices of any shape (a tensor, or anything NumPy takes);
                duplicates allowed: the last one wins.
            values: A scalar or an array of the shape of ``indices`` (a tensor, or host values).

        Raises:
            DTypeError, InvalidIdError, ShapeError, PriorityError: As the NumPy tree, for host
                inputs (checked before anything is written); tensor inputs are checked for
                dtype and shape only (see the module docstring).
        """
        import torch

        shape = tuple(indices.shape) if isinstance(indices, torch.Tensor) else None
        if shape is None:
            shape = np.shape(np.asarray(indices))
        idx = self._indices(indices)
        count = idx.shape[0]
        vals = self._values(values, shape, count)
        if count == 0:
            return
        self._write(idx, vals)

    def _write(self, idx: Tensor, vals: Tensor) -> None:
        """Writes the leaves (last duplicate wins), then the ancestors."""
        import torch

        count = idx.shape[0]
        # Every copy of a duplicated index is given the value of its last copy, so the order in
        # which the scatter writes them does not matter.
        positions = torch.arange(count, dtype=torch.int64, device=self.device)
        self._last.scatter_reduce_(0, idx, positions, "amax", include_self=False)
        self._flat.index_copy_(0, idx, vals.index_select(0, self._last.index_select(0, idx)))
        self._recompute(idx)

    def set_tensors(self, idx: Tensor, vals: Tensor, path: list[Tensor] | None = None) -> None:
        """:meth:`set` for a caller that already holds what it checks: ``idx`` flat int64 and
        ``vals`` flat float64 of the same length, on the device, every copy of a duplicated
        index carrying the same value (so no last-wins pass is needed). ``path``: this
        tree's :meth:`path` of ``idx`` (or of a tree of the same capacity), computed once
        for several trees. Nothing is checked or converted (about 10 ops fewer than
        :meth:`set`)."""
        if idx.shape[0] == 0:
            return
        self._flat.index_copy_(0, idx, vals)
        self._recompute(idx, self.path(idx) if path is None else path)

    def path(self, idx: Tensor) -> list[Tensor]:
        """The parents of leaves ``idx`` on the levels an update of them gathers (those with
        more nodes than ``idx`` has entries; above, whole levels are recomputed), bottom-up:
        one shift per level, shareable between trees of the same capacity."""
        count = idx.shape[0]
        out, nodes = [], idx
        for d in range(len(self._levels) - 2, -1, -1):
            if self._levels[d][1] <= count:
                break
            nodes = nodes >> _SHIFT
            out.append(nodes)
        return out

    def _recompute(self, idx: Tensor, path: list[Tensor] | None = None) -> None:
        """Recomputes the ancestors of leaves ``idx`` bottom-up (see the module docstring):
        the parents on ``path`` (default: :meth:`path` of ``idx``), then whole levels."""
        if path is None:
            path = self.path(idx)
        top = len(self._levels) - 2
        for d in range(top, -1, -1):
            if top - d < len(path):  # the parents on the paths (once per path)
                parents = path[top - d]
                lines = self._child_lines[d].index_select(0, parents)
                self._level_nodes[d].index_copy_(0, parents, self._fold_lines(lines, d, parents))
            else:  # the whole level, in order
                self._recompute_level(d)

    def _recompute_level(self, d: int) -> None:
        """Recomputes every node of level ``d`` from its children."""
        size = self._levels[d][1]
        values = self._fold_lines(self._child_lines[d][:size], d, None)
        self._level_nodes[d][:size].copy_(values)

    def _fold_lines(self, lines: Tensor, d: int, parents: Tensor | None) -> Tensor:
        """The value of each node of level ``d`` whose line of children is a row of ``lines``
        (``(n, 8)``): the lanes folded left to right under the tree's op. ``parents``: those
        nodes (``None``: nodes ``0 .. n - 1``).

        One reduction, :func:`torch.min` / :func:`torch.max` along the lanes, off the CPU:
        they keep the first lane holding the extreme value, as the fold's ``c if c < acc else
        acc`` does for values that are not NaN (so ``0.0`` before ``-0.0`` stays ``0.0``).
        On a CPU, whose kernel for them opens a parallel region at any size (with several
        threads on busy cores: stalls of milliseconds), a tournament of three rounds instead
        (lanes ``2i`` against ``2i + 1``, the right one winning only if strictly smaller for
        a min): the same leftmost lane, in six elementwise ops."""
        import torch

        if not self._on_cpu:
            return (torch.min(lines, 1) if self._OP == _MIN else torch.max(lines, 1)).values
        acc = lines
        while acc.shape[1] > 1:
            left, right = acc[:, 0::2], acc[:, 1::2]
            wins = right < left if self._OP == _MIN else right > left
            acc = torch.where(wins, right, left)
        return acc[:, 0]

    def _build(self) -> None:
        """Recomputes every internal node from the leaves."""
        for d in range(len(self._levels) - 2, -1, -1):
            self._recompute_level(d)

    # ------------------------------------------------------------------ reads
    def get(self, indices: Any) -> Tensor:
        """The leaves at ``indices`` (a new float64 tensor of the shape of ``indices``)."""
        import torch

        shape = tuple(indices.shape) if isinstance(indices, torch.Tensor) else None
        if shape is None:
            shape = np.shape(np.asarray(indices))
        return self._flat.index_select(0, self._indices(indices)).reshape(shape)

    def _root_value(self) -> Tensor:
        return self._nodes[self._root, 0].clone()

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """The NumPy tree's state (``version``, ``kind``, ``capacity``, NumPy ``leaves``), so a
        state moves between the two. Waits for the device."""
        leaves = np.array(self._flat[: self._capacity].to("cpu").numpy())
        kind = self._NUMPY._KIND
        return {
            "version": _STATE_VERSION,
            "kind": kind,
            "capacity": self._capacity,
            "leaves": leaves,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Replaces the leaves with those of ``state`` (this tree's or the NumPy tree's), and
        rebuilds the nodes.

        Raises:
            CheckpointError: As the NumPy tree's ``load_state_dict``; the tree is then unchanged.
        """
        import torch

        checked = self._NUMPY(self._capacity)
        checked.load_state_dict(state)  # validates (and raises) as the NumPy tree does
        leaves = torch.from_numpy(checked._leaves()).to(self.device)
        self._nodes.fill_(self._NUMPY._NEUTRAL)
        self._flat[: self._capacity].copy_(leaves)
        self._build()

    @classmethod
    def from_state_dict(cls, state: dict[str, Any], device: torch.device | str = "cpu") -> Self:
        """A new tree on ``device`` from a :meth:`state_dict` (of any capacity)."""
        if "capacity" not in state:
            raise CheckpointError(f"{cls.__name__} state is missing keys ['capacity']")
        numpy_tree = cls._NUMPY.from_state_dict(state)
        tree = cls(numpy_tree.capacity, device)
        tree.load_state_dict(state)
        return tree


class TorchSumTree(_TorchSegmentTree):
    """A sum tree on a torch device: proportional sampling by a batched descent, with the draws
    of :class:`rlreplay.sampling.SumTree` (see the module docstring).

    Example:
        >>> import numpy as np, torch
        >>> from rlreplay.sampling.torch_trees import TorchSumTree
        >>> tree = TorchSumTree(5, device="cpu")
        >>> tree.set(torch.tensor([0, 3]), torch.tensor([1.0, 3.0], dtype=torch.float64))
        >>> float(tree.total)
        4.0
        >>> tree.find_prefix_sum(torch.tensor([0.0, 0.5, 1.0, 4.0], dtype=torch.float64)).tolist()
        [0, 0, 3, 3]
    """

    _OP = _SUM
    _NUMPY = SumTree

    def __init__(self, capacity: int, device: torch.device | str = "cpu") -> None:
        import torch

        super().__init__(capacity, device)
        # What a descent reads of each line of 8 children c_0 .. c_7, kept with the line: a row
        # of _ROW lanes, 0, p_0 .. p_7, last, where p_j = (((c_0 + c_1) + ...) + c_j) are the
        # running prefix sums and last the rightmost lane with c_j > 0 (0 if none). Lane k is
        # what a mass passing k children loses; the mass is compared with lanes 1 .. 8. A line
        # of zeros has a row of zeros. Every line below the root's is some node's children, so
        # an update of that node (or a rebuild) rewrites its row.
        self._rows = torch.zeros((self._root + 1, _ROW), dtype=torch.float64, device=self.device)
        self._level_rows = [self._rows[first:] for first, _ in self._levels[1:]]
        self._lanes_f = torch.arange(_K, dtype=torch.float64, device=self.device)
        self._sequential_cumsum = self._on_cpu
        self._strata: dict[int, Tensor] = {}

    def _fold_lines(self, lines: Tensor, d: int, parents: Tensor | None) -> Tensor:
        """The parents' sums, and the descent rows of ``lines`` (see ``__init__``).

        The running sums are one :func:`torch.cumsum` on a CPU (its kernel adds along the row
        in order, the fold's rounding); elsewhere a scan may add in another order, so they are
        7 adds, left to right."""
        import torch

        n = lines.shape[0]
        rows = torch.zeros((n, _ROW), dtype=torch.float64, device=self.device)
        prefix = rows[:, 1:_LAST]
        if self._sequential_cumsum:
            torch.cumsum(lines, 1, out=prefix)
        else:
            c = lines.unbind(1)
            p = prefix.unbind(1)
            p[0].copy_(c[0])
            for j in range(1, _K):
                torch.add(p[j - 1], c[j], out=p[j])  # left to right
        torch.amax((lines > 0.0) * self._lanes_f, 1, out=rows[:, _LAST])  # rightmost c_j > 0
        if parents is None:
            self._level_rows[d][:n].copy_(rows)
        else:
            self._level_rows[d].index_copy_(0, parents, rows)
        return rows[:, _K]

    @property
    def total(self) -> Tensor:
        """Sum of all leaves: a 0-d float64 tensor on the device."""
        return self._root_value()

    def find_prefix_sum(self, masses: Tensor) -> Tensor:
        """For each mass, the smallest leaf ``k`` with ``mass < leaf[0] + ... + leaf[k]``; for a
        mass ``>= total``, the rightmost leaf ``> 0`` (as :meth:`SumTree.find_prefix_sum`).

        Args:
            masses: float64 masses in ``[0, total]``, any shape (a tensor, moved to the device;
                other dtypes are converted). Not checked (see the module docstring).

        Returns:
            int64 leaf indices of the shape of ``masses``, on the device.
        """
        import torch

        m = _to(masses, self.device, torch.float64)
        return self._descend(m.reshape(-1)).reshape(m.shape)

    def sample(self, uniforms: Tensor, *, stratified: bool = True) -> Tensor:
        """Leaves drawn with probability ``leaf / total``, one per uniform in ``[0, 1)``.

        The same uniforms give the same leaves as :meth:`SumTree.sample` drawing them (``u =
        rng.random(n)``): stratified, mass ``i`` is ``(i + u[i]) * (total / n)``, one in each of
        ``n`` equal strata; otherwise ``u[i] * total``.

        Args:
            uniforms: float64 uniforms ``(n,)`` (a tensor, moved to the device).
            stratified: One draw per stratum if true.

        Returns:
            int64 leaf indices ``(n,)`` on the device.
        """
        import torch

        u = _to(uniforms, self.device, torch.float64).reshape(-1)
        n = u.shape[0]
        total = self._nodes[self._root, 0]
        if not stratified:
            masses = u * total
        elif n:
            masses = (self.strata(n) + u) * (total / n)
        else:
            masses = u
        return self._descend(masses)

    def strata(self, n: int) -> Tensor:
        """``arange(n)`` as float64 on the device: the strata of a stratified draw of ``n``,
        made once per ``n`` (one op less per draw; a compiled caller makes it before
        compiling, so that the graph finds it)."""
        import torch

        i = self._strata.get(n)
        if i is None:
            i = self._strata[n] = torch.arange(n, dtype=torch.float64, device=self.device)
        return i

    def _descend(self, masses: Tensor) -> Tensor:
        """Leaf of each mass, exactly as :func:`~rlreplay.sampling.tree_kernels._descend_all`:
        a mass ``>= total`` (or NaN) is "at the end" (``inf``) from the start; at each level the
        child is the number ``k`` of running prefix sums ``<= mass``, and the mass goes down
        less ``p_(k-1)`` (nothing for ``k = 0``); when all 8 are passed (the mass is then at
        the end: ``inf``), the child is the rightmost one ``> 0``. One gather of the lines'
        descent rows per level (see ``__init__``)."""
        import torch

        n = masses.shape[0]
        total = self._nodes[self._root, 0]
        rest = torch.where(masses < total, masses, self._inf).unsqueeze(1)  # (n, 1)
        out: Tensor | None = None  # the root's line first: no gather
        for rows_of_level in self._level_rows:
            if out is None:
                rows = rows_of_level[:1].expand(n, _ROW)
            else:
                rows = rows_of_level.index_select(0, out)  # the lines of out's children
            count = (rows[:, 1:_LAST] <= rest).sum(1, keepdim=True)  # a prefix of the lanes
            at_end = count == _K
            rest = torch.where(at_end, self._inf, rest - rows.gather(1, count))
            child = torch.where(at_end, rows[:, _LAST:].to(torch.int64), count).view(-1)
            out = child if out is None else torch.add(child, out, alpha=_K)
        if out is None:  # a one-level tree: its only line is the root's
            return torch.zeros(n, dtype=torch.int64, device=self.device)
        return out


class TorchMinTree(_TorchSegmentTree):
    """A min tree on a torch device, node for node :class:`rlreplay.sampling.MinTree`'s."""

    _OP = _MIN
    _NUMPY = MinTree

    @property
    def min(self) -> Tensor:
        """Smallest leaf (``+inf`` when all are): a 0-d float64 tensor on the device."""
        return self._root_value()


class TorchMaxTree(_TorchSegmentTree):
    """A max tree on a torch device, node for node :class:`rlreplay.sampling.MaxTree`'s."""

    _OP = _MAX
    _NUMPY = MaxTree

    @property
    def max(self) -> Tensor:
        """Largest leaf (``-inf`` when all are): a 0-d float64 tensor on the device."""
        return self._root_value()
