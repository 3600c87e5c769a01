"""The stored data: one preallocated column per field, plus final observations of ended episodes.

Layout: a column of field ``f`` has shape ``(E * C, *f.shape)``; env ``e``'s ring occupies rows
``e*C .. e*C + C - 1``. Each observation field also has a *finals* column of shape
``(E * F, *f.shape)`` holding the final observation of each stored episode that ended (the
observation after its last step, which no later step stores). Every observation is thus stored
exactly once. Which row means what is the episode index's business, not this module's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rlreplay.errors import CheckpointError
from rlreplay.spec.schema import Schema
from rlreplay.storage.backends import Backend

__all__ = ["Columns", "row_items"]

Array = np.ndarray[Any, Any]


def row_items(col: Array) -> Array:
    """A 1-D view of ``col`` whose items are its whole rows (opaque bytes); ``col`` itself if it
    is 1-D (or its rows are empty).

    Gathering rows through it (:meth:`Columns.take`) is one 1-D fancy index of fixed-size
    items: for small rows (``float32[4]``) several times faster than NumPy's n-d fancy
    indexing, which copies row by row through its general path.
    """
    row_bytes = col.dtype.itemsize * int(np.prod(col.shape[1:]))
    if col.ndim == 1 or row_bytes == 0 or not col.flags.c_contiguous:
        return col
    base = np.asarray(col)  # a memmap's buffer, without the subclass
    items: Array = base.reshape(base.shape[0], -1).view(np.dtype((np.void, row_bytes)))[:, 0]
    return items


def _take(items: Array, col: Array, rows: Array) -> Array:
    out: Array = items[rows]
    if items is not col:  # rows gathered as opaque items: see them as the column's again
        out = out.view(col.dtype).reshape(rows.shape + col.shape[1:])
    return out


class Columns:
    """Per-field column arrays of one buffer (a :class:`rlreplay.storage.Storage`).

    Args:
        schema: The buffer's fields.
        num_envs: ``E``.
        env_capacity: ``C``, rows per env.
        finals_capacity: ``F``, final-observation rows per env.
        backend: Where the arrays live.
    """

    def __init__(
        self,
        schema: Schema,
        num_envs: int,
        env_capacity: int,
        finals_capacity: int,
        backend: Backend,
    ) -> None:
        self.schema = schema
        self.num_envs = num_envs
        self.env_capacity = env_capacity
        self.finals_capacity = finals_capacity
        self.backend = backend
        rows = num_envs * env_capacity
        self.steps: dict[str, Array] = {
            name: backend.allocate(name, (rows, *f.shape), f.dtype)
            for name, f in schema.fields.items()
        }
        self.finals: dict[str, Array] = {
            name: self._alloc_finals(name, finals_capacity) for name in schema.observation_names
        }
        # Per-step values the buffer computes (not given to add), e.g. discounted_return.
        self.derived: dict[str, Array] = {}
        self._derived_fill: dict[str, float] = {}
        self._step_items = {name: row_items(col) for name, col in self.steps.items()}
        # (address, row bytes) of each step column whose rows span at most 4 cache lines: what
        # a sampling kernel prefetches for a batch (see assemble._window_kernel). The step
        # columns never move, so their addresses stay valid for the buffer's life.
        self.prefetch_table = np.array(
            [
                (col.ctypes.data, col.strides[0])
                for col in self.steps.values()
                if col.flags.c_contiguous and col.strides[0] <= 256
            ],
            np.int64,
        ).reshape(-1, 2)
        self._final_items = {name: row_items(col) for name, col in self.finals.items()}

    def add_derived(self, name: str, dtype: np.dtype[Any], fill: float) -> Array:
        """Allocate a computed per-step column, filled with ``fill``."""
        col = self.backend.allocate(f"derived-{name}", (self.num_envs * self.env_capacity,), dtype)
        col[...] = fill
        self.derived[name] = col
        self._derived_fill[name] = fill
        return col

    def _alloc_finals(self, name: str, finals_capacity: int) -> Array:
        f = self.schema.fields[name]
        return self.backend.allocate(
            f"final-{name}", (self.num_envs * finals_capacity, *f.shape), f.dtype
        )

    @property
    def nbytes(self) -> int:
        """Bytes allocated for stored data."""
        arrays = [*self.steps.values(), *self.finals.values(), *self.derived.values()]
        return sum(a.nbytes for a in arrays)

    def take(self, name: str, slots: Array) -> Array:
        """``steps[name][slots]``, a fresh array of shape ``slots.shape + field shape``."""
        return _take(self._step_items[name], self.steps[name], slots)

    def take_finals(self, name: str, positions: Array) -> Array:
        """``finals[name][positions]``, a fresh array."""
        return _take(self._final_items[name], self.finals[name], positions)

    def write(self, slots: Array | int | slice, values: Mapping[str, Any]) -> None:
        """Store validated ``values`` (one entry per field) at ``slots`` (or a slice of rows)."""
        for name, col in self.steps.items():
            col[slots] = values[name]

    def write_finals(self, positions: Array, values: Mapping[str, Any], rows: Array | None) -> None:
        """Store final observations ``next_<name>`` at final ``positions``.

        Args:
            positions: Final-record positions, one per ending step.
            values: The call's validated values (``next_<name>`` entries are read).
            rows: Which rows of the call's values end their episode (a bool mask or row
                numbers; ``None`` for a single, unbatched step).
        """
        for name, col in self.finals.items():
            v = values["next_" + name]
            col[positions] = v if rows is None else np.asarray(v)[rows]

    def grow_finals(self, new_capacity: int, old_pos: Array, new_pos: Array) -> None:
        """Reallocate the finals columns with ``new_capacity`` rows per env, moving live rows."""
        for name, old in list(self.finals.items()):
            # A memmap backend unlinks the old file on reallocation; the mapping stays readable
            # until `old` is dropped, so the copy below is safe on both backends.
            fresh = self._alloc_finals(name, new_capacity)
            fresh[new_pos] = old[old_pos]
            self.finals[name] = fresh
            self._final_items[name] = row_items(fresh)
        self.finals_capacity = new_capacity

    def set_finals_capacity(self, finals_capacity: int) -> None:
        """Reallocate empty finals columns (before loading a checkpoint into them)."""
        self.finals = {
            name: self._alloc_finals(name, finals_capacity)
            for name in self.schema.observation_names
        }
        self._final_items = {name: row_items(col) for name, col in self.finals.items()}
        self.finals_capacity = finals_capacity

    def state_arrays(self) -> dict[str, Array]:
        """Every column (live views, for checkpoints)."""
        out = {f"steps/{k}": v for k, v in self.steps.items()}
        out.update({f"finals/{k}": v for k, v in self.finals.items()})
        out.update({f"derived/{k}": v for k, v in self.derived.items()})
        return out

    def state_rows(self) -> dict[str, tuple[str, Any]]:
        """Which of :meth:`state_arrays` are per slot (``"slots"``: step and derived columns)
        or per final record (``"finals"``), each with the value a fresh row holds: a
        checkpoint holds only the rows that hold data."""
        out: dict[str, tuple[str, Any]] = {f"steps/{k}": ("slots", 0) for k in self.steps}
        out.update({f"finals/{k}": ("finals", 0) for k in self.finals})
        out.update({f"derived/{k}": ("slots", self._derived_fill[k]) for k in self.derived})
        return out

    def state_dict(self) -> dict[str, Any]:
        """``{"finals_capacity": F, "arrays": {name: copy}}``, the arrays of
        :meth:`state_arrays` copied (later writes leave it unchanged)."""
        arrays = {k: np.array(v) for k, v in self.state_arrays().items()}
        return {"finals_capacity": self.finals_capacity, "arrays": arrays}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a :meth:`state_dict` of columns with the same schema, sizes and derived
        columns: step and derived columns are copied into in place, finals columns reallocated
        first if the state's capacity differs.

        Raises:
            CheckpointError: A state without ``finals_capacity`` and ``arrays``, a capacity that
                is not a positive int, a missing or unexpected array, or one of another dtype
                or shape. Checked before anything changes: the columns are then unchanged.
        """
        if not isinstance(state, Mapping) or set(state) != {"finals_capacity", "arrays"}:
            keys = sorted(state) if isinstance(state, Mapping) else type(state).__name__
            raise CheckpointError(
                f"columns: expected a state_dict() ({{'finals_capacity', 'arrays'}}), got {keys}"
            )
        finals, arrays = state["finals_capacity"], state["arrays"]
        if isinstance(finals, bool) or not isinstance(finals, int | np.integer) or finals < 1:
            raise CheckpointError(
                f"columns: finals_capacity must be a positive int, got {finals!r}"
            )
        finals = int(finals)
        dest = self.state_arrays()
        if not isinstance(arrays, Mapping) or set(arrays) != set(dest):
            names = set(arrays) if isinstance(arrays, Mapping) else set()
            raise CheckpointError(
                f"columns: arrays {sorted(set(dest) - names)} are missing and "
                f"{sorted(names - set(dest))} unexpected; give a state_dict() of columns with "
                "this schema and these derived columns"
            )
        for name, arr in arrays.items():
            want = dest[name].shape
            if name.startswith("finals/"):  # sized by the state's finals capacity
                want = (self.num_envs * finals, *want[1:])
            fits = isinstance(arr, np.ndarray) and arr.dtype == dest[name].dtype
            if not fits or arr.shape != want:
                got = (arr.dtype, arr.shape) if isinstance(arr, np.ndarray) else type(arr).__name__
                raise CheckpointError(
                    f"columns: array {name!r} must be a {dest[name].dtype} ndarray of shape "
                    f"{want}, got {got}"
                )
        if finals != self.finals_capacity:
            self.set_finals_capacity(finals)
            dest = self.state_arrays()
        for name, arr in arrays.items():
            dest[name][...] = arr
