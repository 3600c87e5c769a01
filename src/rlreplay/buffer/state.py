"""State of a replay buffer: state dicts and checkpoints (``state_dict``, ``save``, ...).

A part of :class:`rlreplay.ReplayBuffer` (see :mod:`rlreplay.buffer.host`). The state is the
configuration, a few scalars (``meta``: RNG state, sizes) and live views of every array; a
subclass extends :meth:`_state_meta`/:meth:`_state_arrays` and rebuilds caches in
:meth:`_after_load`. Loading a checkpoint file is :func:`rlreplay.load` (in
:mod:`rlreplay.buffer.replay`, which knows the buffer classes).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from rlreplay.buffer.host import Array, BufferHost
from rlreplay.checkpoint.file import write_checkpoint
from rlreplay.errors import CheckpointError

__all__ = ["StateMixin"]


class StateMixin(BufferHost):
    """``state_dict``, ``load_state_dict`` and ``save`` of :class:`rlreplay.ReplayBuffer`."""

    @property
    def rng(self) -> np.random.Generator:
        """The buffer's one random generator, from which every draw of the buffer comes.

        Its state is part of the buffer's state (:meth:`state_dict`, :meth:`save`): a
        front-end or transform that draws from it (under ``atomic()``, as the buffer's own draws
        happen under its lock) stays reproducible across a checkpoint and reload.
        """
        return self._rng

    def config(self) -> dict[str, Any]:
        """The buffer's configuration as JSON-able data: its constructor's arguments that are
        data (not functions such as transforms), as checkpoints record them and
        :meth:`state_dict` gives them under ``"config"``.

        Two buffers with equal configurations hold, sample and save alike given the same
        calls (with equal seeds); a sharded service uses it to check that a loaded shard fits.
        """
        with self._lock:
            return self._config()

    def _config(self) -> dict[str, Any]:
        config = {
            "capacity": self.capacity,
            "fields": self.schema.to_json(),
            "num_envs": self.num_envs,
            "n_step": self.n_step,
            "gamma": self.gamma,
            "frame_stack": self.frame_stack,
            "stack_pad": self.stack_pad,
            "seed": self.seed,
            "next_fields": list(self.next_fields),
            "record_episodic_return": self.record_episodic_return,
            "reward_clip": None if self.reward_clip is None else list(self.reward_clip),
            "default_return": self.default_return,
            "recent_ratio": self.draw_options.recent_ratio,
            "recent_steps": self.draw_options.recent_steps,
            "replacement": self.draw_options.replacement,
        }
        config.update(self._sampler_config())
        if self._limiter is not None:  # absent otherwise: files without a limiter unchanged
            config["rate_limiter"] = self._limiter.to_json()
        if self._output is not None:  # the default of as_/device; NumPy buffers' files unchanged
            config.update(as_=self._output.as_, device=self._output.device)
        return config

    def _sampler_config(self) -> dict[str, Any]:
        """The sampler's part of the configuration: nothing for a sampler of the class's
        default ``sampler_class`` built without arguments, else ``{"sampler": {"name": ...,
        **config}}`` (a class whose constructor builds its sampler from its own arguments
        records them its own way)."""
        sampler = self._sampler
        if type(sampler) is type(self).sampler_class and not sampler.config():
            return {}
        return {"sampler": {"name": sampler.name, **sampler.config()}}

    def _state_meta(self) -> dict[str, Any]:
        """Scalars of the state (JSON-able): the index's, the generator's, the sampler's and
        the rate limiter's."""
        meta = {
            "finals_capacity": self._index.finals_capacity,
            "rng": self._rng.bit_generator.state,
            **self._sampler.state_meta(),
        }
        if self._limiter is not None:
            meta["rate_limiter"] = self._limiter_counts()
        return meta

    def _state_arrays(self) -> dict[str, Array]:
        """Arrays of the state (live views): the index's, the columns' and the sampler's."""
        out = {f"index/{k}": v for k, v in self._index.state_arrays().items()}
        out.update({f"columns/{k}": v for k, v in self._cols.state_arrays().items()})
        out.update(self._sampler.state_arrays())
        return out

    def _load_meta(self, meta: Mapping[str, Any]) -> None:
        """Prepare for a state's arrays (resize what they size) and restore its scalars."""
        self._restore_limiter(meta.get("rate_limiter"))  # first: it refuses while inserting
        finals = int(meta["finals_capacity"])
        self._index.set_finals_capacity(finals)
        self._cols.set_finals_capacity(finals)
        self._rng.bit_generator.state = meta["rng"]
        self._sampler.load_meta(meta)

    def _after_load(self) -> None:
        """Rebuild what is derived from the state after its arrays were restored in place.

        Called at the end of :meth:`load_state_dict` and of loading a checkpoint: the index's
        tables are checked, the rate limiter resized and the sampler rebuilds what it derives
        (segment trees from priorities).
        """
        steps = self._cols.steps  # CheckpointError for tables no writes produce:
        self._index.check_loaded(steps["terminated"], steps["truncated"])
        self._limiter_resized()  # the rate limiter's size is the restored sampleable count
        self._sampler.after_load(self._index)

    def state_dict(self) -> dict[str, Any]:
        """The full state: ``{"class", "config", "meta", "arrays"}`` (arrays are copies)."""
        with self._lock:
            return {
                "class": type(self).__name__,
                "config": self._config(),
                "meta": self._state_meta(),
                "arrays": {k: np.array(v) for k, v in self._state_arrays().items()},
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
        with self._lock:
            try:
                meta, arrays = self._checked_form(state)
            except CheckpointError:
                raise
            except Exception as exc:  # a KeyError, TypeError ... of a malformed state
                raise CheckpointError(
                    f"load_state_dict: malformed state ({type(exc).__name__}: {exc}); expected "
                    "a state_dict() of a buffer with this configuration"
                ) from None
            before = copy.deepcopy(self._state_meta())
            kept = {k: np.array(v) for k, v in self._state_arrays().items()}
            try:
                self._install(meta, arrays)
            except BaseException as exc:
                self._install(before, kept)  # what it held: a state that passes every check
                if isinstance(exc, Exception) and not isinstance(exc, CheckpointError):
                    raise CheckpointError(
                        f"load_state_dict: inconsistent state ({type(exc).__name__}: {exc}); "
                        "the buffer is unchanged"
                    ) from exc
                raise

    def _checked_form(self, state: Mapping[str, Any]) -> tuple[Mapping[str, Any], dict[str, Any]]:
        """``(meta, arrays)`` of ``state`` if its form fits this buffer (nothing is changed)."""
        # Where batches go (as_/device) is this buffer's choice, not part of the data.
        theirs, mine = (
            {k: v for k, v in c.items() if k not in ("as_", "device")}
            for c in (state["config"], self._config())
        )
        if theirs != mine:
            raise CheckpointError(
                "load_state_dict: the state's configuration differs from this buffer's: "
                f"{state['config']} != {self._config()}"
            )
        meta, arrays = state["meta"], dict(state["arrays"])
        if not isinstance(meta, Mapping):
            raise CheckpointError(f"load_state_dict: meta must be a mapping, got {meta!r}")
        expected = self._state_arrays()
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

    def _install(self, meta: Mapping[str, Any], arrays: Mapping[str, Any]) -> None:
        """Restore scalars, then arrays in place, then check and rebuild what is derived."""
        self._load_meta(meta)
        dest = self._state_arrays()
        for name, arr in arrays.items():
            if dest[name].shape != arr.shape:
                raise CheckpointError(
                    f"load_state_dict: array {name!r} has shape {arr.shape}, expected "
                    f"{dest[name].shape} for finals_capacity {meta['finals_capacity']}"
                )
            dest[name][...] = arr
        self._after_load()

    def save(self, path: str | os.PathLike[str], *, progress: bool | None = None) -> None:
        """Write a checkpoint of everything (contents, cursors, episodes, RNG) to one file.

        The write is atomic (temporary file, fsync, rename), versioned and checksummed. After
        :func:`rlreplay.load`, the same further calls give exactly the same samples.
        ``progress``: a tqdm bar (default: over 64 MiB of arrays, when stderr is a terminal).
        """
        with self._lock:
            self._check_open()
            self._backend.flush()
            meta = {
                "class": type(self).__name__,
                "config": self._config(),
                "state": self._state_meta(),
            }
            write_checkpoint(path, meta, self._state_arrays(), progress=progress)
