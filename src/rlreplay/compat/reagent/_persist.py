"""``save`` and ``load`` of the ReAgent buffer, in Dopamine's file layout (private).

:class:`CheckpointFiles` gives :class:`~.circular_replay_buffer.ReplayBuffer` its checkpoint
methods and the hooks the prioritized buffer overrides; the file handling itself is in
``_checkpoint``.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from rlreplay.compat.reagent import _checkpoint
from rlreplay.compat.reagent._checkpoint import STORE_FILENAME_PREFIX
from rlreplay.compat.reagent._state import BufferState

__all__ = ["CheckpointFiles"]

Array = np.ndarray[Any, Any]


class CheckpointFiles(BufferState):
    """Dopamine's ``save``/``load`` over the buffer's slots (mixed into the ReAgent buffer)."""

    def _checkpoint_arrays(self) -> dict[str, Array | bytes]:
        """Attribute name -> array, in Dopamine's layout (store arrays per slot, scalars)."""
        return _checkpoint.store_arrays(self)

    def _read_file(self, name: str, path: str) -> dict[str, Array]:
        """Hook: the arrays a checkpoint file of attribute ``name`` holds (a plain array)."""
        return {name: _checkpoint.read_array(path)}

    def _required_files(self) -> list[str]:
        names = [STORE_FILENAME_PREFIX + e.name for e in self.get_storage_signature()]
        return [*names, "add_count", "invalid_range"]  # every file 0.1 requires

    def save(self, checkpoint_dir: str | os.PathLike[str], iteration_number: int) -> None:
        """Save the buffer as one gzipped ``.npy`` file per attribute (Dopamine's layout).

        Files, for iteration ``N``: ``$store$_<element>_ckpt.N.gz`` per storage element (one
        row per slot, padding rows zero), ``add_count_ckpt.N.gz``, ``invalid_range_ckpt.N.gz``
        ``_is_valid_ckpt.N.gz`` (the validity mask, which ReAgent does not save) and
        ``_is_padding_ckpt.N.gz`` (the slots holding padding rows, ditto). Arrays
        only, written with ``allow_pickle=False``; each file is written to a temporary name
        and renamed. Public attributes a user attached (``buffer.x = ...``) are saved as
        ReAgent saves them, ``x_ckpt.N.gz``: an array without pickle, anything else pickled.
        The files of iteration ``N - 4`` are deleted, as in Dopamine. A missing
        ``checkpoint_dir`` is created.

        Args:
            checkpoint_dir: Directory of the checkpoint files.
            iteration_number: Suffix of the file names.
        """
        iteration_number = int(iteration_number)
        os.makedirs(checkpoint_dir, exist_ok=True)
        files = {**_checkpoint.attribute_files(self), **self._checkpoint_arrays()}
        _checkpoint.write_arrays(checkpoint_dir, iteration_number, files)

    def load(self, checkpoint_dir: str | os.PathLike[str], suffix: Any) -> None:
        """Restore the buffer from the files :meth:`save` (or ReAgent) wrote.

        The rows are replayed into a fresh core in ring order: the rows after a terminal (and
        at the very start) are padding, and validity is marked as :meth:`add` marks it. The
        oldest rows of a wrapped ring are padding as the ``_is_padding`` file says (without
        it, as ReAgent's checkpoints are: the leading all-zero rows, at most
        ``stack_size - 1``). The
        optional ``_is_valid`` file then restores validity exactly (a ReAgent checkpoint has
        none). Sampling restarts from the buffer's seed. A buffer that infers its elements
        and has had no add yet takes them from the checkpoint's ``$store$_<name>`` files.
        Every public attribute the buffer has now is restored from its file, as ReAgent does
        (an array as an array, anything else unpickled with a restricted unpickler: builtin
        values, containers and NumPy arrays only).

        Args:
            checkpoint_dir: Directory of the checkpoint files.
            suffix: The iteration number used when saving.

        Raises:
            NotFoundError: If not all expected files are found in the directory.
            rlreplay.CheckpointError: A file is not a plain array (e.g. pickled) or has the
                wrong shape or dtype, or an attribute's pickle names a refused class.
        """
        before = dict(self.__dict__)  # _reset() replaces every stateful part, never mutates one
        try:
            attributes = _checkpoint.read_attributes(self, checkpoint_dir, suffix)
            if not self._initialized:
                _checkpoint.initialize_from_files(self, checkpoint_dir, suffix)
            valid = _checkpoint.load_files(self, checkpoint_dir, suffix)
            self.__dict__.update(attributes)
        except Exception:
            self.__dict__.update(before)  # a failed load changes nothing
            raise
        if valid is not None:
            self._is_valid[:] = valid
            self._num_valid_indices = int(valid.sum())

    def _check_loaded(
        self, data: dict[str, Array], valid: Array | None
    ) -> tuple[dict[str, Array], int]:
        return _checkpoint.check_rows(
            self.get_storage_signature(), self._replay_capacity, data, valid
        )

    def _replay_rows(self, rows: dict[str, Array], add_count: int, data: dict[str, Array]) -> None:
        """Rebuild the core and the slot bookkeeping from per-slot rows, oldest first."""
        _checkpoint.replay_rows(self, rows, add_count, data)

    def _loaded_value(
        self, rows: dict[str, Array], data: dict[str, Array], name: str, slot: int
    ) -> Any:
        return rows[name][slot]
