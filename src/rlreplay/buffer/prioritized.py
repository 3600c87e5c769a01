"""Prioritized experience replay (Schaul et al., 2015) over the core buffer."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from rlreplay.assemble.sequences import valid_sequence_starts
from rlreplay.buffer.prioritized_args import _check_uniform_only, _clip_range, _real, _reduce_steps
from rlreplay.buffer.replay import ReplayBuffer
from rlreplay.episodes.index import HI, LO, expand_ranges
from rlreplay.errors import (
    CheckpointError,
    ConfigError,
    EmptyBufferError,
    InvalidIdError,
    PriorityError,
    ShapeError,
)
from rlreplay.sampling.priorities import VARIANTS, Priorities
from rlreplay.sampling.uniform import DrawOptions
from rlreplay.spec.schema import Field, int_at_least, positive_int

__all__ = ["PrioritizedReplayBuffer", "PriorityMass", "PriorityStarts"]

Array = np.ndarray[Any, Any]

_REJECTION_ROUNDS = 64  # redraws of out-of-bounds starts before the exact O(N) fallback


class PriorityStarts(NamedTuple):
    """Starts drawn by :meth:`PrioritizedReplayBuffer.sample_starts`.

    Attributes:
        env_ids: int64 ``(n,)``: the env of each start.
        steps: int64 ``(n,)``: its absolute step (see :class:`rlreplay.StoredRange`).
        ids: int64 ``(n,)``: its id, ``steps * num_envs + env_ids``.
        probabilities: float64 ``(n,)``: ``P(i) = m_i / M`` of each start, ``m_i`` its
            sampling mass and ``M`` the total mass of the allowed starts.
        candidates: How many allowed starts have a mass ``> 0`` (``N``; ``N * P(i)`` is
            ALF's importance weight).
    """

    env_ids: Array
    steps: Array
    ids: Array
    probabilities: Array
    candidates: int


class PriorityMass(NamedTuple):
    """The sampling masses of a prioritized buffer, read at one instant
    (:meth:`PrioritizedReplayBuffer.priority_mass`).

    Attributes:
        total: ``M = sum_i m_i`` over the sampleable transitions, ``m_i`` each one's sampling
            mass (``p_i ** alpha``, or its rank mass); ``P(i) = m_i / M``.
        smallest: The smallest mass ``> 0`` (``P_min * M``, what importance weights are
            normalised by); ``inf`` when no transition has a mass ``> 0``.
        sampleable: The sampleable transitions
            (:attr:`~rlreplay.ReplayBuffer.num_sampleable`).
    """

    total: float
    smallest: float
    sampleable: int


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

    _tracks_sampleable = True

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
        self.alpha = _real("alpha", alpha)
        self._beta0 = _real("beta", beta)
        self.beta_final = _real("beta_final", beta_final)
        self.beta_steps = int_at_least("beta_steps", beta_steps, 0)
        self.eps = _real("eps", eps)
        if variant not in VARIANTS:
            raise ConfigError(f"variant: expected one of {VARIANTS}, got {variant!r}")
        self.variant = variant
        self.initial_priority = _real("initial_priority", initial_priority)
        if self.initial_priority <= 0.0:
            raise ConfigError(f"initial_priority: expected a value > 0, got {initial_priority}")
        self.priority_clip = _clip_range(priority_clip)
        if not isinstance(stratified, bool | np.bool_):
            raise ConfigError(f"stratified: expected a bool, got {stratified!r}")
        self.stratified = bool(stratified)
        if sort_interval is not None:
            if variant != "rank_based":
                raise ConfigError("sort_interval: applies to variant='rank_based' only")
            sort_interval = int_at_least("sort_interval", sort_interval, 1)
        self.sort_interval = sort_interval
        super().__init__(capacity, fields, **kwargs)
        _check_uniform_only(self.draw_options)
        self._beta_step = 0
        self._max_priority = 0.0
        self._priorities = Priorities(
            self.num_envs,
            self.env_capacity,
            alpha=self.alpha,
            variant=variant,
            sort_interval=sort_interval,
        )
        try:
            self._prios.check_priority(self.initial_priority)
        except PriorityError as exc:
            raise ConfigError(f"initial_priority: {exc}") from None

    # ------------------------------------------------------------------ properties
    @property
    def _prios(self) -> Priorities:
        """The priorities, up to date: steps the index deferred are accounted for first."""
        self._index.settle()
        return self._priorities

    @property
    def beta(self) -> float:
        """The importance exponent the next :meth:`sample` (or ``sample_sequences``) uses.

        ``beta + (beta_final - beta) * min(1, k / beta_steps)`` after ``k`` samples; ``beta``
        when ``beta_steps == 0``.
        """
        with self._lock:
            if self.beta_steps == 0:
                return self._beta0
            frac = min(1.0, self._beta_step / self.beta_steps)
            return self._beta0 + (self.beta_final - self._beta0) * frac

    @property
    def max_priority(self) -> float:
        """Largest priority ever applied by :meth:`update_priorities` (0 before any)."""
        with self._lock:
            return self._max_priority

    @property
    def nbytes(self) -> int:
        """Bytes allocated for stored data, the index, the priorities and their trees."""
        with self._lock:
            return super().nbytes + self._prios.nbytes

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
            prios = self._prios  # settles deferred steps first
            if prios.rank_based and prios.changes >= prios._sort_threshold():
                prios.resort()
            count = int(self._index.sizes().sum())
            return PriorityMass(float(prios.sum_tree.total), float(prios.min_tree.min), count)

    def _new_priority(self) -> float:
        return max(self.initial_priority, self._max_priority)

    # ------------------------------------------------------------------ writing
    def _settled(self, before: Array, t0: int, n: int) -> None:
        """:meth:`ReplayBuffer._settled` for one env without holes: the slots of the written,
        removed and added steps are ranges, so they go to the priorities without the general
        path's per-env arrays (e.g. one ``add`` then a read: ~5 µs instead of ~35)."""
        if (
            self.num_envs != 1
            or self._index.has_cuts
            or type(self)._on_write is not PrioritizedReplayBuffer._on_write  # a subclass's hook
        ):
            super()._settled(before, t0, n)
            return
        C = self._env_capacity
        lo0, hi0 = int(before[0, 0]), int(before[0, 1])
        after = self._index.env[0]  # (settled: the index reset its counters before the hook)
        lo1, hi1 = int(after[LO]), int(after[HI])
        self._priorities.on_write(
            np.arange(lo0, min(hi0, lo1)) % C,  # as sampleable_delta: removed, then added
            np.arange(max(t0, t0 + n - C), t0 + n) % C,
            self._new_priority(),
            np.arange(max(hi0, lo1), hi1) % C,
        )

    def _on_write(
        self,
        rows_env: Array,
        rows_t: Array,
        removed_env: Array,
        removed_t: Array,
        added_env: Array,
        added_t: Array,
    ) -> None:
        slots = self._index.slots
        self._prios.on_write(
            slots(removed_env, removed_t),
            slots(rows_env, rows_t),
            self._new_priority(),
            slots(added_env, added_t),
        )

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
        p = np.asarray(priorities)
        id_arr = np.asarray(ids)
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
            env_ids, t, slots, stale, n_stale = self._index.locate(id_arr.reshape(-1))
            if self._index.has_cuts:  # steps abandoned episodes left never sampleable: as stale
                live = np.flatnonzero(~stale)
                stale[live] = self._index.in_hole(env_ids[live], t[live])
                n_stale = int(stale.sum())
            top = self._prios.update(slots, stale, p, self.priority_clip, self.eps)
            self._max_priority = max(self._max_priority, top)
            return n_stale

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

    # ------------------------------------------------------------------ sampling
    def _draw(
        self, batch_size: int, opts: DrawOptions | None = None
    ) -> tuple[Array, Array, dict[str, Array]]:
        if opts is not None:
            _check_uniform_only(opts)
        index = self._index
        prios = self._prios  # settles the index first
        if not prios.drawable:
            if not index.sizes().any():
                raise EmptyBufferError(
                    f"sample: nothing is sampleable yet ({len(self)} stored transitions; a "
                    f"transition becomes sampleable once its {self.n_step}-step window is known)"
                )
            raise EmptyBufferError(
                "sample: every sampleable transition has priority 0; give some a priority > 0 "
                "with update_priorities"
            )
        env_ids, t, probabilities, weights = prios.draw(
            batch_size, self._rng, self.stratified, self.beta, index.env[:, LO]
        )
        self._beta_step += 1
        return env_ids, t, {"weights": weights, "probabilities": probabilities}

    def _fast_draw_args(self) -> tuple[Array, Array, float, float, bool] | None:
        """What the one-kernel sample draws from (:func:`rlreplay.sampling.onecall.sample_batch`):
        ``(sums, levels, min_mass, beta, stratified)`` of the sum tree, after the rank-based
        re-sort :meth:`Priorities.draw` would make; ``None`` when the general path must answer
        (a subclass drawing its own way, or nothing drawable: it raises the error)."""
        if type(self)._draw is not PrioritizedReplayBuffer._draw:
            return None
        prios = self._prios  # settles the index first
        if not prios.drawable:
            return None
        if prios.rank_based and prios.changes >= prios._sort_threshold():
            prios.resort()
        return (*prios.tree_args(), self.beta, bool(self.stratified))

    def _fast_drawn(self) -> None:
        """A one-kernel sample was drawn: the beta schedule's step, as :meth:`_draw` takes it."""
        self._beta_step += 1

    def _draw_starts(
        self,
        batch_size: int,
        length: int,
        within_episode: bool,
        pad: bool,
        balance_envs: bool = False,
    ) -> tuple[Array, Array, dict[str, Array]]:
        """Sequence starts by priority (R2D2): a sequence carries its first step's priority.

        Starts are drawn among the sampleable transitions (those holding a priority), with the
        same ``weights``, ``probabilities`` and ``beta`` schedule as :meth:`sample`; update a
        sequence's priority through its ``batch.ids`` (first steps). With ``pad=False`` only
        starts whose ``length`` steps are all real qualify and ``P`` is renormalised over
        them: that draw enumerates the candidates, ``O(N)`` per call.
        """
        if balance_envs:
            raise ConfigError(
                "balance_envs: prioritized sequence starts are drawn by priority over all envs"
            )
        if pad:
            return self._draw(batch_size)
        index = self._index
        env_ids, t = index.sampleable_steps()
        ok = valid_sequence_starts(index, env_ids, t, length, within_episode)
        env_ids, t = env_ids[ok], t[ok]
        try:
            pos, probabilities, weights = self._prios.draw_among(
                index.slots(env_ids, t), batch_size, self._rng, self.stratified, self.beta
            )
        except EmptyBufferError:
            raise EmptyBufferError(
                f"sample_sequences: no start with a priority > 0 has {length} real steps "
                f"(pad=False; {self.num_sampleable} sampleable transitions)"
            ) from None
        self._beta_step += 1
        return env_ids[pos], t[pos], {"weights": weights, "probabilities": probabilities}

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
        with self._lock:
            self._check_open()
            lo, hi = self._step_bounds("first", first), self._step_bounds("end", end)
            index, prios = self._index, self._prios  # settles deferred steps first
            env = index.env
            a_lo = np.maximum(env[:, LO], lo)
            a_env, a_t = expand_ranges(a_lo, np.maximum(np.minimum(env[:, HI], hi) - a_lo, 0))
            if prios.rank_based and prios.changes >= prios._sort_threshold():
                prios.resort()  # the masses read below are the ones the draws use
            masses = prios.sum_tree.get(index.slots(a_env, a_t))
            total = float(masses.sum())
            if not total > 0.0:
                raise EmptyBufferError(
                    f"sample_starts: no start in [first, end) = [{lo.tolist()}, {hi.tolist()}) "
                    f"has a priority > 0 ({a_t.shape[0]} sampleable starts there)"
                )
            env_ids, t = self._draw_in_bounds(n, lo, hi, a_env, a_t, masses, total)
            m = prios.sum_tree.get(index.slots(env_ids, t))
            return PriorityStarts(
                env_ids, t, index.ids(env_ids, t), m / total, int(np.count_nonzero(masses))
            )

    def _step_bounds(self, name: str, value: Any) -> Array:
        arr = np.asarray(value)
        if arr.shape != (self.num_envs,) or arr.dtype.kind not in "iu":
            raise ShapeError(
                f"{name}: expected an integer array of shape ({self.num_envs},) (one step per "
                f"env), got {arr.dtype} of shape {arr.shape}"
            )
        return arr.astype(np.int64)

    def _draw_in_bounds(
        self, n: int, lo: Array, hi: Array, a_env: Array, a_t: Array, masses: Array, total: float
    ) -> tuple[Array, Array]:
        """``n`` draws by mass from the tree, redrawing those outside ``[lo, hi)``."""
        prios, start = self._prios, self._index.env[:, LO]
        env_ids, t, _, _ = prios.draw(n, self._rng, self.stratified, 0.0, start)
        for _ in range(_REJECTION_ROUNDS):
            bad = (t < lo[env_ids]) | (t >= hi[env_ids])
            if not bad.any():
                return env_ids, t
            k = int(bad.sum())
            env_ids[bad], t[bad], _, _ = prios.draw(k, self._rng, self.stratified, 0.0, start)
        bad = (t < lo[env_ids]) | (t >= hi[env_ids])
        if bad.any():  # the excluded starts hold nearly all the mass: draw the rest exactly
            pick = self._rng.choice(a_t.shape[0], size=int(bad.sum()), p=masses / total)
            env_ids[bad], t[bad] = a_env[pick], a_t[pick]
        return env_ids, t

    # ------------------------------------------------------------------ state
    def _config(self) -> dict[str, Any]:
        config = super()._config()
        config.update(
            alpha=self.alpha,
            beta=self._beta0,
            beta_final=self.beta_final,
            beta_steps=self.beta_steps,
            eps=self.eps,
            variant=self.variant,
            initial_priority=self.initial_priority,
            priority_clip=None if self.priority_clip is None else list(self.priority_clip),
            stratified=self.stratified,
            sort_interval=self.sort_interval,
        )
        return config

    def _state_meta(self) -> dict[str, Any]:
        meta = super()._state_meta()
        meta["priorities"] = {
            "beta_step": self._beta_step,
            "max_priority": self._max_priority,
            **self._prios.state_meta(),
        }
        return meta

    def _state_arrays(self) -> dict[str, Array]:
        arrays = super()._state_arrays()
        arrays.update({f"priorities/{k}": v for k, v in self._prios.state_arrays().items()})
        return arrays

    def _load_meta(self, meta: Mapping[str, Any]) -> None:
        super()._load_meta(meta)
        own = dict(meta["priorities"])
        beta_step, top = int(own["beta_step"]), float(own["max_priority"])
        if beta_step < 0 or not (math.isfinite(top) and 0.0 <= top <= self._prios._limit):
            raise CheckpointError(
                f"checkpoint: beta_step {beta_step} (expected >= 0) or max_priority {top!r} "
                f"(expected finite in [0, {self._prios._limit:.3g}]) is out of range"
            )
        self._beta_step, self._max_priority = beta_step, top
        self._prios.load_meta(own)

    def _after_load(self) -> None:
        super()._after_load()
        env_ids, t = self._index.sampleable_steps()
        self._prios.restore(self._index.slots(env_ids, t))
