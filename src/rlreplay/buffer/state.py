"""State of a replay buffer: state dicts and checkpoints (``state_dict``, ``save``, ...).

:class:`BufferState`, a part of :class:`rlreplay.ReplayBuffer`. The state is the
configuration, a few scalars (``meta``: the episode index's, the RNG state, the sampler's and
the rate limiter's) and live views of every part's arrays (the index's, the columns' and the
sampler's); each part gives and takes its own (``state_arrays``, ``load_meta``,
``after_load``), this part puts them together. Loading a checkpoint file is
:func:`rlreplay.load` (:mod:`rlreplay.buffer.loading`, which knows the buffer classes).

A state dict holds every array whole. A checkpoint file (format 2) holds of each per-slot
array (columns, the index's slot records, priorities) only the rows of stored steps, env by
env, oldest first, and of each per-final-record array only the live records: an empty buffer's
file is a few kilobytes whatever its capacity. The index's per-env counters, written first,
say which rows those are (:meth:`BufferState.file_arrays`, :meth:`BufferState.file_destination`);
the rows a file leaves out are read back as a fresh buffer has them, rows that nothing reads
before a write sets them. Format 1 files (rlreplay 0.1.0) hold every array whole.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from rlreplay.buffer.pacing import Pacing
from rlreplay.buffer.sync import Sync
from rlreplay.checkpoint.file import Rows, write_checkpoint
from rlreplay.episodes.index import EpisodeIndex
from rlreplay.errors import CheckpointError
from rlreplay.sampling.base import Sampler
from rlreplay.storage import Columns
from rlreplay.storage.backends import Backend

__all__ = ["BufferState"]

Array = np.ndarray[Any, Any]


class BufferState:
    """The state of one buffer: the union of its parts' states (see the module docstring)."""

    def __init__(
        self,
        index: EpisodeIndex,
        cols: Columns,
        sampler: Sampler,
        rng: np.random.Generator,
        sync: Sync,
        pacing: Pacing,
        backend: Backend,
        config: Callable[[], dict[str, Any]],
        owner: str,
    ) -> None:
        self.index = index
        self.cols = cols
        self.sampler = sampler
        self.rng = rng
        self.sync = sync
        self.pacing = pacing
        self.backend = backend
        self.config = config  # the buffer's configuration (JSON-able)
        self.owner = owner  # the buffer's class name

    def meta(self) -> dict[str, Any]:
        """Scalars of the state (JSON-able): the index's, the generator's, the sampler's and
        the rate limiter's."""
        meta = {
            "finals_capacity": self.index.finals_capacity,
            "rng": self.rng.bit_generator.state,
            **self.sampler.state_meta(),
        }
        if self.pacing.limiter is not None:
            meta["rate_limiter"] = self.pacing.counts()
        return meta

    def arrays(self) -> dict[str, Array]:
        """Arrays of the state (live views): the index's, the columns' and the sampler's."""
        out = {f"index/{k}": v for k, v in self.index.state_arrays().items()}
        out.update({f"columns/{k}": v for k, v in self.cols.state_arrays().items()})
        out.update(self.sampler.state_arrays())
        return out

    def row_kinds(self) -> dict[str, tuple[str | int, Any]]:
        """Per array of :meth:`arrays` whose rows do not all hold state: which do
        (``"slots"``: those of stored steps; ``"finals"``: those of live final records; ``n``:
        the first ``n``) and the value the others hold in a fresh buffer."""
        out: dict[str, tuple[str | int, Any]] = {
            f"index/{k}": v for k, v in self.index.state_rows().items()
        }
        out.update({f"columns/{k}": v for k, v in self.cols.state_rows().items()})
        sampler_rows = getattr(self.sampler, "state_rows", None)  # optional (see Sampler)
        if sampler_rows is not None:
            out.update(sampler_rows())
        return out

    def runs(self) -> dict[str, Array]:
        """Row ranges holding state: ``"slots"`` of stored steps, ``"finals"`` of live records."""
        return {"slots": self.index.stored_runs(), "finals": self.index.live_final_runs()}

    def file_arrays(self) -> dict[str, Array | Rows]:
        """The arrays as a checkpoint file holds them (live views, no copies): per-slot ones
        only the rows of stored steps, per-final-record ones only the live records (env by env,
        oldest first), each as :class:`~rlreplay.checkpoint.file.Rows` of the live array."""
        arrays = self.arrays()  # first: it settles the index
        kinds, runs = self.row_kinds(), self.runs()
        return {
            name: arr if name not in kinds else _rows(arr, kinds[name][0], runs)
            for name, arr in arrays.items()
        }

    def file_destination(
        self, version: int
    ) -> Callable[[str, np.dtype[Any], tuple[int, ...]], Array | Rows]:
        """Where a file's arrays go, for :meth:`CheckpointReader.read_into` (after
        :meth:`load_meta`): the live arrays, or for a format-2 file the rows of them it holds,
        found from the index's counters, which the file holds first.

        Raises (when called):
            CheckpointError: An array this buffer does not have, a partial array before the
                index's counters, or counters that describe no rings.
        """
        dest = self.arrays()
        kinds = self.row_kinds() if version >= 2 else {}
        seen: set[str] = set()
        runs: dict[str, Array] = {}

        def destination(name: str, dtype: np.dtype[Any], shape: tuple[int, ...]) -> Array | Rows:
            if name not in dest:
                raise CheckpointError(f"checkpoint: unexpected array {name!r}")
            kind = kinds.get(name)
            seen.add(name)
            if kind is None:
                return dest[name]
            if not runs:
                if "index/env" not in seen:
                    raise CheckpointError(
                        f"checkpoint: array {name!r} comes before index/env, which says "
                        "which of its rows the file holds"
                    )
                runs.update(self.index.loaded_runs())
            return _rows(dest[name], kind[0], runs)

        return destination

    def load_meta(self, meta: Mapping[str, Any]) -> None:
        """Prepare for a state's arrays (resize what they size) and restore its scalars."""
        self.pacing.restore(meta.get("rate_limiter"))  # first: it refuses while inserting
        finals = int(meta["finals_capacity"])
        self.index.set_finals_capacity(finals)
        self.cols.set_finals_capacity(finals)
        self.rng.bit_generator.state = meta["rng"]
        self.sampler.load_meta(meta)

    def after_load(self) -> None:
        """Rebuild what is derived from the state after its arrays were restored in place.

        Called at the end of :meth:`load_state_dict` and of loading a checkpoint: the index's
        tables are checked, the rate limiter resized and the sampler rebuilds what it derives
        (segment trees from priorities).
        """
        steps = self.cols.steps  # CheckpointError for tables no writes produce:
        self.index.check_loaded(steps["terminated"], steps["truncated"])
        self.pacing.resized()  # the rate limiter's size is the restored sampleable count
        self.sampler.after_load(self.index)

    def state_dict(self) -> dict[str, Any]:
        """The full state: ``{"class", "config", "meta", "arrays"}`` (arrays are copies).

        Rows that hold no state (slots of steps no longer stored, dead final records) show
        the value a fresh buffer has there, as a checkpoint reads back: buffers that hold the
        same steps, episodes, priorities and generator state have equal state dicts.
        """
        with self.sync.lock:
            arrays = {k: np.array(v) for k, v in self.arrays().items()}
            kinds, runs = self.row_kinds(), self.runs()
            for name, (kind, fill) in kinds.items():
                arr = arrays[name]
                stale = np.ones(arr.shape[0], np.bool_)
                for start, stop in _rows(arr, kind, runs).runs.tolist():
                    stale[start:stop] = False
                arr[stale] = fill
            return {
                "class": self.owner,
                "config": self.config(),
                "meta": self.meta(),
                "arrays": arrays,
            }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a :meth:`state_dict` of a buffer with the same configuration.

        All or nothing: a state that is refused leaves the buffer exactly as it was (contents,
        cursors, episodes, priorities, RNG and rate-limiter counters), so it goes on sampling
        the same draws. The form (keys, array names, dtypes, shapes) is checked before
        anything changes; what only the installed state can show (its meaning, checked as
        :func:`rlreplay.load` checks a file's) is checked after it is installed, and a refusal
        then puts back a copy taken before. Cost: one copy of the buffer's arrays while it
        loads.

        Args:
            state: A :meth:`state_dict` (``{"class", "config", "meta", "arrays"}``).

        Raises:
            CheckpointError: The configuration differs from this buffer's, an array is
                missing, unexpected or of another dtype or shape, or the state is one no
                sequence of calls produces (naming what is wrong). The buffer is unchanged.
        """
        with self.sync.lock:
            try:
                meta, arrays = self.checked_form(state)
            except CheckpointError:
                raise
            except Exception as exc:  # a KeyError, TypeError ... of a malformed state
                raise CheckpointError(
                    f"load_state_dict: malformed state ({type(exc).__name__}: {exc}); expected "
                    "a state_dict() of a buffer with this configuration"
                ) from None
            before = copy.deepcopy(self.meta())
            kept = {k: np.array(v) for k, v in self.arrays().items()}
            try:
                self.install(meta, arrays)
            except BaseException as exc:
                self.install(before, kept)  # what it held: a state that passes every check
                if isinstance(exc, Exception) and not isinstance(exc, CheckpointError):
                    raise CheckpointError(
                        f"load_state_dict: inconsistent state ({type(exc).__name__}: {exc}); "
                        "the buffer is unchanged"
                    ) from exc
                raise

    def checked_form(self, state: Mapping[str, Any]) -> tuple[Mapping[str, Any], dict[str, Any]]:
        """``(meta, arrays)`` of ``state`` if its form fits this buffer (nothing is changed)."""
        # Where batches go (as_/device) is this buffer's choice, not part of the data.
        theirs, mine = (
            {k: v for k, v in c.items() if k not in ("as_", "device")}
            for c in (state["config"], self.config())
        )
        if theirs != mine:
            raise CheckpointError(
                "load_state_dict: the state's configuration differs from this buffer's: "
                f"{state['config']} != {self.config()}"
            )
        meta, arrays = state["meta"], dict(state["arrays"])
        if not isinstance(meta, Mapping):
            raise CheckpointError(f"load_state_dict: meta must be a mapping, got {meta!r}")
        expected = self.arrays()
        if set(arrays) != set(expected):
            raise CheckpointError(
                f"load_state_dict: arrays {sorted(set(expected) - set(arrays))} are missing and "
                f"{sorted(set(arrays) - set(expected))} unexpected"
            )
        for name, arr in arrays.items():
            dest = expected[name]
            if not isinstance(arr, np.ndarray) or arr.dtype != dest.dtype:
                got = type(arr).__name__ if not isinstance(arr, np.ndarray) else arr.dtype
                raise CheckpointError(
                    f"load_state_dict: array {name!r} must be a {dest.dtype} ndarray, got {got}"
                )
            # Arrays sized by the number of final records follow meta's finals_capacity.
            if arr.shape[1:] != dest.shape[1:] or (
                arr.shape[:1] != dest.shape[:1] and "final" not in name
            ):
                raise CheckpointError(
                    f"load_state_dict: array {name!r} has shape {arr.shape}, this buffer's "
                    f"{dest.shape}"
                )
        return meta, arrays

    def install(self, meta: Mapping[str, Any], arrays: Mapping[str, Any]) -> None:
        """Restore scalars, then arrays in place, then check and rebuild what is derived."""
        self.load_meta(meta)
        dest = self.arrays()
        for name, arr in arrays.items():
            if dest[name].shape != arr.shape:
                raise CheckpointError(
                    f"load_state_dict: array {name!r} has shape {arr.shape}, expected "
                    f"{dest[name].shape} for finals_capacity {meta['finals_capacity']}"
                )
            dest[name][...] = arr
        self.after_load()

    def save(self, path: str | os.PathLike[str], *, progress: bool | None = None) -> None:
        """Write a checkpoint of everything (contents, cursors, episodes, RNG) to one file.

        The write is atomic (temporary file, fsync, rename), versioned and checksummed. After
        :func:`rlreplay.load`, the same further calls give exactly the same samples.
        ``progress``: a tqdm bar (default: over 64 MiB of arrays, when stderr is a terminal).
        """
        with self.sync.lock:
            self.sync.check_open()
            self.backend.flush()
            arrays = self.file_arrays()  # first: settling the index may move the sampler's state
            meta = {
                "class": self.owner,
                "config": self.config(),
                "state": self.meta(),
            }
            write_checkpoint(path, meta, arrays, progress=progress)


def _rows(arr: Array, kind: str | int, runs: Mapping[str, Array]) -> Rows:
    """``Rows`` of ``arr``: those of ``runs[kind]``, or its first ``kind`` rows."""
    if isinstance(kind, str):
        return Rows(arr, runs[kind])
    n = min(kind, arr.shape[0])
    return Rows(arr, np.array([[0, n]] if n else [], np.int64).reshape(-1, 2))
