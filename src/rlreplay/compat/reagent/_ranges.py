"""Dopamine's raw range readers of the ReAgent buffer (private to the ReAgent front-end).

reagent 0.1 keeps Dopamine's ``get_range``, ``get_observation_stack`` and
``get_terminal_stack``: they read consecutive *slots* of the ring, padding rows (zeros) and
rows of other episodes included, with Dopamine's assertions. :class:`RangeReaders` gives the
buffer those methods; a slot's row is read from the core through the slot's core id (zeros for
a padding row or a slot never written, where ReAgent's ``np.empty`` rows hold zeros or
whatever memory held).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from rlreplay.compat.reagent._assembly import core_name
from rlreplay.compat.reagent._state import BufferState, shape_type

if TYPE_CHECKING:
    from rlreplay import ReplayBuffer as CoreReplayBuffer

__all__ = ["RangeReaders", "slot_rows", "store"]

Array = np.ndarray[Any, Any]


def slot_rows(core: CoreReplayBuffer, slot_id: Array, element: shape_type, slots: Array) -> Array:
    """The stored rows of ``element`` at ``slots`` (zeros where a slot holds no step)."""
    ids = slot_id[slots]
    held = ids >= 0
    out: Array = np.zeros((slots.size, *element.shape), element.type)
    if held.any():
        name = "terminated" if element.name == "terminal" else core_name(element.name)
        out[held] = core.get_field(name, ids[held])
    return out


def store(buf: BufferState) -> dict[str, Array]:
    """reagent 0.1's ``_store``: element name -> ``(replay_capacity, *shape)`` rows by slot.

    Each slot holds the row 0.1 wrote there last: a step's values, zeros for a padding row,
    and zeros for a slot never written (0.1: ``np.empty`` memory). ``terminal`` holds the flag
    as 0.1's row of ``terminal_dtype`` stored it.
    """
    slots = np.arange(buf._replay_capacity)
    out = {}
    for e in buf.get_storage_signature():
        if e.name == "terminal":
            out[e.name] = buf._terminal_rows.copy()
        else:
            out[e.name] = slot_rows(buf._core, buf._slot_id, e, slots)
    return out


class RangeReaders(BufferState):
    """reagent 0.1's raw slot readers: ``get_range``, the stacks, ``_store``."""

    def get_range(self, array: Any, start_index: int, end_index: int) -> Any:
        """Returns the range of array at the index handling wraparound if necessary.

        As Dopamine's: rows ``start_index .. end_index - 1`` of ``array``, wrapping around
        ``replay_capacity``.

        Args:
            array: The array to read (indexed by slot on its first axis).
            start_index: First slot; a negative one wraps around.
            end_index: Exclusive end; one past ``replay_capacity`` wraps around.

        Returns:
            ``array`` rows, shape ``(end_index - start_index, *array.shape[1:])``.

        Raises:
            AssertionError: ``end_index <= start_index``, ``end_index < 0``,
                ``start_index >= replay_capacity``, or (buffer not full) a range past the
                cursor ("Index ... has not been added."), as Dopamine asserts.
        """
        cap = self._replay_capacity
        assert end_index > start_index, "end_index must be larger than start_index"
        assert end_index >= 0
        assert start_index < cap
        if not self.is_full():
            assert end_index <= self.cursor(), f"Index {start_index} has not been added."
        if start_index % cap < end_index % cap:  # Dopamine's fast slice read
            return array[start_index:end_index, ...]
        return array[[(start_index + i) % cap for i in range(end_index - start_index)], ...]

    def _slot_range(self, index: int) -> Array:
        """The slots of the stack ending at ``index`` (Dopamine's asserts through get_range)."""
        slots: Array = self.get_range(
            np.arange(self._replay_capacity), index - self._stack_size + 1, index + 1
        )
        return slots

    def _element(self, name: str) -> shape_type:
        return next(e for e in self.get_storage_signature() if e.name == name)

    def get_observation_stack(self, index: int) -> Array:
        """The ``stack_size`` observations of slots ``index - stack_size + 1 .. index``.

        Raw rows, as Dopamine reads them: padding rows are zeros, and nothing stops the stack
        at an episode start. Stack axis last: ``(*observation_shape, stack_size)``.
        """
        rows = slot_rows(
            self._core, self._slot_id, self._element("observation"), self._slot_range(index)
        )
        return np.moveaxis(rows, 0, -1)

    def get_terminal_stack(self, index: int) -> Array:
        """The terminal flags of slots ``index - stack_size + 1 .. index`` (stored dtype)."""
        out: Array = self._terminal_rows[self._slot_range(index)]
        return out

    @property
    def _store(self) -> dict[str, Array]:
        """reagent 0.1's private ``_store`` (Dopamine's): name -> rows indexed by slot.

        ``_store[name]`` has shape ``(replay_capacity, *shape)`` and row ``s`` is what slot
        ``s`` (``add_count % replay_capacity`` when written) holds, as in 0.1 after the same
        adds or ``load``: padding rows and slots never written read zeros (0.1: ``np.empty``
        memory there). Built on each access from the core, ``O(replay_capacity)``: a copy,
        so writing into it does not change the buffer. Empty before an inferring buffer's
        first add.
        """
        return store(self)
