"""ALF's position queries, clear and checkpoint state, over the core (private to ALF's).

A part of :class:`rlreplay.compat.alf.replay_buffer.ReplayBuffer`: ``get_field``,
``steps_to_episode_end``, ``get_episode_begin_position``, ``get_disc_0_begin_position`` and
the ``state_dict`` extra state, with the helpers that turn ALF's ``(env_ids, positions)``
into core ids and read each env's stored positions. The attributes are set by the buffer's
constructor and only declared here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
import torch

from rlreplay import Batch, FieldError, MaxTree
from rlreplay import ReplayBuffer as CoreBuffer
from rlreplay.compat.alf._draws import ReplayAssertionError
from rlreplay.compat.alf._episodic import (
    Continuations,
    CutEpisodes,
    Disc0Segments,
    joined_tails,
)
from rlreplay.compat.alf._nest import (
    broadcast_ids,
    field_tensors,
    runs_to_clear,
    to_tensor,
)
from rlreplay.compat.alf._odd import OddPriorities
from rlreplay.compat.alf.tensor_specs import Path

__all__ = ["EpisodicQueries"]

Array = np.ndarray[Any, Any]


class EpisodicQueries:
    """Position queries and extra state of ALF's ``ReplayBuffer`` (a mixin)."""

    _all_envs: Array
    _atomic: Callable[[], AbstractContextManager[Any]]
    _begin_floor: Array
    _core: CoreBuffer
    _cuts: CutEpisodes | None
    _device: torch.device
    _disc0: Disc0Segments
    _joins: Continuations
    _discount: str | None
    _enable_checkpoint: bool
    _keep_episodic_info: bool
    _max_length: int
    _max_prio: MaxTree | None
    _odd: OddPriorities | None
    _names: dict[Path, str]
    _num_envs: int
    _spec: Any

    def _bounds(self) -> tuple[Array, Array]:
        """Per env: the oldest stored position and ``current_pos`` (copies).

        Raises:
            rlreplay.ReplayClosed: The core buffer was closed (``core.close()``).
        """
        first, end = self._core.stored_range()
        return first, end

    def _ids(self, env_ids: Any, positions: Any) -> tuple[Array, Array, Array]:
        """Broadcast ``env_ids`` and ``positions``; return ``(env, pos, core ids)``."""
        return broadcast_ids(env_ids, positions, self._num_envs)

    def _tails(self, env: Array, pos: Array) -> Array:
        """ALF's additions to the returns of ``(env, pos)`` (broadcast) in joined episodes.

        Zeros without ``record_episodic_return``; call under the core's lock.
        """
        env, pos = np.broadcast_arrays(env, pos)
        if self._cuts is None or pos.size == 0:
            return np.zeros(pos.shape)
        out: Array = joined_tails(self._core, self._joins, self._cuts, env, pos)
        return out.reshape(pos.shape)

    def _require_episodic(self, what: str) -> None:
        if not self._keep_episodic_info:
            raise ReplayAssertionError(f"{what}: needs keep_episodic_info=True")

    # ------------------------------------------------------------------ episodic queries
    def get_field(self, field_name: Any, env_ids: Any, positions: Any) -> Any:
        """The stored value of a field at ``(env_ids, positions)``.

        Args:
            field_name: A dotted path (``"observation.image"``; a path to a sub-nest gives that
                nest), or a nest of such paths.
            env_ids: int64 tensor.
            positions: int64 tensor broadcastable with ``env_ids`` (from a :class:`BatchInfo`).

        Returns:
            Tensors (on ``device``) of shape ``broadcast(env_ids, positions) + leaf shape``,
            in the structure of ``field_name``.

        Raises:
            rlreplay.FieldError: No such field.
            rlreplay.InvalidIdError: A position not stored (overwritten or never added).
        """
        _, _, ids = self._ids(env_ids, positions)

        def get(name: str) -> Array:
            return self._core.get_field(name, ids)

        with self._atomic():
            return field_tensors(field_name, self._spec, self._names, get, self._device)

    def steps_to_episode_end(self, pos: Any, env_ids: Any) -> torch.Tensor:
        """The distance from each step to the closest episode end (``LAST`` step) in future.

        For an episode still running, the distance to the env's newest step.

        Args:
            pos: int64 positions of stored steps.
            env_ids: int64, broadcastable with ``pos``.

        Raises:
            ReplayAssertionError: ``keep_episodic_info`` is False.
            rlreplay.InvalidIdError: A position not stored.
        """
        self._require_episodic("steps_to_episode_end")
        env, p, _ = self._ids(env_ids, pos)
        with self._atomic():
            _, counts = self._bounds()
            out = self._joins.end_of(self._core, env, p, counts - 1) - p
        return to_tensor(out, self._device)

    def get_episode_begin_position(self, pos: Any, env_ids: Any) -> torch.Tensor:
        """The position of the first step of the episode holding each step.

        Note that the episode begin may not still be in the replay buffer.

        Raises:
            ReplayAssertionError: ``keep_episodic_info`` is False.
            rlreplay.InvalidIdError: A position not stored.
        """
        self._require_episodic("get_episode_begin_position")
        env, _, ids = self._ids(env_ids, pos)
        with self._atomic():
            begin = self._core.episode_begin(ids) // self._num_envs
            # A FIRST added to an env that stored nothing begins the episodes of all its later
            # steps (ALF's index); the core could not end its episode there.
            begin = np.maximum(begin, self._begin_floor[env])
            # A LAST followed by a step other than FIRST: ALF's episode goes on.
            begin = self._joins.begin_of(env, ids // self._num_envs, begin)
        return to_tensor(begin, self._device)

    def get_disc_0_begin_position(self, pos: Any, env_ids: Any) -> torch.Tensor:
        """Where the discount-0 segment of each step begins.

        Steps with ``discount == 0`` close segments as ``LAST`` steps close episodes: the
        result is the position right after the newest step before ``pos`` whose discount is
        0 (0 if there is none). Note that the discount 0 step may no longer be in the
        replay buffer.

        Raises:
            ReplayAssertionError: ``keep_episodic_info`` is False.
            rlreplay.FieldError: ``data_spec`` has no scalar top-level ``discount``.
            rlreplay.InvalidIdError: A position not stored.
        """
        self._require_episodic("get_disc_0_begin_position")
        if self._discount is None:
            raise FieldError("get_disc_0_begin_position: data_spec has no scalar 'discount'")
        env, p, _ = self._ids(env_ids, pos)
        with self._atomic():
            heads, counts = self._bounds()
            out = self._disc0.begin_of(env, p, heads, counts)
        return to_tensor(out, self._device)

    # ------------------------------------------------------------------ clear
    def clear(self, env_ids: Any = None) -> None:
        """Remove every stored step of ``env_ids`` (default: all). Positions keep counting."""
        with self._atomic():
            if env_ids is None:
                self._core.clear()
                if self._max_prio is not None:
                    self._max_prio.set(np.arange(self._max_prio.capacity), -math.inf)
                if self._odd is not None:
                    self._odd.clear()
                return
            for e, n in runs_to_clear(env_ids, self._all_envs, *self._bounds()):
                self._forget(self._core.dequeue(n, [e]))

    def _forget(self, got: Batch) -> None:
        """Dequeued steps no longer count towards the largest priority."""
        if self._max_prio is not None and got.ids.size:
            t = got.ids.reshape(-1) // self._num_envs
            env = got.ids.reshape(-1) % self._num_envs
            self._max_prio.set(env * self._max_length + t % self._max_length, -math.inf)
        if self._odd is not None and got.ids.size:
            t = got.ids.reshape(-1) // self._num_envs
            self._odd.written(
                got.ids.reshape(-1) % self._num_envs * self._max_length + t % self._max_length
            )

    # ------------------------------------------------------------------ state
    def get_extra_state(self) -> dict[str, Any]:
        """The full state for ``state_dict()`` (``{}`` unless ``enable_checkpoint``)."""
        if not self._enable_checkpoint:
            return {}
        with self._atomic():
            return {
                "core": self._core.state_dict(),
                **self._disc0.state_dict(),
                **self._joins.state_dict(),
                "max_priority": None if self._max_prio is None else self._max_prio.state_dict(),
                "begin_floor": self._begin_floor.copy(),
                **({} if self._cuts is None else self._cuts.state_dict()),
                **({} if self._odd is None else self._odd.state_dict()),
            }

    def set_extra_state(self, state: Any) -> None:
        """Restore :meth:`get_extra_state` (ignored unless ``enable_checkpoint``)."""
        if not self._enable_checkpoint or not state:
            return
        with self._atomic():
            core_state = dict(state["core"])
            # The seed only names how the generator started; its state is restored from meta.
            core_state["config"] = {**core_state["config"], "seed": self._core.seed}
            self._core.load_state_dict(core_state)
            self._disc0.load_state_dict(state)
            self._joins.load_state_dict(state)
            if self._max_prio is not None and state["max_priority"] is not None:
                self._max_prio.load_state_dict(state["max_priority"])
            self._begin_floor[...] = state.get("begin_floor", 0)
            if self._cuts is not None:
                self._cuts.load_state_dict(state)
            if self._odd is not None:
                self._odd.load_state_dict(state)
