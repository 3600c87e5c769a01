"""ALF's ``get_batch`` and ``update_priority`` over the core (private to ALF's front-end).

A part of :class:`rlreplay.compat.alf.replay_buffer.ReplayBuffer`: drawing sequence starts
(``_draws``: uniform per env with ALF's split, or by priority, odd priorities by ALF's own
tree), gathering the rows and their ``discounted_return``, and setting priorities, with
ALF's new-step rule kept in a max tree (``_max_prio``) and the priorities the core refuses in
``_odd``. The attributes are set by the buffer's constructor and only declared here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from rlreplay import PrioritizedReplayBuffer, ShapeError
from rlreplay.buffer import check_result
from rlreplay.compat.alf._draws import (
    ReplayAssertionError,
    draw_starts,
    sequence_returns,
)
from rlreplay.compat.alf._episodic import cut_of
from rlreplay.compat.alf._nest import pack_rows, to_tensor
from rlreplay.compat.alf._odd import is_odd
from rlreplay.compat.alf._queries import EpisodicQueries
from rlreplay.compat.alf._setup import positive
from rlreplay.compat.alf._types import BatchInfo
from rlreplay.compat.alf.segment_tree import as_numpy

__all__ = ["Sampling"]

Array = np.ndarray[Any, Any]


class Sampling(EpisodicQueries):
    """Sampling and priorities of ALF's ``ReplayBuffer`` (a mixin over :class:`EpisodicQueries`)."""

    _default_return: float
    _ignored: int
    _pcore: PrioritizedReplayBuffer | None
    _recent_ratio: float
    _recent_steps: int
    _record: bool
    _with_replacement: bool

    def _nest(
        self, data: Mapping[str, Array], device: torch.device, length: int | None = None
    ) -> Any:
        return pack_rows(self._spec, self._names, data, device, length)

    def get_batch(self, batch_size: int, batch_length: int) -> tuple[Any, BatchInfo]:
        """Randomly get ``batch_size`` sequences of ``batch_length`` consecutive steps.

        A sequence never crosses an env's newest step (it may cross episode boundaries, as in
        ALF: ``step_type`` shows them). Rows come ordered by env.

        Uniform sampling (``prioritized_sampling=False``): env ``e`` gets ``B // E`` sequences
        and ``B % E`` distinct random envs one more; each start is uniform over the env's
        starts ``[earliest + num_earliest_frames_ignored, current_pos - L]``, without
        duplicates unless ``with_replacement``. Prioritized: starts are drawn over all envs
        with probability ``priority / sum``; ``importance_weights = N * P(i)``, ``N`` the
        number of possible starts with a non-zero priority (every row gets it, the recent ones
        too). The recent part (see ``recent_data_ratio``) is uniform over each env's newest
        ``recent_data_steps`` starts.

        Returns:
            ``(nest [B, L, ...], BatchInfo)`` on torch's (ALF's) default device.

        Raises:
            ReplayAssertionError: Uniform draws and an env holds fewer than ``batch_length +
                num_earliest_frames_ignored`` steps; or, prioritized, no possible start has a
                non-zero priority.
        """
        B = positive("batch_size", batch_size)
        L = positive("batch_length", batch_length)
        # B runs of L (+1 for returns) steps, refused before the draw if they cannot be held
        check_result(self._core, "batch_size", (B, L), B * (L + 1), "get_batch", "step")
        with self._atomic():
            env, t, weights = draw_starts(
                self._core.rng, self._pcore, *self._bounds(), B, L,
                ignored=self._ignored, recent_ratio=self._recent_ratio,
                recent_steps=self._recent_steps, replacement=self._with_replacement,
                odd=self._odd,
            )  # fmt: skip
            order = np.argsort(env, kind="stable")
            env, t = env[order], t[order]
            ids = t * self._num_envs + env
            seq = self._core.get_sequences(ids, L + int(self._record), within_episode=False)
            tails = self._tails(env[:, None], t[:, None] + np.arange(L))
        device = torch.get_default_device()
        returns: Any = ()
        if self._record:
            g = sequence_returns(seq, cut_of(self._cuts, env, t, L + 1), L, self._default_return)
            returns = to_tensor((g + tails).astype(np.float32), device)
        info = BatchInfo(
            env_ids=to_tensor(env, device),
            positions=to_tensor(t, device),
            importance_weights=() if weights is None else to_tensor(weights[order], device),
            replay_buffer=self,
            discounted_return=returns,
        )
        return self._nest(seq, device, L), info

    def update_priority(self, env_ids: Any, positions: Any, priorities: Any) -> None:
        """Set the priorities of the steps ``(env_ids, positions)`` (from a :class:`BatchInfo`).

        Overwritten steps are ignored. With duplicates the last priority wins. Any float is
        stored, as in ALF: while a negative, NaN or infinite priority is a possible start,
        :meth:`get_batch` draws with ALF's sum-tree algorithm (see ``_odd``).

        Raises:
            ReplayAssertionError: ``prioritized_sampling`` is False.
            rlreplay.InvalidIdError: A position never added.
        """
        if self._pcore is None or self._max_prio is None or self._odd is None:
            raise ReplayAssertionError("update_priority: needs prioritized_sampling=True")
        env, pos, ids = self._ids(env_ids, positions)
        prio = as_numpy(priorities)
        if prio.shape != ids.shape:
            raise ShapeError(f"priorities: expected shape {ids.shape}, got {prio.shape}")
        with self._atomic():
            prio = prio.astype(np.float64)  # odd ones (the core refuses them): 0 in the core
            self._pcore.update_priorities(ids, np.where(is_odd(prio), 0.0, prio))
            heads, _ = self._bounds()
            live = pos >= heads[env]
            slots = env * self._max_length + pos % self._max_length
            self._odd.set(slots[live], prio[live])
            top = np.where(np.isnan(prio), -math.inf, prio)  # the max tree refuses NaN
            self._max_prio.set(slots[live], top[live])
