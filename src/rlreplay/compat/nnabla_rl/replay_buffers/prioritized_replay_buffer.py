"""Stand-in for ``nnabla_rl.replay_buffers.prioritized_replay_buffer`` over the rlreplay core.

nnabla-rl's ``PrioritizedReplayBuffer`` picks one of two implementations by ``variant``; here
both are the core's :class:`rlreplay.PrioritizedReplayBuffer` (sum/min trees, exact float64
masses), with ``variant`` passed through:

* ``"proportional"``: ``P(i) ∝ (|clip(error_i)| + epsilon) ** alpha``;
* ``"rank_based"``: ``P(i) ∝ rank(i) ** -alpha`` (rank 1 = largest ``|clip(error)|``), ranks
  refreshed by a re-sort every ``sort_interval`` changes.

Weights are nnabla-rl's ``(P(i) / P_min) ** -beta`` over the whole buffer (its
``normalization_method="buffer_max"``), ``beta`` growing linearly to 1 over ``betasteps``
samples. New experiences get the largest priority seen so far (1.0 before any update).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rlreplay.batch import Batch
from rlreplay.buffer import ReplayBuffer as CoreBuffer
from rlreplay.compat.nnabla_rl.replay_buffer import (
    Experience,
    Indices,
    ReplayBuffer,
    as_indices,
    check_count,
)
from rlreplay.errors import ConfigError, EmptyBufferError, ShapeError
from rlreplay.prioritized import PrioritizedReplayBuffer as CorePrioritized
from rlreplay.spec import Field, clip_pair, int_at_least

__all__ = ["PrioritizedReplayBuffer"]

Array = np.ndarray[Any, Any]

_VARIANTS = ("proportional", "rank_based")
#: Core draws for rows outside ``[0, len - num_steps]`` before giving up.
_REDRAW_ROUNDS = 64


class PrioritizedReplayBuffer(ReplayBuffer):
    """nnabla-rl's prioritized experience replay (proportional or rank-based) on rlreplay.

    Every :meth:`sample` or :meth:`sample_indices` must be followed by one
    :meth:`update_priorities` with the TD errors of the returned experiences before the next
    sample (nnabla-rl raises ``RuntimeError`` otherwise, and so does this class)::

        priority_i = |clip(error_i, *error_clip)| + epsilon
        P(i) = priority_i ** alpha / sum_k priority_k ** alpha          (proportional)
        P(i) = rank_i ** -alpha / sum_k rank_k ** -alpha                 (rank_based)
        weight_i = (P(i) / min_k P(k)) ** -beta                         (in (0, 1])

    Draws are stratified (one per equal slice of the total mass, as nnabla-rl's proportional
    buffer) and with replacement; with ``num_steps > 1`` a draw whose ``index + num_steps - 1``
    is not stored yet is drawn again, as in nnabla-rl. Experiences are ``(s, a, r,
    non_terminal, s_next, info)`` tuples as in :class:`~rlreplay.compat.nnabla_rl.replay_buffer.
    ReplayBuffer`.

    The newest experience joins the draws once the next one is appended (or once its episode
    ends): until then the core does not know whether its episode goes on (see
    ``docs/migrating/nnabla_rl.md``). :meth:`sample_indices` can return it at any time.

    Cost: ``O(B log N)`` per sample of ``B`` and per update (trees), plus the core's gathers.

    Args:
        capacity: Most experiences kept (required, ``>= 1``).
        alpha: Prioritization exponent ``>= 0``.
        beta: Importance-sampling exponent at the first sample, annealed to 1.
        betasteps: Samples over which ``beta`` reaches 1 (``0`` keeps ``beta``).
        error_clip: ``(lo, hi)`` applied to the TD errors, or None.
        epsilon: Added to every ``|clipped error|``.
        reset_segment_interval: Accepted for compatibility; the core's sum tree samples
            exactly, so there are no cached segments to reset.
        sort_interval: Rank-based: re-sort the ranks after this many changes.
        variant: ``"proportional"`` or ``"rank_based"``.
        seed: Seed of the random generator (an rlreplay addition).

    Raises:
        ValueError: ``capacity`` None or ``< 1``, an unknown ``variant``, or an argument out
            of range.

    Example:
        >>> import numpy as np
        >>> from rlreplay.compat.nnabla_rl.replay_buffers import PrioritizedReplayBuffer
        >>> buffer = PrioritizedReplayBuffer(capacity=100, seed=0)
        >>> for t in range(10):
        ...     s, s_next = np.full(2, t, np.float32), np.full(2, t + 1, np.float32)
        ...     buffer.append((s, np.zeros(1), 1.0, float(t < 9), s_next, {}))
        >>> experiences, info = buffer.sample(num_samples=4)
        >>> info["weights"].shape
        (4, 1)
        >>> buffer.update_priorities(np.array([0.5, 0.1, 2.0, 0.0]))
    """

    def __init__(
        self,
        capacity: int,
        alpha: float = 0.6,
        beta: float = 0.4,
        betasteps: int = 10000,
        error_clip: tuple[float, float] | None = (-1, 1),
        epsilon: float = 1e-8,
        reset_segment_interval: int = 1000,
        sort_interval: int = 1000000,
        variant: str = "proportional",
        *,
        seed: int | None = None,
    ) -> None:
        if variant not in _VARIANTS:
            raise ConfigError(f"Unknown prioritized replay buffer variant: {variant}")
        if capacity is None or (isinstance(capacity, int | np.integer) and capacity <= 0):
            raise ConfigError("buffer size must be greater than 0")
        super().__init__(capacity=capacity, seed=seed)
        self.variant = variant
        self._alpha = _real("alpha", alpha)
        self._beta = _real("beta", beta)
        self._betasteps = int_at_least("betasteps", betasteps, 0)
        self._error_clip = clip_pair("error_clip", error_clip)
        self._epsilon = _real("epsilon", epsilon)
        self._reset_segment_interval = int_at_least(
            "reset_segment_interval", reset_segment_interval, 1
        )
        self._sort_interval = int_at_least("sort_interval", sort_interval, 1)
        self._last_ids: Array | None = None  # core ids awaiting update_priorities

    def _build_core(self, capacity: int, fields: dict[str, Field], seed: int | None) -> CoreBuffer:
        return CorePrioritized(
            capacity,
            fields,
            alpha=self._alpha,
            beta=self._beta,
            beta_final=1.0,
            beta_steps=self._betasteps,
            eps=self._epsilon,
            variant=self.variant,
            initial_priority=1.0,  # nnabla-rl's init_max_error
            stratified=True,
            sort_interval=self._sort_interval if self.variant == "rank_based" else None,
            n_step=1,
            gamma=1.0,
            frame_stack=self._frame_stack,
            stack_pad="first",
            seed=seed,
        )

    @property
    def _prio_core(self) -> CorePrioritized:
        assert isinstance(self._core, CorePrioritized)
        return self._core

    def _check_updated(self) -> None:
        if self._last_ids is not None:
            raise RuntimeError(
                "Trying to sample data from buffer without updating priority. "
                "Check that the algorithm supports prioritized replay buffer."
            )

    # ------------------------------------------------------------------ sampling
    def sample(
        self, num_samples: int = 1, num_steps: int = 1
    ) -> tuple[list[Experience] | tuple[list[Experience], ...], dict[str, Any]]:
        """Sample ``num_samples`` experiences by priority, with importance weights.

        Args:
            num_samples: Number of samples to sample from the replay buffer. Defaults to 1.
            num_steps: Number of timesteps to sample. Should be greater than 0. Defaults to 1.

        Returns:
            ``(experiences, info)`` as the base buffer's, with ``info["weights"]`` the
            importance weights, float64 of shape ``(num_samples, 1)``.

        Raises:
            ValueError: num_samples exceeds the buffer's length, num_steps is 0 or negative,
                or nothing can be drawn yet (only the newest experience is stored).
            RuntimeError: The buffer holds fewer than num_steps experiences, or the previous
                sample's priorities were not updated.
        """
        num_steps = check_count("num_steps", num_steps)
        num_samples = check_count("num_samples", num_samples)
        n = len(self)
        if num_samples > n:
            raise ValueError(f"num_samples: {num_samples} is greater than the size of buffer: {n}")
        if n < num_steps:
            raise RuntimeError(f"Insufficient buffer length. buffer: {n} < steps: {num_steps}")
        self._check_updated()
        batch = self._draw(num_samples, num_steps)
        ids = np.asarray(batch["ids"])
        first = [self._decorate(e) for e in self._decode_batch(batch)]
        experiences: list[Experience] | tuple[list[Experience], ...] = first
        if num_steps > 1:
            later = self._experiences((ids[None, :] + np.arange(1, num_steps)[:, None]).ravel())
            B = ids.shape[0]
            experiences = (first, *(later[j * B : (j + 1) * B] for j in range(num_steps - 1)))
        self._last_ids = ids.copy()
        return experiences, {"weights": np.asarray(batch["weights"], np.float64)[:, None]}

    def _draw(self, batch_size: int, num_steps: int) -> Batch:
        """A core prioritized sample whose rows are all at indices ``[0, len - num_steps]``."""
        core = self._prio_core
        lo = self._first_id()
        hi = lo + len(self) - num_steps  # last id a draw may start at
        try:
            data = core.sample(batch_size).to_dict()
            for _ in range(_REDRAW_ROUNDS):
                ids = data["ids"]
                bad = (ids < lo) | (ids > hi)
                if not bad.any():
                    return Batch(data)
                more = core.sample(int(bad.sum()))
                for key, arr in data.items():
                    arr[bad] = more[key]
        except EmptyBufferError as exc:
            raise EmptyBufferError(
                f"sample: nothing can be drawn yet ({exc}); the newest experience joins the "
                "draws once the next one is appended or its episode ends"
            ) from None
        raise EmptyBufferError(
            f"sample: no experience with {num_steps - 1} stored successors was drawn in "
            f"{_REDRAW_ROUNDS} rounds; append more experiences or lower num_steps"
        )

    def sample_indices(
        self, indices: Indices, num_steps: int = 1
    ) -> tuple[list[Experience] | tuple[list[Experience], ...], dict[str, Any]]:
        """Sample experiences for given indices, with their current importance weights.

        The weights use the current ``beta`` (only :meth:`sample` advances it) and, for
        ``rank_based``, exact ranks of the current priorities. An experience not drawable yet
        (the newest) is weighted with the priority it will get.

        Raises:
            ValueError: If indices are empty or num_steps is 0 or negative.
            IndexError: An ``index + num_steps - 1`` beyond the stored experiences.
            RuntimeError: The previous sample's priorities were not updated.
        """
        idx = as_indices(indices)
        num_steps = check_count("num_steps", num_steps)
        self._check_updated()
        idx = self._check_range(idx, num_steps)
        experiences = self._steps_at(idx, num_steps)
        ids = self._first_id() + idx
        weights = self._weights_of(ids)
        self._last_ids = ids
        return experiences, {"weights": weights}

    def _weights_of(self, ids: Array) -> Array:
        """``(P(i) / P_min) ** -beta`` for given ids, computed as the core computes them."""
        core = self._prio_core
        drawable = core.sampleable_ids()
        p_all = core.get_priorities(drawable) if drawable.size else np.zeros(0)
        p_all = p_all[p_all > 0]
        if p_all.size == 0:
            return np.ones((ids.shape[0], 1))
        p = np.full(ids.shape[0], max(core.initial_priority, core.max_priority))
        known = np.isin(ids, drawable)
        if known.any():
            p[known] = core.get_priorities(ids[known])
        if self.variant == "proportional":
            mass, min_mass = p**self._alpha, p_all.min() ** self._alpha
        else:
            ranked = np.sort(p_all)
            # rank = 1 + #{priorities > p} ("1224" competition ranking, as the core's)
            rank = 1 + p_all.size - np.searchsorted(ranked, p, side="right")
            worst = 1 + p_all.size - np.searchsorted(ranked, ranked[0], side="right")
            mass = rank.astype(np.float64) ** -self._alpha
            min_mass = float(worst) ** -self._alpha
        w: Array = np.asarray((min_mass / mass) ** core.beta, np.float32)  # the core's dtype
        return w.astype(np.float64)[:, None]

    def update_priorities(self, errors: Any) -> None:
        """Set the priorities of the last sampled experiences from their TD errors.

        ``priority = |clip(error, *error_clip)| + epsilon``; an experience overwritten since
        the sample is skipped.

        Args:
            errors: One TD error per sampled experience (any shape with that many elements).

        Raises:
            RuntimeError: Nothing was sampled since the last update.
            ShapeError: Not one error per sampled experience (a ``ValueError``).
            PriorityError: A NaN or infinite error (a ``ValueError``).
        """
        ids = self._last_ids
        if ids is None:
            raise RuntimeError(
                "update_priorities: no sampled experiences await new priorities; call sample "
                "or sample_indices first"
            )
        e = np.asarray(errors, np.float64).reshape(-1)
        if e.shape[0] != ids.shape[0]:
            raise ShapeError(
                f"errors: expected one per sampled experience ({ids.shape[0]}), got {e.shape[0]}"
            )
        if self._error_clip is not None:
            e = np.clip(e, *self._error_clip)
        stored = ids < self._next_id  # the held newest experience is not in the core yet
        self._prio_core.update_priorities(ids[stored], np.abs(e[stored]))
        self._last_ids = None


def _real(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ConfigError(f"{name}: expected a finite number >= 0, got {value!r}")
    out = float(value)
    if not math.isfinite(out) or out < 0.0:
        raise ConfigError(f"{name}: expected a finite number >= 0, got {value!r}")
    return out
