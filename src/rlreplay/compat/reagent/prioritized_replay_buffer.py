"""Stand-in for ``reagent.replay_memory.prioritized_replay_buffer`` (Schaul et al., 2015).

:class:`PrioritizedReplayBuffer` is the ReAgent buffer of :mod:`.circular_replay_buffer` with
a priority per slot, over one :class:`rlreplay.PrioritizedReplayBuffer` configured as ReAgent
samples: ``alpha = 1`` (a priority is its sampling mass; agents raise their TD errors to a power
themselves), ``eps = 0``, no clipping, stratified draws. The priority of a slot is the core
priority of the step it holds; padding rows and slots never written have priority 0 and hold
none. When a slot is overwritten its old step's core priority is set to 0, so the core draws
only steps the ring still holds; a draw of a slot that is not valid is redrawn, up to
``max_sample_attempts`` times, as in ReAgent.

A step's priority goes to two trees, the core's (by id) and the slot-ordered one that
reproduces 0.1's draws. ``add`` defers both writes, for up to 16 steps, to the next read of
either tree (a draw, ``get_priority``, ``set_priority``, ``sum_tree``, a checkpoint): one core
update and one leaf write then cover them all, with the end state of one write per step. Only
priorities whose writes cannot fail wait (see ``_deferrable``); any other is written at once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, cast

import numpy as np

from rlreplay import CheckpointError, PriorityError, ShapeError
from rlreplay import PrioritizedReplayBuffer as CorePrioritizedReplayBuffer
from rlreplay.compat.reagent import _draws
from rlreplay.compat.reagent._assembly import _Batch
from rlreplay.compat.reagent._errors import IndexAssertionError, SlotRangeError
from rlreplay.compat.reagent._pickled import dumps_sum_tree, read_sum_tree_file
from rlreplay.compat.reagent.circular_replay_buffer import ReplayBuffer, ReplayElement, shape_type
from rlreplay.compat.reagent.sum_tree import SumTree

if TYPE_CHECKING:
    import torch

    from rlreplay import ReplayBuffer as CoreReplayBuffer

__all__ = ["PrioritizedReplayBuffer"]

Array = np.ndarray[Any, Any]

#: step priorities written together at most (see PrioritizedReplayBuffer._on_step_written)
_DEFERRED = 16
_FLOAT_MAX = float(np.finfo(np.float64).max)
#: a slot tree total up to this leaves room for _DEFERRED more masses within the core's bound
_TOTAL_BOUND = _FLOAT_MAX / 4


class PrioritizedReplayBuffer(ReplayBuffer):
    """ReAgent's prioritized replay buffer: slots drawn with probability ``p_i / sum_j p_j``.

    ``add`` takes one more argument, ``priority`` (last, or by name; ``None`` gives
    ``max_recorded_priority``). :meth:`sample_index_batch` draws stratified by priority among
    the steps the ring holds, redrawing draws whose slot is not valid; the law of each index is
    ``p_i / sum_{valid j} p_j``. :meth:`sample_transition_batch` adds
    ``sampling_probabilities``: as in ReAgent, the *priorities* of the sampled slots (``(B, 1)``
    float32), from which the agent computes its importance weights.

    Invariants: the priority of slot ``s`` is the core priority of the step ``s`` holds (0 for
    padding rows and unwritten slots); the core gives priority 0 to every step no slot holds.

    Cost: as :class:`~rlreplay.compat.reagent.circular_replay_buffer.ReplayBuffer` plus
    ``O(log capacity)`` per priority written (an ``add``'s written with up to 15 others'); a
    sample is ``O(B log capacity)`` draws.

    Args:
        observation_shape: As for ``ReplayBuffer``.
        stack_size: As for ``ReplayBuffer``.
        replay_capacity: As for ``ReplayBuffer``.
        batch_size: As for ``ReplayBuffer``.
        update_horizon: As for ``ReplayBuffer``.
        gamma: As for ``ReplayBuffer``.
        max_sample_attempts: Redraws allowed (over a whole batch) for draws of invalid slots.
        extra_storage_types: As for ``ReplayBuffer``.
        observation_dtype: As for ``ReplayBuffer``.
        action_shape: As for ``ReplayBuffer``.
        action_dtype: As for ``ReplayBuffer``.
        reward_shape: As for ``ReplayBuffer``.
        reward_dtype: As for ``ReplayBuffer``.
        seed: rlreplay extension, as for ``ReplayBuffer``.
        **kwargs: rlreplay extension: ``return_everything_as_stack`` and
            ``return_as_timeline_format`` (ReAgent's prioritized buffer lacks them).

    Example:
        >>> import numpy as np
        >>> from rlreplay.compat.reagent import PrioritizedReplayBuffer
        >>> buf = PrioritizedReplayBuffer((2,), 1, 100, 4, observation_dtype=np.float32, seed=0)
        >>> for t in range(10):
        ...     buf.add(np.full(2, t, np.float32), 0, 1.0, t == 9, float(t))
        >>> batch = buf.sample_transition_batch()
        >>> bool((batch.sampling_probabilities > 0).all())
        True
    """

    _prioritized: ClassVar[bool] = True
    _replaced_id: int  # core id of the step the slot being written held (see _release)
    _slot_tree_raw: SumTree  # slot priorities, deferred writes not applied (see _slot_tree)
    _pending: list[tuple[int, int, int, float]]  # deferred (slot, old id, new id, priority)
    _defer_steps: bool
    _defer_bound: float

    def __init__(
        self,
        observation_shape: tuple[int, ...] | int | None = None,
        stack_size: int = 1,
        replay_capacity: int = 10000,
        batch_size: int = 1,
        update_horizon: int = 1,
        gamma: float = 0.99,
        max_sample_attempts: int = 1000,
        extra_storage_types: list[shape_type] | None = None,
        observation_dtype: Any = None,
        action_shape: tuple[int, ...] | None = None,
        action_dtype: Any = None,
        reward_shape: tuple[int, ...] | None = None,
        reward_dtype: Any = None,
        *,
        seed: int | None = None,
        **kwargs: Any,
    ) -> None:
        self._max_recorded_priority = 1.0
        super().__init__(
            observation_shape,
            stack_size,
            replay_capacity,
            batch_size,
            update_horizon=update_horizon,
            gamma=gamma,
            max_sample_attempts=max_sample_attempts,
            extra_storage_types=extra_storage_types,
            observation_dtype=observation_dtype,
            action_shape=action_shape,
            action_dtype=action_dtype,
            reward_shape=reward_shape,
            reward_dtype=reward_dtype,
            seed=seed,
            **kwargs,
        )

    def _make_core(self) -> CoreReplayBuffer:
        return CorePrioritizedReplayBuffer(
            self._core_capacity(),
            self._core_fields(),
            alpha=1.0,
            beta=0.0,
            eps=0.0,
            initial_priority=1.0,
            stratified=True,
            **self._core_args(),
        )

    @property
    def _prio_core(self) -> CorePrioritizedReplayBuffer:
        """The core, with every deferred step priority written (:meth:`_flush_priorities`)."""
        self._flush_priorities()
        return cast(CorePrioritizedReplayBuffer, self._core)

    @property
    def _slot_tree(self) -> SumTree:
        """The slot-ordered tree, with every deferred step priority written."""
        self._flush_priorities()
        return self._slot_tree_raw

    # ------------------------------------------------------------------ signatures
    def get_add_args_signature(self) -> list[shape_type]:
        """The storage signature with an added ``priority`` (float32 scalar)."""
        return [*super().get_add_args_signature(), ReplayElement("priority", (), np.float32)]

    def _transition_specs(self, b: int) -> list[shape_type]:
        """The elements of ``ReplayBuffer`` plus ``sampling_probabilities`` (float32)."""
        return [
            *super()._transition_specs(b),
            ReplayElement("sampling_probabilities", (b,), np.dtype(np.float32)),
        ]

    def _add_kwargs(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        # A buffer that infers its elements takes the priority by name, if at all (else
        # max_recorded_priority, as for None).
        if self._inferring and "priority" not in kwargs:
            return {**kwargs, "priority": None}
        return kwargs

    # ------------------------------------------------------------------ priorities
    @property
    def sum_tree(self) -> _SlotPriorities:
        """ReAgent's ``sum_tree`` attribute: ``get``/``set`` by slot, ``max_recorded_priority``."""
        return _SlotPriorities(self)

    def get_priority(self, indices: Any) -> Array:
        """Fetches the priorities of slots; 0 for any slot not yet used (or a padding row).

        Indices are read as ReAgent reads its tree's leaves (``nodes[-1][index]``): negative
        ones count back from the end of the leaf level (a power of two ``>= replay_capacity``),
        and the padding leaves past the capacity read 0.

        Args:
            indices: Integer slots, any shape: a NumPy array of dtype ``int32`` (as ReAgent
                documents and asserts), an integer tensor (``batch.indices``) or a list.

        Returns:
            float32 array of the priorities, flattened.

        Raises:
            AssertionError: Not an array, a NumPy array whose dtype is not ``int32``
                ("Indices must be int32s, given: int64", as ReAgent), or not integers (also
                :class:`rlreplay.InvalidIdError`).
            IndexError: Outside the tree's leaves.
        """
        if np.ndim(indices.cpu() if hasattr(indices, "cpu") else indices) == 0:
            # ReAgent: assert indices.shape, "Indices must be an array."
            raise IndexAssertionError(f"Indices must be an array, got {indices!r}")
        _assert_int32(indices, "Indices must be int32s")
        return self._priorities_of(indices)

    def _priorities_of(self, indices: Any) -> Array:
        """:meth:`get_priority` of integer indices of any integer dtype (no dtype check)."""
        kind = _numpy(indices).dtype.kind
        if kind not in "iu" and hasattr(indices, "dtype"):  # 0.1 asserts the dtype, even empty
            raise IndexAssertionError(f"Indices must be integers, given: {indices.dtype}")
        leaves = self._as_slots(indices)
        out = np.zeros(leaves.size, np.float32)
        real = leaves < self._replay_capacity
        out[real] = self._slot_tree._leaves(leaves[real])
        return out

    def set_priority(self, indices: Any, priorities: Any) -> None:
        """Sets the priorities of slots (ReAgent does not exponentiate them: ``alpha = 1``).

        A slot that holds no step (a padding row, never written) keeps the value for
        :meth:`get_priority`, as ReAgent's tree leaf does, and is drawn with it once marked
        valid by hand (read as 0.1 reads it); the next row written there resets it.

        Args:
            indices: Integer slots in ``[0, replay_capacity)``, any shape: a NumPy array of
                dtype ``int32`` (as ReAgent documents and asserts), an integer tensor
                (``batch.indices``) or a list.
            priorities: One finite priority ``>= 0`` per slot; with duplicates the last wins.

        Raises:
            ValueError: A negative or non-finite priority (:class:`rlreplay.PriorityError`), or
                a count that differs from the number of slots.
            AssertionError: A NumPy array whose dtype is not ``int32`` ("Indices must be
                integers, given: int64", ReAgent's message), indices that are not integers,
                or a negative index (ReAgent's walk
                up its tree then fails its "Sum tree traversal failed" assertion, after
                writing; here nothing changes).
            IndexError: A padding leaf past ``replay_capacity`` (which ReAgent would then draw
                as a slot that does not exist) or an index outside the tree.

        As ReAgent walks the pairs in order, the first pair it refuses decides the error.
        """
        _assert_int32(indices, "Indices must be integers")
        raw = _numpy(indices).reshape(-1)
        if raw.dtype.kind not in "iu" and (raw.size or hasattr(indices, "dtype")):
            raise IndexAssertionError(f"Indices must be integers, given: {raw.dtype}")
        raw = raw.astype(np.int64)
        p = _numpy(priorities).astype(np.float64).reshape(-1)
        if p.size != raw.size:
            raise ShapeError(f"priorities: expected {raw.size} (one per index), got {p.size}")
        _refuse_priority_pairs(raw, p, self._replay_capacity)
        slots = raw  # every index is a slot in [0, replay_capacity) now
        ids = self._slot_id[slots]
        held = ids >= 0
        if held.size and held.all():
            self._prio_core.update_priorities(ids, p)
        elif held.any():
            self._prio_core.update_priorities(ids[held], p[held])
        # Every slot's priority, as ReAgent's tree leaves: a slot holding no step keeps its
        # priority there too (the core has no step for it), read by get_priority and drawn
        # from the slot tree if marked valid by hand.
        self._slot_tree._set_many(slots, p)
        if p.size:
            self._max_recorded_priority = max(self._max_recorded_priority, float(p.max()))

    def _priority_of(self, values: Sequence[Any]) -> float:
        given = values[-1]
        p = self._max_recorded_priority if given is None else float(_numpy(given))
        if not (math.isfinite(p) and p >= 0.0):
            raise PriorityError(f"priority: expected a finite number >= 0, got {given!r}")
        return p

    # ------------------------------------------------------------------ writing
    def _convert_step(self, values: Sequence[Any]) -> dict[str, Any]:
        self._priority_of(values)  # validated before anything is written
        return super()._convert_step(values)

    def _on_step_written(self, new_id: int, values: Sequence[Any]) -> None:
        p = self._priority_of(values)
        slot, old = self.cursor(), self._replaced_id
        self._replaced_id = -1
        if self._deferrable(p):
            # Written with the next read of either tree (or after _DEFERRED steps): one core
            # update and one leaf write for several steps, the same end state.
            self._pending.append((slot, old, new_id, p))
            self._max_recorded_priority = max(self._max_recorded_priority, p)
            if len(self._pending) >= _DEFERRED:
                self._flush_priorities()
            return
        self._flush_priorities()
        # The general sequence is: slot leaf 0 and the replaced step's core priority 0
        # (_release), then the new step's core priority, then its slot leaf. Its end state is
        # reached here with one core update and one leaf write; a call that raises (a priority
        # whose mass or total overflows) changes nothing, and the general sequence then runs
        # for its exact end state and error.
        ids, prios = (
            (np.array([old, new_id]), np.array([0.0, p]))
            if old >= 0
            else (np.array([new_id]), np.array([p]))
        )
        try:
            self._prio_core.update_priorities(ids, prios)
        except Exception:
            self._write_priority_general(slot, old, new_id, p)
            raise  # not reached: the general sequence raises too
        try:
            self._slot_tree._set_many(np.array([slot]), np.array([p]))
        except Exception:
            self._slot_tree._set_many(np.array([slot]), np.zeros(1))  # as _release left it
            raise
        self._max_recorded_priority = max(self._max_recorded_priority, p)

    def _deferrable(self, p: float) -> bool:
        """Whether the step priority ``p`` may wait for :meth:`_flush_priorities`.

        Only where the deferred writes cannot fail, so that they change nothing but the time
        of the writes: ``p`` within the core's bound on a mass (``float64 max / (2 *
        capacity)``, ``alpha = 1``), the slot tree's total far from overflowing, and a ring of
        more than ``4 * _DEFERRED`` slots, so that no deferred id leaves the core (or is
        written twice) before the writes.
        """
        return (
            self._defer_steps
            and p <= self._defer_bound
            and self._slot_tree_raw._tree.total <= _TOTAL_BOUND
        )

    def _flush_priorities(self) -> None:
        """Write the deferred step priorities: core ``old -> 0, new -> p``, slot leaf ``p``.

        The writes of each step in order, so the last write of an id or a leaf wins, as when
        each step wrote its own (see :meth:`_on_step_written`).
        """
        pending = self._pending
        if not pending:
            return
        self._pending = []
        ids: list[int] = []
        prios: list[float] = []
        for _, old, new_id, p in pending:
            if old >= 0:
                ids.append(old)
                prios.append(0.0)
            ids.append(new_id)
            prios.append(p)
        core = cast(CorePrioritizedReplayBuffer, self._core)
        core.update_priorities(np.array(ids, np.int64), np.array(prios, np.float64))
        slots = np.array([e[0] for e in pending], np.int64)
        self._slot_tree_raw._set_many(slots, np.array([e[3] for e in pending], np.float64))

    def _write_priority_general(self, slot: int, old: int, new_id: int, p: float) -> None:
        """The general sequence of a step's priority writes (see :meth:`_on_step_written`)."""
        self._slot_tree._set_many(np.array([slot]), np.zeros(1))
        if old >= 0:
            self._prio_core.update_priorities(np.array([old]), np.zeros(1))
        self._prio_core.update_priorities(np.array([new_id]), np.array([p]))
        self._slot_tree._set_many(np.array([slot]), np.array([p]))

    def _reset(self) -> None:
        super()._reset()
        # The slot priorities in slot order, as reagent 0.1's sum tree holds them: the draws
        # without seed= walk it with 0.1's query values (the core's tree is in id order), and
        # get_priority and checkpoints read it.
        self._slot_tree_raw = SumTree(self._replay_capacity)
        self._replaced_id = -1  # core id of the step the slot being written held (_release)
        # Step priorities whose writes wait for the next read: (slot, old id, new id, p).
        self._pending = []
        self._defer_steps = self._replay_capacity > 4 * _DEFERRED
        self._defer_bound = _FLOAT_MAX / (2 * self._core_capacity())

    def _release(self, slot: int, *, for_step: bool = False) -> None:
        if for_step:  # a new step takes the slot: _on_step_written writes both priorities
            self._replaced_id = int(self._slot_id[slot])
            super()._release(slot)
            return
        # a padding row takes the slot
        self._slot_tree._set_many(np.array([slot]), np.zeros(1))
        old = int(self._slot_id[slot])
        if old >= 0:
            # The core may still hold the step; it must never be drawn for this slot again.
            self._prio_core.update_priorities(np.array([old]), np.zeros(1))
        super()._release(slot)

    # ------------------------------------------------------------------ sampling
    def sample_transition_batch(self, batch_size: int | None = None, indices: Any = None) -> Any:
        """As :meth:`ReplayBuffer.sample_transition_batch`, plus ``sampling_probabilities``
        (the priorities of the slots, ``(B, 1)`` float32)."""
        self._flush_priorities()  # the core's draws (seed=) read its priorities
        return super().sample_transition_batch(batch_size=batch_size, indices=indices)

    def sample_index_batch(self, batch_size: int) -> torch.Tensor:
        """Returns a batch of valid indices sampled by priority (Schaul et al., 2015).

        Args:
            batch_size: Number of indices.

        Returns:
            1-D int64 tensor of slot indices.

        Raises:
            Exception: A ``RuntimeError`` if the batch was not constructed after
                ``max_sample_attempts`` redraws (or no valid slot has a priority ``> 0``).
        """
        self._flush_priorities()  # the core's draws (seed=) read its priorities
        return super().sample_index_batch(batch_size)

    def _global_draw(self, batch_size: int) -> Array:
        """Slots drawn as reagent 0.1 draws them: stratified, redraws (Python's ``random``)."""
        return _draws.prioritized(self, self._slot_tree, batch_size)

    def _forced_draw(self, batch_size: int) -> Array:
        """Seeded draws while a slot set valid by the user is valid: 0.1's draws over the
        slot tree (which holds the priorities of slots the core holds no step for), with
        query values from the buffer's own generator."""
        return _draws.prioritized(self, self._slot_tree, batch_size, self._rng)

    def _sample_exhausted(self, count: int, batch_size: int) -> Array:
        raise RuntimeError(
            f"Max sample attempts: Tried {self._max_sample_attempts} times but only sampled "
            f"{batch_size - count} valid indices. Batch size is {batch_size} (valid slots: "
            f"{self.size}; only valid slots with a priority > 0 can be drawn)"
        )

    def _transition_arrays(self, batch: _Batch) -> dict[str, Any]:
        out = super()._transition_arrays(batch)
        # 0.1: get_priority(transition.indices), the indices as given (a negative one reads
        # the tree's leaf level from its end).
        if batch.given is None:  # drawn slots, all in [0, replay_capacity)
            leaves = self._slot_tree._leaves(batch.slots)
            out["sampling_probabilities"] = leaves.astype(np.float32)
        else:
            out["sampling_probabilities"] = self._priorities_of(batch.given)
        return out

    # ------------------------------------------------------------------ checkpoints
    def _checkpoint_arrays(self) -> dict[str, Array | bytes]:
        arrays = super()._checkpoint_arrays()
        # What ReAgent writes here: its SumTree object, pickled (levels padded to a power of
        # two, max_recorded_priority), under ReAgent's class path so its load reads it back.
        tree = SumTree._from_leaves(self._slot_priorities(), self._max_recorded_priority)
        arrays["sum_tree"] = dumps_sum_tree(tree)
        return arrays

    def _slot_priorities(self) -> Array:
        """The priority of every slot, as ReAgent's tree leaves hold them (float64)."""
        return self._slot_tree._leaves(np.arange(self._replay_capacity))

    def _required_files(self) -> list[str]:
        return [*super()._required_files(), "sum_tree"]

    def _read_file(self, name: str, path: str) -> dict[str, Array]:
        if name != "sum_tree":
            return super()._read_file(name, path)
        # ReAgent's pickled SumTree, read with a restricted unpickler (or a plain array of
        # leaves, which earlier versions of this front-end wrote).
        leaves, top = read_sum_tree_file(path)
        out = {"sum_tree": leaves}
        if top is not None:
            out["max_recorded_priority"] = np.array(top, np.float64)
        return out

    def _check_loaded(
        self, data: dict[str, Array], valid: Array | None
    ) -> tuple[dict[str, Array], int]:
        leaves = data["sum_tree"]
        cap = self._replay_capacity
        # ReAgent's leaves are padded to a power of two; those past the capacity are no slot.
        if leaves.ndim != 1 or leaves.size < cap or leaves.dtype.kind not in "iuf":
            raise CheckpointError(
                f"sum_tree: expected at least {cap} priorities, got {leaves.dtype}{leaves.shape}"
            )
        data["sum_tree"] = leaves = leaves[:cap].astype(np.float64)
        if not (np.isfinite(leaves).all() and (leaves >= 0).all()):
            raise CheckpointError("sum_tree: priorities must be finite and >= 0")
        return super()._check_loaded(data, valid)

    def _replay_rows(self, rows: dict[str, Array], add_count: int, data: dict[str, Array]) -> None:
        self._max_recorded_priority = 1.0
        super()._replay_rows(rows, add_count, data)
        held = np.flatnonzero(self._slot_id >= 0)
        loose = np.flatnonzero(self._slot_id < 0)
        self._slot_tree._set_many(held, self._prio_core.get_priorities(self._slot_id[held]))
        self._slot_tree._set_many(loose, data["sum_tree"][loose])
        if "max_recorded_priority" in data:  # ReAgent's tree restores it as it was saved
            self._max_recorded_priority = float(data["max_recorded_priority"])

    def _loaded_value(
        self, rows: dict[str, Array], data: dict[str, Array], name: str, slot: int
    ) -> Any:
        if name == "priority":
            return float(data["sum_tree"][slot])
        return super()._loaded_value(rows, data, name, slot)


class _SlotPriorities:
    """A view of a prioritized buffer's priorities shaped like ReAgent's ``sum_tree``.

    ``get``/``set`` read and write slot priorities; ``nodes``, ``sample``,
    ``stratified_sample`` and ``_total_priority`` answer from a :class:`SumTree` of the
    current priorities (``O(replay_capacity)`` to build).
    """

    def __init__(self, buffer: PrioritizedReplayBuffer) -> None:
        self._buffer = buffer

    @property
    def max_recorded_priority(self) -> float:
        """The largest priority ever given (1.0 before any)."""
        return self._buffer._max_recorded_priority

    def get(self, node_index: int) -> float:
        """The priority of slot ``node_index`` (a ``np.float64``, read as ReAgent's
        ``nodes[-1][node_index]``: negative indices count back, padding leaves read 0)."""
        return self._buffer._slot_tree.get(node_index)

    def set(self, node_index: int, value: float) -> None:
        """Set the priority of slot ``node_index``."""
        self._buffer.set_priority([node_index], [value])

    def _total_priority(self) -> float:
        return float(self._tree().nodes[0][0])

    @property
    def nodes(self) -> list[Array]:
        """The tree's levels, root first, as ReAgent's ``nodes`` (fresh copies)."""
        return self._tree().nodes

    def sample(self, query_value: float | None = None) -> int:
        """A slot drawn with probability ``p_i / sum_j p_j`` (ReAgent's ``SumTree.sample``).

        As in ReAgent it may name a slot that is not a valid transition; the buffer's own
        :meth:`PrioritizedReplayBuffer.sample_index_batch` redraws those.
        """
        return self._tree().sample(query_value)

    def stratified_sample(self, batch_size: int) -> list[int]:
        """``batch_size`` slots, one per equal stratum of the total (ReAgent's method)."""
        return self._tree().stratified_sample(batch_size)

    def _tree(self) -> SumTree:
        # Built from the slot priorities on each call, O(replay_capacity): for inspection and
        # for code written against ReAgent's tree; the buffer samples from the core's tree.
        buf = self._buffer
        return SumTree._from_leaves(buf._slot_priorities(), buf._max_recorded_priority)


def _refuse_priority_pairs(raw: Array, p: Array, cap: int) -> None:
    """Raise for the first (index, priority) pair ReAgent's ``sum_tree.set`` refuses (or
    writes onto a padding leaf, deliberate difference 6); nothing is written before."""
    leaves = 1 << (cap - 1).bit_length()
    bad_value = ~(np.isfinite(p) & (p >= 0))
    outside = (raw < -leaves) | (raw >= leaves)
    problem = bad_value | outside | (raw < 0) | (raw >= cap)
    if not problem.any():
        return
    k = int(np.flatnonzero(problem)[0])
    if bad_value[k]:
        raise PriorityError(f"Sum tree values should be finite and nonnegative. Got {p[k]}")
    if outside[k]:
        raise SlotRangeError(f"index {raw[k]} is out of bounds for axis 0 with size {leaves}")
    if raw[k] < 0:
        raise IndexAssertionError(
            f"Sum tree traversal failed, final node index is not 0 (index {raw[k]})."
        )
    raise SlotRangeError(
        f"index {raw[k]} names no slot of the {cap}; a priority there would be drawn as a "
        "missing slot"
    )


def _assert_int32(indices: Any, message: str) -> None:
    """ReAgent's ``assert indices.dtype == np.int32`` for a NumPy array (or NumPy integer).

    Tensors (``batch.indices`` is an int64 one) and lists are read as integers instead.

    Raises:
        AssertionError: ``f"{message}, given: {indices.dtype}"`` (also
            :class:`rlreplay.InvalidIdError`).
    """
    if isinstance(indices, (np.ndarray, np.generic)) and indices.dtype != np.int32:
        raise IndexAssertionError(f"{message}, given: {indices.dtype}")


def _numpy(value: Any) -> Array:
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    out: Array = np.asarray(value)
    return out
