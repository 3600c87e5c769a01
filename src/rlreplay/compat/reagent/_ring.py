"""The slot ring of the ReAgent buffer: counters, validity, slots <-> core ids (private).

ReAgent's (Dopamine's) buffer numbers its memory by *slots* of one ring of ``replay_capacity``
rows; ``add_count`` counts every row written (padding rows included) and the cursor is
``add_count % replay_capacity``. :class:`SlotRing` holds that bookkeeping and the public
counters ReAgent exposes; :class:`~.circular_replay_buffer.ReplayBuffer` builds on it. The
map between slots and the core's ids is ``slot_id[s]`` (the core id slot ``s`` holds, ``-1`` for
a padding row or a slot never written) and ``id_slot[i % capacity]`` (the slot holding core id
``i``, ``-1`` once released).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlreplay.compat.reagent import _slots
from rlreplay.compat.reagent._state import BufferState

__all__ = ["SlotRing"]

Array = np.ndarray[Any, Any]


class SlotRing(BufferState):
    """ReAgent's ring counters and validity marks over ``replay_capacity`` slots.

    Invariants: ``0 <= cursor() < replay_capacity``; :attr:`size` is the number of slots
    marked valid; ``slot_id`` and ``id_slot`` are inverse where both are set.
    """

    def _reset_ring(self) -> None:
        """Fresh bookkeeping: nothing written, no slot valid, the next add starts an episode."""
        cap = self._replay_capacity
        self._add_count = 0
        self._slot_id = np.full(cap, -1, np.int64)  # core id held by each slot
        self._id_slot = np.full(cap, -1, np.int64)  # slot of core id i, at i % cap
        self._is_valid = np.zeros(cap, np.bool_)
        # The terminal flag of each slot as 0.1's uint8 row holds it (the core keeps a bool).
        self._terminal_rows = np.zeros(cap, self._terminal_dtype)
        # The reward of each core id, at id % len (made at the first step: _slots.write_step),
        # for the n-step sums; None also where steps reached the core another way.
        self._id_reward = None
        self._id_reward_tracked = True  # the core holds no step yet: the ring can follow it
        self._num_valid_indices = 0
        # Elements whose loaded $store$ array was complex: 0.1 keeps it and warns on each read.
        self._complex_store = frozenset()
        # Slots the user made valid (set_index_valid_status), not add: they may hold no step
        # the core can draw, so seeded draws are exact over the valid slots while any is left.
        self._forced = np.zeros(cap, np.bool_)
        self._num_forced = 0
        self._num_transitions_in_current_episode = 0
        self._episode_ended = True  # the next add starts an episode (with padding rows)

    # ------------------------------------------------------------------ counters
    @property
    def add_count(self) -> Array:
        """Rows written so far, including the padding rows at episode starts.

        A 0-d int64 array, as ReAgent's ``add_count = np.array(0)``.
        """
        return np.array(self._add_count, np.int64)

    def cursor(self) -> int:
        """Index to the location where the next transition will be written."""
        return self._add_count % self._replay_capacity

    def is_empty(self) -> bool:
        """Is the Replay Buffer empty?"""
        return self._add_count == 0

    def is_full(self) -> bool:
        """Is the Replay Buffer full?"""
        return self._add_count >= self._replay_capacity

    @property
    def size(self) -> int:
        """Number of valid (sampleable) slots."""
        return self._num_valid_indices

    @property
    def invalid_range(self) -> Array:
        """Dopamine's slots around the cursor: ``cursor - n .. cursor + stack_size - 1``.

        Before the first add it is ReAgent's initial ``np.zeros(stack_size)`` (float64).
        """
        cap, n = self._replay_capacity, self._update_horizon
        if self._add_count == 0 or self._stack_size + n == 0:
            return np.zeros(self._stack_size + (n if self._add_count else 0))  # float64, as 0.1
        return (self.cursor() - n + np.arange(self._stack_size + n)) % cap

    # ------------------------------------------------------------------ validity
    def is_valid_transition(self, index: Any) -> Any:
        """Whether slot ``index`` is valid (sampleable): a ``np.bool_``, as in reagent 0.1.

        0.1 returns ``self._is_index_valid[index]``, NumPy's read of its bool array, and so
        does this: an int, NumPy integer or 0-d integer tensor gives a ``np.bool_`` (negative
        values count from the end); an integer array, list or tensor gives an array of them.

        Raises:
            IndexError: Not an integer index, or outside ``[-replay_capacity,
                replay_capacity)`` (also an :class:`rlreplay.InvalidIdError`).
        """
        idx = index.cpu().numpy() if hasattr(index, "cpu") else index
        try:
            return self._is_valid[idx]
        except IndexError as exc:
            raise _slots.SlotRangeError(f"index {index!r}: {exc}") from None

    def set_index_valid_status(self, idx: int, is_valid: bool) -> None:
        """Mark slot ``idx`` valid or not (for conditional sampling); keeps :attr:`size` right.

        ``idx`` is read as in :meth:`is_valid_transition`. As in reagent 0.1, a slot marked
        valid is sampled whatever it holds: its transition is 0.1's read of the slots (a
        padding row or a slot never written reads zeros; the window and the next state are
        the rows the ring holds after it, of whatever episode).
        """
        idx = _slots.slot_index(idx, self._replay_capacity)
        forced = bool(is_valid) and (bool(self._forced[idx]) or not self._is_valid[idx])
        self._mark(idx, is_valid)
        if forced:
            self._forced[idx] = True
            self._num_forced += 1

    def _mark(self, idx: int, is_valid: bool) -> None:
        """Set the validity of slot ``idx`` as ``add`` marks it (no longer a forced slot)."""
        was = bool(self._is_valid[idx])
        if is_valid and not was:
            self._num_valid_indices += 1
        elif was and not is_valid:
            self._num_valid_indices -= 1
        self._is_valid[idx] = bool(is_valid)
        if self._forced[idx]:
            self._forced[idx] = False
            self._num_forced -= 1

    # ------------------------------------------------------------------ slots and ids
    def _release(self, slot: int, *, for_step: bool = False) -> None:
        """Forget the step slot ``slot`` held (it is being overwritten).

        ``for_step``: a real step takes the slot next (its :meth:`_on_step_written` follows).
        """
        old = int(self._slot_id[slot])
        if old >= 0 and self._id_slot[old % self._replay_capacity] == slot:
            self._id_slot[old % self._replay_capacity] = -1

    def _as_slots(self, indices: Any) -> Array:
        """Slot numbers from a tensor/array/list of any shape, flattened to int64."""
        return _slots.as_slots(indices, self._replay_capacity)

    def _slots_of_ids(self, ids: Array) -> Array:
        """Slot of each core id, or -1 if no slot holds it any more."""
        return _slots.slots_of_ids(self._slot_id, self._id_slot, ids)
