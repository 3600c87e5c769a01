"""The ReAgent buffer's state as its parts see it (private to the ReAgent front-end).

:class:`BufferState` declares, once, the attributes the buffer keeps and the hooks it gives.
The ring (``_ring``), the range readers (``_ranges``) and the checkpoint methods (``_persist``)
build on it, as does :class:`~.circular_replay_buffer.ReplayBuffer`; the helper modules
(``_slots``, ``_assembly``, ``_elements``, ``_checkpoint``, ...) take a ``BufferState``, so
none of them depends on the buffer's module. ``shape_type`` (ReAgent's ``ReplayElement``) and
:class:`Declared` are the element types they share.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import numpy as np

from rlreplay import ReplayBuffer as CoreReplayBuffer

__all__ = ["BufferState", "Declared", "ReplayElement", "shape_type"]

Array = np.ndarray[Any, Any]

# Named (and pickled) as ReAgent's, in the module of the buffer, which re-exports it.
shape_type = collections.namedtuple(
    "shape_type", ["name", "shape", "type"], module="rlreplay.compat.reagent.circular_replay_buffer"
)
#: ``ReplayElement(name, shape, type)``: one stored or returned element (ReAgent's alias).
ReplayElement = shape_type


class Declared(NamedTuple):
    """What the constructor declared; ``None`` for what is to be inferred."""

    shapes: dict[str, tuple[int, ...] | None]
    dtypes: dict[str, np.dtype[Any] | None]
    extras: list[tuple[str, tuple[int, ...], np.dtype[Any]]] | None


class BufferState:
    """The attributes and hooks of the ReAgent buffer (declarations only: no behaviour).

    Invariants are the buffer's (see :class:`~.circular_replay_buffer.ReplayBuffer`).
    """

    _prioritized: ClassVar[bool]

    # Options, fixed by the constructor.
    _replay_capacity: int
    _stack_size: int
    _update_horizon: int
    _batch_size: int
    _max_sample_attempts: int
    _gamma: float
    _return_everything_as_stack: bool
    _return_as_timeline_format: bool
    _seed: int | None  # None: reagent 0.1's draws on the global generators (_draws)
    _inferring: bool  # built without observation_shape: elements from the first add
    _declared: Declared

    # The elements, fixed by the constructor or (inferring) by the first add: _elements.setup.
    _observation_shape: tuple[int, ...]
    _observation_dtype: np.dtype[Any]
    _action_shape: tuple[int, ...]
    _action_dtype: np.dtype[Any]
    _reward_shape: tuple[int, ...]
    _reward_dtype: np.dtype[Any]
    _terminal_dtype: np.dtype[Any]
    _extra_storage_types: list[shape_type]
    _inferred: frozenset[str]  # elements whose shape and dtype the first add gave
    _state_shape: tuple[int, ...]
    _blank_obs: Array
    _batch_type: Any
    _row_bytes: int | None  # a batch row's bytes (_elements.batch_size_of), once known
    _initialized: bool  # False only while an inferring buffer awaits its first add
    _core: CoreReplayBuffer

    # The slot ring (_ring.SlotRing._reset_ring).
    _add_count: int
    _slot_id: Array
    _id_slot: Array
    _is_valid: Array
    _terminal_rows: Array
    _id_reward: Array | None
    _storage_signature: tuple[ReplayElement, ...] | None  # get_storage_signature's, kept
    _id_reward_tracked: bool
    _num_valid_indices: int
    _complex_store: frozenset[str]
    _num_forced: int
    _num_transitions_in_current_episode: int
    _episode_ended: bool

    if TYPE_CHECKING:  # given by the ring, the readers, the checkpoint methods and the buffer

        @property
        def invalid_range(self) -> Array: ...
        def cursor(self) -> int: ...
        def is_full(self) -> bool: ...
        def _mark(self, idx: int, is_valid: bool) -> None: ...
        def _release(self, slot: int, *, for_step: bool = False) -> None: ...
        def _reset(self) -> None: ...
        def get_storage_signature(self) -> list[shape_type]: ...
        def get_add_args_signature(self) -> list[shape_type]: ...
        def _transition_specs(self, b: int) -> list[shape_type]: ...
        def _reserved_names(self) -> set[str]: ...
        def _convert_step(self, values: Sequence[Any]) -> dict[str, Any]: ...
        def _on_step_written(self, new_id: int, values: Sequence[Any]) -> None: ...
        def _global_draw(self, batch_size: int) -> Array: ...
        def _forced_draw(self, batch_size: int) -> Array: ...
        def _sample_exhausted(self, count: int, batch_size: int) -> Array: ...
        def _required_files(self) -> list[str]: ...
        def _read_file(self, name: str, path: str) -> dict[str, Array]: ...
        def _check_loaded(
            self, data: dict[str, Array], valid: Array | None
        ) -> tuple[dict[str, Array], int]: ...
        def _replay_rows(
            self, rows: dict[str, Array], add_count: int, data: dict[str, Array]
        ) -> None: ...
        def _loaded_value(
            self, rows: dict[str, Array], data: dict[str, Array], name: str, slot: int
        ) -> Any: ...
