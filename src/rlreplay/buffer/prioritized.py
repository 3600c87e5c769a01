"""Prioritized experience replay (Schaul et al., 2015): the core buffer with a prioritized
sampler (:class:`rlreplay.sampling.PrioritizedSampler`).

The buffer builds its sampler from its keyword arguments and forwards the prioritized calls to
it under the buffer's lock; the law, its trees and its state are the sampler's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from rlreplay.buffer.replay import ReplayBuffer
from rlreplay.errors import ConfigError, InvalidIdError, PriorityError, ShapeError
from rlreplay.sampling.priorities import Priorities
from rlreplay.sampling.prioritized import PrioritizedSampler, PriorityMass, PriorityStarts
from rlreplay.sampling.prioritized_args import _reduce_steps
from rlreplay.spec.arguments import as_array, check_rows
from rlreplay.spec.schema import Field, positive_int

__all__ = ["PrioritizedReplayBuffer", "PriorityMass", "PriorityStarts"]

Array = np.ndarray[Any, Any]


class PrioritizedReplayBuffer(ReplayBuffer):
    """A :class:`ReplayBuffer` that samples transitions by priority, with importance weights.

    Storage, n-step windows, frame stacks, ids and checkpoints are those of the core buffer;
    only the choice of transitions differs. Over the ``N`` sampleable transitions:

    * ``variant="proportional"``: ``P(i) = p_i^alpha / sum_k p_k^alpha``;
    * ``variant="rank_based"``: ``P(i) = rank(i)^-alpha / sum_k rank(k)^-alpha`` with
      ``rank(i) = 1 + #{k: p_k > p_i}``: the highest priority has rank 1 and equal priorities
      share a rank (so all-equal priorities sample uniformly). Ranks are exact just after a
      re-sort (``O(N log N)``); between re-sorts a transition whose priority changed (or that
      joined) is ranked by binary search against the priorities of the last re-sort, others
      keep their rank. Bound: ``|rank in use - exact rank| <= D``, ``D`` being the number of
      insertions, removals and priority updates since the re-sort (each moves a count of
      larger priorities by at most one). A re-sort happens before a draw once ``D >=
      sort_interval``, so ``D < sort_interval`` at every draw; ``sort_interval=1`` gives
      exact ranks. Draws and ``probabilities`` always follow the ranks in use, so the weights
      fit the law actually sampled.

    A transition with priority 0, one that is not sampleable (yet), or one overwritten is never
    drawn (rank-based: priority-0 transitions take no rank). With ``alpha = 0`` the others are
    drawn uniformly. Importance weights are normalised by the largest weight over the whole
    buffer, i.e. by the smallest probability ``P_min`` over the drawable transitions::

        w_i = (N * P(i))^-beta / max_k (N * P(k))^-beta = (P_min / P(i))^beta   (in (0, 1])

    ``beta`` moves linearly from ``beta`` to ``beta_final`` over ``beta_steps`` calls of
    :meth:`sample` or :meth:`sample_sequences` (``beta_steps=0``: ``beta`` throughout); see
    :attr:`beta`. :meth:`sample_sequences` draws sequence starts by priority the same way.

    A new transition gets priority ``max(initial_priority, largest priority ever applied by
    update_priorities)`` when it is written and is drawn once it becomes sampleable.

    Args:
        capacity: As for :class:`ReplayBuffer`.
        fields: As for :class:`ReplayBuffer`.
        alpha: Prioritization exponent ``>= 0`` (0: uniform).
        beta: Importance-sampling exponent ``>= 0`` at the first :meth:`sample` (0: weights 1).
        beta_final: Exponent reached after ``beta_steps`` samples.
        beta_steps: Number of :meth:`sample` calls over which ``beta`` is annealed; 0 keeps it.
        eps: Added to every priority given to :meth:`update_priorities` (after clipping).
        variant: ``"proportional"`` or ``"rank_based"``.
        initial_priority: Priority ``> 0`` of new transitions before any update.
        priority_clip: Optional ``(lo, hi)`` with ``0 <= lo <= hi``: updates are clipped to it.
        stratified: Draw one transition per equal slice of the total mass (lower variance);
            ``False`` draws independently. Either way each draw has law ``P``.
        sort_interval: Rank-based only: re-sort once this many changes accumulated; ``None``
            (default) re-sorts after 1% of the transitions ranked at the last re-sort changed.
        **kwargs: Every other :class:`ReplayBuffer` argument (``num_envs``, ``n_step``, ...).

    Batches also hold ``weights`` (float32) and ``probabilities`` (float64, each draw's
    ``P(i)``). Checkpoints (:meth:`save`, :meth:`state_dict`) include the priorities, the rank
    snapshot, ``beta``'s step and the max priority: a loaded buffer samples exactly as the saved
    one would have. Invariant: the sum and min trees hold exactly the masses of the sampleable
    transitions (recomputed from children on every update, float64, no drift). Cost: add and
    update are ``O(k log n)`` for ``k`` transitions, a sample of ``B`` is ``O(B log n)`` plus
    the gathers of the core; rank-based re-sorts cost ``O(n log n)`` each.

    Example:
        >>> import numpy as np, rlreplay as rr
        >>> buf = rr.PrioritizedReplayBuffer(100, {"obs": rr.Field((2,), np.float32)}, seed=0)
        >>> for t in range(10):
        ...     _ = buf.add(obs=np.full(2, t, np.float32), reward=1.0, terminated=t == 9,
        ...                 truncated=False, next_obs=np.zeros(2, np.float32))
        >>> batch = buf.sample(4)
        >>> buf.update_priorities(batch.ids, np.arange(4.0))
        0
        >>> batch.weights.dtype, batch.probabilities.dtype
        (dtype('float32'), dtype('float64'))
    """

    _sampler: PrioritizedSampler
    #: The sampler class built from the constructor's arguments (a subclass may name a
    #: subclass of :class:`~rlreplay.sampling.PrioritizedSampler`).
    sampler_class: ClassVar[type[Any]] = PrioritizedSampler

    def __init__(
        self,
        capacity: int,
        fields: Mapping[str, Field | tuple[Any, Any]],
        *,
        alpha: float = 0.6,
        beta: float = 0.4,
        beta_final: float = 1.0,
        beta_steps: int = 0,
        eps: float = 1e-6,
        variant: str = "proportional",
        initial_priority: float = 1.0,
        priority_clip: tuple[float, float] | None = None,
        stratified: bool = True,
        sort_interval: int | None = None,
        **kwargs: Any,
    ) -> None:
        if "sampler" in kwargs:
            raise ConfigError(
                "sampler: a PrioritizedReplayBuffer builds its own sampler from alpha, beta, "
                "...; pass sampler= to rr.ReplayBuffer instead"
            )
        sampler = self.sampler_class(
            alpha=alpha, beta=beta, beta_final=beta_final, beta_steps=beta_steps, eps=eps,
            variant=variant, initial_priority=initial_priority, priority_clip=priority_clip,
            stratified=stratified, sort_interval=sort_interval,
        )  # fmt: skip
        super().__init__(capacity, fields, sampler=sampler, **kwargs)

    # ------------------------------------------------------------------ parameters
    @property
    def alpha(self) -> float:
        """Prioritization exponent."""
        return self._sampler.alpha

    @property
    def beta_final(self) -> float:
        """Importance exponent reached after ``beta_steps`` samples."""
        return self._sampler.beta_final

    @property
    def beta_steps(self) -> int:
        """Samples over which ``beta`` is annealed (0: constant)."""
        return self._sampler.beta_steps

    @property
    def eps(self) -> float:
        """Added to every priority given to :meth:`update_priorities`."""
        return self._sampler.eps

    @property
    def variant(self) -> str:
        """``"proportional"`` or ``"rank_based"``."""
        return self._sampler.variant

    @property
    def initial_priority(self) -> float:
        """Priority of new transitions before any update."""
        return self._sampler.initial_priority

    @property
    def priority_clip(self) -> tuple[float, float] | None:
        """``(lo, hi)`` that updates are clipped to, or ``None``."""
        return self._sampler.priority_clip

    @property
    def stratified(self) -> bool:
        """Whether draws are stratified over equal slices of the total mass (settable: either
        way each draw has law ``P``)."""
        return self._sampler.stratified

    @stratified.setter
    def stratified(self, value: bool) -> None:
        if not isinstance(value, bool | np.bool_):
            raise ConfigError(f"stratified: expected a bool, got {value!r}")
        with self._lock:
            self._sampler.stratified = bool(value)

    @property
    def sort_interval(self) -> int | None:
        """Rank-based: changes between re-sorts (``None``: 1% of the ranked transitions)."""
        return self._sampler.sort_interval

    @property
    def _prios(self) -> Priorities:
        """The sampler's priorities, up to date (deferred steps accounted for first)."""
        return self._sampler.priorities(self._index)

    @property
    def beta(self) -> float:
        """The importance exponent the next :meth:`sample` (or ``sample_sequences``) uses.

        ``beta + (beta_final - beta) * min(1, k / beta_steps)`` after ``k`` samples; ``beta``
        when ``beta_steps == 0``.
        """
        with self._lock:
            return self._sampler.beta

    @property
    def max_priority(self) -> float:
        """Largest priority ever applied by :meth:`update_priorities` (0 before any)."""
        with self._lock:
            return self._sampler.max_priority

    def _sampler_config(self) -> dict[str, Any]:
        return self._sampler.config()  # flat: the constructor's own keyword arguments

    # ------------------------------------------------------------------ priorities
    def priority_mass(self) -> PriorityMass:
        """The total and smallest sampling mass and the sampleable count, read together.

        Read under the buffer's lock, from the sum and min trees the next :meth:`sample` draws
        from (rank-based: after the re-sort that draw would make), so ``m_i / total`` is
        ``P(i)`` and ``smallest / total`` is ``P_min``. For a caller that combines several
        buffers into one law (the shards of :class:`rlreplay.distributed.ReplayService`).
        Cost: O(1), plus a rank-based re-sort when one is due.

        Raises:
            ReplayClosed: The buffer is closed.

        Example:
            >>> import numpy as np, rlreplay as rr
            >>> buf = rr.PrioritizedReplayBuffer(16, {"obs": rr.Field((), np.float32)},
            ...                                  alpha=1.0, eps=0.0)
            >>> ids = buf.extend(obs=np.arange(3, dtype=np.float32), reward=np.zeros(3),
            ...                  terminated=[False, False, True], truncated=[False] * 3,
            ...                  next_obs=np.zeros(3, np.float32))
            >>> _ = buf.update_priorities(ids, [1.0, 2.0, 0.5])
            >>> buf.priority_mass()
            PriorityMass(total=3.5, smallest=0.5, sampleable=3)
        """
        with self._lock:
            self._check_open()
            return self._sampler.mass(self._index)

    def update_priorities(
        self, ids: Any, priorities: Any, *, mask: Any = None, eta: float = 0.9
    ) -> int:
        """Set the priorities of transitions, typically ``abs(td_error)`` of a sampled batch.

        Each priority is clipped to ``priority_clip`` (if set), then ``eps`` is added. Ids of
        transitions overwritten (or cleared) since they were issued are ignored, never applied
        to the slot's new occupant. With duplicate ids the last one wins (only priorities that
        take effect count towards :attr:`max_priority`). A transition that is stored but not
        sampleable yet keeps the priority for when it becomes sampleable.

        For sequences (``batch.ids`` of :meth:`sample_sequences` are their first steps),
        ``priorities`` may also hold per-step values shaped ``(B, L)``: each row is reduced
        R2D2-style to ``eta * max + (1 - eta) * mean`` over its real steps (``mask``, default
        all).

        Args:
            ids: Transition ids (``batch.ids``), any shape.
            priorities: Finite numbers ``>= 0``, one per id (same shape), or per step
                (``ids.shape + (L,)``).
            mask: With per-step priorities, which steps are real (``batch.mask``).
            eta: With per-step priorities, the weight of the max in the reduction, in [0, 1].

        Returns:
            How many ids were ignored as overwritten.

        Raises:
            InvalidIdError: An id never issued by this buffer, or non-integer ids.
            ReplayClosed: The buffer was closed.
            PriorityError: A priority NaN, infinite, negative or not a real number, or one
                whose mass ``p ** alpha`` exceeds ``float64 max / (2 * capacity)`` (so that no
                sum of masses, now or after later writes, can overflow).
            ShapeError: ``priorities`` and ``ids`` differ in shape.

        Nothing is changed when an error is raised.
        """
        p = as_array("priorities", priorities)
        id_arr = as_array("ids", ids)
        if p.ndim == id_arr.ndim + 1 and p.shape[:-1] == id_arr.shape:
            p = _reduce_steps(p, mask, eta)
        if p.shape != id_arr.shape:
            raise ShapeError(
                f"priorities: expected one per id, shape {id_arr.shape}, got shape {p.shape}"
            )
        if p.dtype.kind not in "iuf":
            raise PriorityError(f"priorities: expected real numbers, got dtype {p.dtype}")
        p = np.ascontiguousarray(p, np.float64).reshape(-1)
        with self._lock:
            self._check_open()
            return self._sampler.update(self._index, id_arr, p)

    def get_priorities(self, ids: Any) -> Array:
        """Current priorities (float64) of stored transitions, in the order of ``ids``.

        Raises:
            InvalidIdError: An id never issued, or of a transition no longer stored.
        """
        with self._lock:
            self._check_open()
            env_ids, t, stale = self._index.split_ids(ids)
            if stale.any():
                raise InvalidIdError(
                    f"ids: {np.asarray(ids)[stale][:5].tolist()} were overwritten or cleared"
                )
            out: Array = self._prios.prio[self._index.slots(env_ids, t)]
            return out

    def sample_starts(self, n: int, first: Any, end: Any) -> PriorityStarts:
        """Draw ``n`` starts by priority among the sampleable steps within per-env bounds.

        The allowed starts are the sampleable transitions (those :meth:`sample` draws from)
        whose step ``t`` of env ``e`` has ``first[e] <= t < end[e]``; start ``i`` is drawn with
        ``P(i) = m_i / sum of m over the allowed starts``, ``m`` being :meth:`sample`'s mass
        (``p^alpha``, or the rank mass), with replacement. For a front-end that restricts where
        sequences may start (ALF: not among the earliest frames, and ``L`` stored steps from
        the start on) and computes its own weights. The draws come from :attr:`rng` (the
        buffer's checkpointed generator), as :meth:`sample`'s do (stratified when
        ``stratified``), those out of bounds being redrawn; the expected number of draws of
        each allowed start is exactly ``n * P(i)``. The ``beta`` schedule does not advance.

        Cost: ``O(A)`` for ``A`` allowed starts, plus ``O(n log size)`` per round of draws
        (a round redraws the out-of-bounds ones; after 64 rounds the rest are drawn exactly
        among the allowed starts, ``O(A)``).

        Args:
            n: Number of starts (``>= 1``).
            first: int ``(num_envs,)``: each env's first allowed step.
            end: int ``(num_envs,)``: one past each env's last allowed step.

        Returns:
            A :class:`PriorityStarts` (``env_ids``, ``steps``, ``ids``, ``probabilities``,
            ``candidates``).

        Raises:
            ConfigError: ``n`` is not a positive int, or ``n`` starts above the size budget.
            ShapeError: ``first`` or ``end`` is not an integer array of shape ``(num_envs,)``.
            EmptyBufferError: No allowed start has a mass ``> 0``.
            ReplayClosed: The buffer is closed.

        Example:
            >>> import numpy as np, rlreplay as rr
            >>> buf = rr.PrioritizedReplayBuffer(16, {"obs": rr.Field((), np.float32)},
            ...                                  alpha=1.0, eps=0.0)
            >>> ids = buf.extend(obs=np.arange(6, dtype=np.float32), reward=np.zeros(6),
            ...                  terminated=[False] * 5 + [True], truncated=[False] * 6,
            ...                  next_obs=np.zeros(6, np.float32))
            >>> _ = buf.update_priorities(ids, [1.0, 1.0, 1.0, 3.0, 1.0, 1.0])
            >>> s = buf.sample_starts(100, first=[2], end=[4])  # steps 2 and 3 only
            >>> sorted(set(zip(s.steps.tolist(), s.probabilities.tolist()))), s.candidates
            ([(2, 0.25), (3, 0.75)], 2)
        """
        n = positive_int("n", n)
        check_rows("n", n, n, 64, "sample_starts")  # (the starts' arrays and the draws')
        with self._lock:
            self._check_open()
            lo, hi = self._step_bounds("first", first), self._step_bounds("end", end)
            return self._sampler.sample_starts(self._index, self._rng, n, lo, hi)

    def _step_bounds(self, name: str, value: Any) -> Array:
        arr = np.asarray(value)
        if arr.shape != (self.num_envs,) or arr.dtype.kind not in "iu":
            raise ShapeError(
                f"{name}: expected an integer array of shape ({self.num_envs},) (one step per "
                f"env), got {arr.dtype} of shape {arr.shape}"
            )
        return arr.astype(np.int64)
