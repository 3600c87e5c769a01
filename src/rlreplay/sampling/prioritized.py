"""The prioritized sampler (Schaul et al., 2015): proportional or rank-based draws with
importance weights, over the priorities of :mod:`rlreplay.sampling.priorities`.

:class:`PrioritizedSampler` owns the parameters of the law (``alpha``, the ``beta`` schedule,
``eps``, clipping, the variant), the per-slot priorities and their trees, the largest priority
applied so far and the schedule's step. It hears of every change of the sampleable set
(``tracks_sampleable``): a written step gets ``max(initial_priority, max_priority)`` and
becomes drawable once the index makes it sampleable. The law, the weights and their
normalisation are documented on :class:`rlreplay.PrioritizedReplayBuffer`, the buffer built
with this sampler.

Knows nothing of how a transition is assembled or stored.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from rlreplay.assemble.sequences import valid_sequence_starts
from rlreplay.episodes.index import HI, LO, EpisodeIndex, expand_ranges
from rlreplay.errors import CheckpointError, ConfigError, EmptyBufferError, PriorityError
from rlreplay.sampling.base import Draw, settled_rows
from rlreplay.sampling.priorities import VARIANTS, Priorities
from rlreplay.sampling.prioritized_args import _check_uniform_only, _clip_range, _real
from rlreplay.sampling.uniform import DrawOptions, draw_options
from rlreplay.sampling.uniform_sampler import nothing_sampleable
from rlreplay.spec.schema import int_at_least

__all__ = ["PrioritizedSampler", "PriorityMass", "PriorityStarts", "device_law"]

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


class PrioritizedSampler:
    """Draws by priority, proportional or rank-based, with annealed importance weights.

    The arguments are those of :class:`rlreplay.PrioritizedReplayBuffer` (which documents the
    law); the sampler checks them when it is made and allocates its priorities when a buffer
    binds it.

    Example:
        >>> import numpy as np, rlreplay as rr
        >>> from rlreplay.sampling import PrioritizedSampler
        >>> buf = rr.ReplayBuffer(16, {"obs": rr.Field((), np.float32)},
        ...                       sampler=PrioritizedSampler(alpha=0.7), seed=0)
    """

    name = "prioritized"
    tracks_sampleable = True

    def __init__(
        self,
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
    ) -> None:
        self.alpha = _real("alpha", alpha)
        self.beta0 = _real("beta", beta)
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
        self.beta_step = 0  # samples drawn so far: the beta schedule's step
        self.max_priority = 0.0  # largest priority applied by update()
        self._priorities: Priorities | None = None
        #: The one-call kernel that reproduces :meth:`draw`: none for a subclass that draws
        #: its own way.
        self.kernel: str | None = (
            "prioritized" if type(self).draw is PrioritizedSampler.draw else None
        )

    # ------------------------------------------------------------------ binding
    def bind(self, index: EpisodeIndex, options: DrawOptions) -> None:
        if self._priorities is not None:
            raise ConfigError("sampler: this sampler already belongs to another buffer")
        self.check_options(options)
        priorities = Priorities(
            index.num_envs,
            index.env_capacity,
            alpha=self.alpha,
            variant=self.variant,
            sort_interval=self.sort_interval,
        )
        try:
            priorities.check_priority(self.initial_priority)
        except PriorityError as exc:
            raise ConfigError(f"initial_priority: {exc}") from None
        self._priorities = priorities

    def check_options(self, options: DrawOptions) -> None:
        _check_uniform_only(options)

    @property
    def raw(self) -> Priorities:
        """The priorities as they are (without settling the index first)."""
        if self._priorities is None:
            raise ConfigError("sampler: not bound to a buffer yet")
        return self._priorities

    def priorities(self, index: EpisodeIndex) -> Priorities:
        """The priorities, up to date: steps the index deferred are accounted for first."""
        index.settle()
        return self.raw

    @property
    def beta(self) -> float:
        """The importance exponent of the next draw (see the buffer's ``beta``)."""
        if self.beta_steps == 0:
            return self.beta0
        frac = min(1.0, self.beta_step / self.beta_steps)
        return self.beta0 + (self.beta_final - self.beta0) * frac

    def new_priority(self) -> float:
        """The priority a newly written step gets."""
        return max(self.initial_priority, self.max_priority)

    @property
    def nbytes(self) -> int:
        return 0 if self._priorities is None else self._priorities.nbytes

    # ------------------------------------------------------------------ writes
    def on_write(
        self,
        index: EpisodeIndex,
        rows_env: Array,
        rows_t: Array,
        removed_env: Array,
        removed_t: Array,
        added_env: Array,
        added_t: Array,
    ) -> None:
        slots = index.slots
        self.priorities(index).on_write(
            slots(removed_env, removed_t),
            slots(rows_env, rows_t),
            self.new_priority(),
            slots(added_env, added_t),
        )

    def on_settle(self, index: EpisodeIndex, before: Array, t0: int, n: int) -> None:
        """With one env and no holes the written, removed and added slots are ranges: they go
        straight to the priorities (one ``add`` then a read: ~5 µs instead of ~35); otherwise,
        and for a subclass with its own :meth:`on_write`, the general path."""
        if (
            index.num_envs != 1
            or index.has_cuts
            or type(self).on_write is not PrioritizedSampler.on_write
        ):
            rows_env, rows_t = settled_rows(index.num_envs, index.env_capacity, t0, n)
            self.on_write(index, rows_env, rows_t, *index.sampleable_changes(before))
            return
        C = index.env_capacity
        lo0, hi0 = int(before[0, 0]), int(before[0, 1])
        after = index.env[0]  # (settled: the index reset its counters before the hook)
        lo1, hi1 = int(after[LO]), int(after[HI])
        self.raw.on_write(
            np.arange(lo0, min(hi0, lo1)) % C,  # as sampleable_delta: removed, then added
            np.arange(max(t0, t0 + n - C), t0 + n) % C,
            self.new_priority(),
            np.arange(max(hi0, lo1), hi1) % C,
        )

    def update(self, index: EpisodeIndex, ids: Any, priorities: Any) -> int:
        """Apply ``priorities`` (float64, one per id, flat) to the transitions ``ids``;
        stale ids and the holes of abandoned episodes are ignored and counted."""
        p = np.asarray(priorities, np.float64).reshape(-1)
        env_ids, t, slots, stale, n_stale = index.locate(np.asarray(ids).reshape(-1))
        if index.has_cuts:  # steps abandoned episodes left never sampleable: as stale
            live = np.flatnonzero(~stale)
            stale[live] = index.in_hole(env_ids[live], t[live])
            n_stale = int(stale.sum())
        top = self.priorities(index).update(slots, stale, p, self.priority_clip, self.eps)
        self.max_priority = max(self.max_priority, top)
        return n_stale

    # ------------------------------------------------------------------ draws
    def draw(
        self, index: EpisodeIndex, batch_size: int, rng: np.random.Generator, options: DrawOptions
    ) -> Draw:
        _check_uniform_only(options)
        prios = self.priorities(index)  # settles the index first
        if not prios.drawable:
            if not index.sizes().any():
                raise nothing_sampleable(index)
            raise EmptyBufferError(
                "sample: every sampleable transition has priority 0; give some a priority > 0 "
                "with update_priorities"
            )
        env_ids, t, probabilities, weights = prios.draw(
            batch_size, rng, self.stratified, self.beta, index.env[:, LO]
        )
        self.beta_step += 1
        return Draw(env_ids, t, weights, probabilities)

    def fast_draw_args(self, index: EpisodeIndex) -> tuple[Array, Array, float, float, bool] | None:
        """What the one-call kernel draws from (:mod:`rlreplay.sampling.onecall`):
        ``(sums, levels, min_mass, beta, stratified)`` of the sum tree, after the rank-based
        re-sort :meth:`Priorities.draw` would make; ``None`` when the general path must answer
        (nothing drawable: it raises the error)."""
        prios = self.priorities(index)
        if not prios.drawable:
            return None
        if prios.rank_based and prios.changes >= prios._sort_threshold():
            prios.resort()
        return (*prios.tree_args(), self.beta, self.stratified)

    def drawn(self) -> None:
        """A one-call sample was drawn: the beta schedule's step, as :meth:`draw` takes it."""
        self.beta_step += 1

    def draw_starts(
        self,
        index: EpisodeIndex,
        batch_size: int,
        rng: np.random.Generator,
        *,
        length: int,
        within_episode: bool,
        pad: bool,
        balance_envs: bool,
    ) -> Draw:
        """Sequence starts by priority (R2D2): a sequence carries its first step's priority.

        Starts are drawn among the sampleable transitions (those holding a priority), with the
        same ``weights``, ``probabilities`` and ``beta`` schedule as :meth:`draw`. With
        ``pad=False`` only starts whose ``length`` steps are all real qualify and ``P`` is
        renormalised over them: that draw enumerates the candidates, ``O(N)`` per call.
        """
        if balance_envs:
            raise ConfigError(
                "balance_envs: prioritized sequence starts are drawn by priority over all envs"
            )
        if pad:
            return self.draw(index, batch_size, rng, DrawOptions(0.0, 1, True))
        env_ids, t = index.sampleable_steps()
        ok = valid_sequence_starts(index, env_ids, t, length, within_episode)
        env_ids, t = env_ids[ok], t[ok]
        try:
            pos, probabilities, weights = self.priorities(index).draw_among(
                index.slots(env_ids, t), batch_size, rng, self.stratified, self.beta
            )
        except EmptyBufferError:
            raise EmptyBufferError(
                f"sample_sequences: no start with a priority > 0 has {length} real steps "
                f"(pad=False; {int(index.sizes().sum())} sampleable transitions)"
            ) from None
        self.beta_step += 1
        return Draw(env_ids[pos], t[pos], weights, probabilities)

    def mass(self, index: EpisodeIndex) -> PriorityMass:
        """The total and smallest mass and the sampleable count, from the trees the next draw
        uses (rank-based: after the re-sort that draw would make)."""
        prios = self.priorities(index)
        if prios.rank_based and prios.changes >= prios._sort_threshold():
            prios.resort()
        count = int(index.sizes().sum())
        return PriorityMass(float(prios.sum_tree.total), float(prios.min_tree.min), count)

    def sample_starts(
        self, index: EpisodeIndex, rng: np.random.Generator, n: int, lo: Array, hi: Array
    ) -> PriorityStarts:
        """``n`` starts by mass among the sampleable steps ``lo[e] <= t < hi[e]`` (see
        :meth:`rlreplay.PrioritizedReplayBuffer.sample_starts`)."""
        prios = self.priorities(index)
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
        env_ids, t = self._draw_in_bounds(index, rng, n, lo, hi, (a_env, a_t, masses / total))
        m = prios.sum_tree.get(index.slots(env_ids, t))
        return PriorityStarts(
            env_ids, t, index.ids(env_ids, t), m / total, int(np.count_nonzero(masses))
        )

    def _draw_in_bounds(
        self,
        index: EpisodeIndex,
        rng: np.random.Generator,
        n: int,
        lo: Array,
        hi: Array,
        allowed: tuple[Array, Array, Array],
    ) -> tuple[Array, Array]:
        """``n`` draws by mass from the tree, redrawing those outside ``[lo, hi)``; after
        :data:`_REJECTION_ROUNDS` rounds the rest exactly among ``allowed`` (env, t, P)."""
        prios, start = self.raw, index.env[:, LO]
        env_ids, t, _, _ = prios.draw(n, rng, self.stratified, 0.0, start)
        for _ in range(_REJECTION_ROUNDS):
            bad = (t < lo[env_ids]) | (t >= hi[env_ids])
            if not bad.any():
                return env_ids, t
            k = int(bad.sum())
            env_ids[bad], t[bad], _, _ = prios.draw(k, rng, self.stratified, 0.0, start)
        bad = (t < lo[env_ids]) | (t >= hi[env_ids])
        if bad.any():  # the excluded starts hold nearly all the mass: draw the rest exactly
            a_env, a_t, p = allowed
            pick = rng.choice(a_t.shape[0], size=int(bad.sum()), p=p)
            env_ids[bad], t[bad] = a_env[pick], a_t[pick]
        return env_ids, t

    # ------------------------------------------------------------------ state
    def config(self) -> dict[str, Any]:
        return {
            "alpha": self.alpha,
            "beta": self.beta0,
            "beta_final": self.beta_final,
            "beta_steps": self.beta_steps,
            "eps": self.eps,
            "variant": self.variant,
            "initial_priority": self.initial_priority,
            "priority_clip": None if self.priority_clip is None else list(self.priority_clip),
            "stratified": self.stratified,
            "sort_interval": self.sort_interval,
        }

    def state_meta(self) -> dict[str, Any]:
        return {
            "priorities": {
                "beta_step": self.beta_step,
                "max_priority": self.max_priority,
                **self.raw.state_meta(),
            }
        }

    def state_arrays(self) -> dict[str, Array]:
        return {f"priorities/{k}": v for k, v in self.raw.state_arrays().items()}

    def state_rows(self) -> dict[str, tuple[str | int, Any]]:
        """See :meth:`rlreplay.sampling.Sampler.state_arrays` (optional): the priorities of
        stored steps only, and the used part of the rank snapshot."""
        return {f"priorities/{k}": v for k, v in self.raw.state_rows().items()}

    def load_meta(self, meta: Mapping[str, Any]) -> None:
        own = dict(meta["priorities"])
        beta_step, top = int(own["beta_step"]), float(own["max_priority"])
        limit = self.raw._limit
        if beta_step < 0 or not (math.isfinite(top) and 0.0 <= top <= limit):
            raise CheckpointError(
                f"checkpoint: beta_step {beta_step} (expected >= 0) or max_priority {top!r} "
                f"(expected finite in [0, {limit:.3g}]) is out of range"
            )
        self.beta_step, self.max_priority = beta_step, top
        self.raw.load_meta(own)

    def after_load(self, index: EpisodeIndex) -> None:
        env_ids, t = index.sampleable_steps()
        self.raw.restore(index.slots(env_ids, t))


def device_law(
    backend: str,
    prioritized: bool,
    recent_ratio: float,
    recent_steps: int,
    replacement: bool,
    **per: Any,
) -> tuple[PrioritizedSampler, DrawOptions]:
    """The sampling law of a device buffer (``rlreplay.torch``, ``rlreplay.jax``), checked as
    the core checks its own: the priority arguments by a :class:`PrioritizedSampler` (with its
    messages), ranks exact at every draw (``sort_interval`` ``None`` or 1, the only rank-based
    law a device buffer keeps), and the draw options, uniform-only for a prioritized buffer.

    Raises:
        ConfigError: Naming the argument, what was expected and what came.
    """
    sampler = PrioritizedSampler(**per)
    if sampler.sort_interval not in (None, 1):
        raise ConfigError(
            f"sort_interval: the {backend} ranks every draw exactly (the core's "
            f"sort_interval=1); expected None or 1, got {sampler.sort_interval!r}"
        )
    options = draw_options(recent_ratio, recent_steps, replacement)
    if prioritized:
        _check_uniform_only(options)
    return sampler, options
