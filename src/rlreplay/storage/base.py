"""The storage part's contract: what a buffer's writer, assembler, samplers and checkpoints may
ask of the object that holds its field data.

:class:`~rlreplay.storage.columns.Columns` (NumPy arrays on the ``memory``, ``memmap`` or
``shared`` backend) is the implementation; a storage over another array library implements the
same :class:`Storage` and passes the same contract suite.

Layout (every implementation). With ``E`` envs, ``C`` slots per env and ``F`` final records per
env:

* a *step column* per schema field, shape ``(E * C, *field.shape)`` and the field's dtype; env
  ``e``'s ring is rows ``e * C .. e * C + C - 1`` (a *slot* is a row number). Rings never
  overlap: a write to env ``e``'s slots changes no other env's rows.
* a *finals column* per observation field, shape ``(E * F, *field.shape)``: the final
  observation of an ended episode, at a *final position*; env ``e``'s records are rows
  ``e * F .. e * F + F - 1``. Only observation fields have one, so an observation that a later
  step stores is never stored twice.
* *derived columns*: per-step values the buffer computes (not given to ``add``), shape
  ``(E * C,)``.

Which slot or final position means which step is the episode index's business
(:class:`rlreplay.episodes.EpisodeIndex`); a storage knows rows, not steps, episodes or
priorities.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np

from rlreplay.spec.schema import Schema

__all__ = ["Storage"]

Array = np.ndarray[Any, Any]


@runtime_checkable
class Storage(Protocol):
    """Preallocated columns of one buffer's field data (see the module docstring for the layout).

    Invariants an implementation keeps:

    * a fresh storage reads as zeros everywhere;
    * what is written to a row is read back bit for bit (NaN payloads and signs of zero
      included) until that row is written again, and nothing else changes it;
    * the step columns never move: the arrays of :attr:`steps` (their addresses, which
      compiled writers and :attr:`prefetch_table` hold) stay the same objects for the storage's
      life, through writes, :meth:`grow_finals`, :meth:`set_finals_capacity`,
      :meth:`add_derived` and :meth:`load_state_dict`. Derived columns never move once added.
      Only the finals columns are reallocated (when their capacity changes);
    * the state is exactly :meth:`state_arrays` and :attr:`finals_capacity`: a fresh storage of
      the same schema, sizes and derived columns given :meth:`state_dict` reads back the same.
    """

    @property
    def schema(self) -> Schema:
        """The fields stored (one step column each; a finals column per observation field)."""
        ...

    @property
    def num_envs(self) -> int:
        """``E``, the number of per-env rings."""
        ...

    @property
    def env_capacity(self) -> int:
        """``C``, slots (rows) per env ring."""
        ...

    @property
    def finals_capacity(self) -> int:
        """``F``, final records per env (grows through :meth:`grow_finals`)."""
        ...

    @property
    def steps(self) -> Mapping[str, Array]:
        """Field name -> step column, shape ``(E * C, *field.shape)``, the field's dtype.

        Keys in schema order. Live arrays: indexing reads and item assignment writes the
        storage (the writer sets single flags, the assembler's kernels read whole columns).
        """
        ...

    @property
    def finals(self) -> Mapping[str, Array]:
        """Observation field name -> finals column, shape ``(E * F, *field.shape)`` (live).

        Keys: exactly the schema's observation fields, in schema order.
        """
        ...

    @property
    def derived(self) -> Mapping[str, Array]:
        """Derived column name -> column of shape ``(E * C,)`` (live; see :meth:`add_derived`)."""
        ...

    @property
    def prefetch_table(self) -> Array:
        """int64 ``(m, 2)``: ``(base address, row stride in bytes)`` of step columns whose rows a
        sampling kernel may prefetch (``m = 0`` is valid: nothing is prefetched).

        Each row names a step column's first byte and its row stride; the addresses stay valid
        for the storage's life (the step columns never move).
        """
        ...

    @property
    def nbytes(self) -> int:
        """Bytes allocated for stored data: the sum of ``nbytes`` over every step, finals and
        derived column, that is ``E*C * sum(field bytes) + E*F * sum(observation bytes) +
        sum(derived bytes)``."""
        ...

    def add_derived(self, name: str, dtype: np.dtype[Any], fill: float) -> Array:
        """Allocate a derived column ``name`` of shape ``(E * C,)`` and ``dtype``, every row
        ``fill``.

        Returns:
            The live column, also :attr:`derived` ``[name]``; it appears in :meth:`state_arrays`
            as ``derived/<name>`` and counts in :attr:`nbytes`.
        """
        ...

    def take(self, name: str, slots: Array) -> Array:
        """Rows ``slots`` of step column ``name``.

        Args:
            name: A schema field.
            slots: int64 slot numbers of any shape ``S`` (each in ``[0, E * C)``).

        Returns:
            A fresh array of shape ``S + field.shape`` and the field's dtype, bit-identical to
            the rows last written there; writing to it changes nothing stored.
        """
        ...

    def take_finals(self, name: str, positions: Array) -> Array:
        """Rows ``positions`` of the finals column of observation field ``name``.

        Args:
            name: An observation field.
            positions: int64 final positions of any shape ``S`` (each in ``[0, E * F)``).

        Returns:
            A fresh array of shape ``S + field.shape``, as :meth:`take`.
        """
        ...

    def write(self, slots: Array | int | slice, values: Mapping[str, Any]) -> None:
        """Store one row of every field at each slot.

        Args:
            slots: An int (one row: ``values[f]`` has shape ``field.shape``), a slice of rows,
                or int64 slot numbers ``(R,)``, distinct (``values[f]`` has shape
                ``(R, *field.shape)``).
            values: One entry per schema field, already validated and cast to the field's
                dtype (other entries, e.g. ``next_<obs>``, are ignored).

        After it, :meth:`take` of those slots returns ``values`` bit for bit; every other row
        (of this env and of every other env) is unchanged.
        """
        ...

    def write_finals(self, positions: Array, values: Mapping[str, Any], rows: Array | None) -> None:
        """Store final observations ``values["next_<name>"]`` of every observation field.

        Args:
            positions: int64 final positions ``(P,)``, distinct, one per ending row.
            values: A write's validated values; only the ``next_<name>`` entries are read.
            rows: ``None`` for one unbatched step (``values["next_<name>"]`` has shape
                ``field.shape`` and ``P == 1``), else which rows of the batched values end
                their episode: a bool mask or row numbers selecting ``P`` rows.

        After it, :meth:`take_finals` of ``positions`` returns those rows bit for bit; no other
        row of any column changes.
        """
        ...

    def grow_finals(self, new_capacity: int, old_pos: Array, new_pos: Array) -> None:
        """Reallocate the finals columns with ``new_capacity`` records per env, moving live rows.

        Args:
            new_capacity: The new ``F`` (larger than the current one).
            old_pos: int64 positions of the live records under the current ``F``.
            new_pos: Their positions under ``new_capacity`` (as the episode index moved them).

        After it, :attr:`finals_capacity` is ``new_capacity``, finals columns have
        ``E * new_capacity`` rows, row ``new_pos[i]`` holds what row ``old_pos[i]`` held, and
        the step and derived columns are the same arrays with the same contents.
        """
        ...

    def set_finals_capacity(self, finals_capacity: int) -> None:
        """Reallocate the finals columns empty (zeros) with ``finals_capacity`` records per env
        (before a checkpoint's arrays are loaded into them). Step and derived columns keep
        their arrays and contents."""
        ...

    def state_arrays(self) -> dict[str, Array]:
        """Every column, by checkpoint name: ``steps/<field>``, ``finals/<obs field>``,
        ``derived/<name>``.

        Live views, not copies: a checkpoint writer reads them and a checkpoint reader streams
        into them in place (after :meth:`set_finals_capacity`). The names, dtypes and shapes are
        a checkpoint's format and never change for a given schema.
        """
        ...

    def state_dict(self) -> dict[str, Any]:
        """The full state: ``{"finals_capacity": F, "arrays": {name: copy}}``.

        ``arrays`` has the keys of :meth:`state_arrays` and copies of their arrays: later writes
        do not change a state dict.
        """
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a :meth:`state_dict` of a storage with the same schema, sizes and derived
        columns.

        Step and derived columns are copied into in place (they never move); the finals columns
        are reallocated when the state's ``finals_capacity`` differs. Afterwards
        :meth:`state_arrays` equals ``state["arrays"]`` bit for bit.

        Raises:
            CheckpointError: A missing or unexpected array, another dtype or shape, or a
                ``finals_capacity`` that is not a positive int; checked before anything
                changes, so a refused state leaves the storage as it was.
        """
        ...
