"""The prioritized device buffer: :class:`DevicePrioritizedReplayBuffer`, a
:class:`~rlreplay.torch.buffer.DeviceReplayBuffer` that draws by priority from the trees of
:class:`~rlreplay.torch.prioritized.Priorities`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from rlreplay.errors import InvalidIdError, PriorityError, ShapeError
from rlreplay.limits import RateLimiter
from rlreplay.sampling.prioritized_args import _check_uniform_only, _real
from rlreplay.spec import Field, positive_int
from rlreplay.torch.batch import DeviceBatch
from rlreplay.torch.buffer import DeviceReplayBuffer
from rlreplay.torch.config import make_config
from rlreplay.torch.prioritized import Priorities
from rlreplay.torch.transforms import DeviceTransform

if TYPE_CHECKING:
    from torch import Tensor

__all__ = ["DevicePrioritizedReplayBuffer"]


class DevicePrioritizedReplayBuffer(DeviceReplayBuffer):
    """A :class:`DeviceReplayBuffer` that samples by priority, with importance weights: the
    proportional or rank-based law of :class:`rlreplay.PrioritizedReplayBuffer` (see
    :mod:`rlreplay.torch.prioritized`), over float64 sum and min trees on the device
    (proportional: their nodes are bit for bit the core's for the same leaf masses; a mass
    ``p ** alpha`` from torch's ``pow`` can be one unit in the last place from NumPy's).

    As the core: ``P(i) = p_i ** alpha / sum_k p_k ** alpha`` over the sampleable transitions,
    ``weights = (P_min / P(i)) ** beta`` (float32) with ``P_min`` over the whole buffer,
    ``probabilities`` (float64) in every batch, ``beta`` moving along its schedule once per
    :meth:`sample` (a host counter), new transitions at ``max(initial_priority,
    max_priority)``, stratified draws by default. Differences, besides the uniform buffer's:

    * ``variant="rank_based"`` ranks exactly at every draw (the core's ``sort_interval=1``,
      which :meth:`to_replay_buffer` sets; as the JAX buffer): ``P(i) = rank(i) ** -alpha /
      sum_k rank(k) ** -alpha`` over the drawable transitions, ``rank = 1 + #{larger
      priorities}``, equal priorities sharing a rank; each :meth:`sample` (and prioritized
      :meth:`sample_sequences`) sorts the priorities on the device, ``O(capacity log
      capacity)`` (see :mod:`rlreplay.torch.prioritized`).
    * :meth:`update_priorities` given device tensors cannot raise on their values: ids never
      issued and priorities that are negative, NaN, infinite or too large (see the core) are
      ignored, like overwritten ids. Given NumPy arrays or lists, it checks them on the host
      and raises as the core does (``InvalidIdError``, ``PriorityError``).
    * ``finals_per_env`` defaults to ``C`` (no episode is ever dropped for a final record). A
      smaller value makes every :meth:`add` recompute every leaf (``O(E * C)``), since
      whether an episode was dropped is a device value.

    Args:
        alpha, beta, beta_final, beta_steps, eps, initial_priority, priority_clip, stratified:
            The law, as for :class:`rlreplay.PrioritizedReplayBuffer`.
        variant: ``"proportional"`` or ``"rank_based"``.
        sort_interval: Rank-based: ``None`` or ``1`` (ranks are exact at every draw).
        **kwargs: Every other :class:`DeviceReplayBuffer` argument but the draw options.

    Cost: :meth:`add` also sets ``E * (n_step + frame_stack)`` leaves; :meth:`sample` adds a
    descent of ``O(B * levels)``; :meth:`update_priorities` is ``O(B * levels)``. In torch
    ops: about 80 more per :meth:`add` (one update of the sum and min trees, about 10 ops
    per level), 10 per level for a descent, about 110 per :meth:`update_priorities`.
    Rank-based: :meth:`sample` is a sort of the ``capacity`` priorities and a binary search
    per draw instead of the descent (about 12 ms at capacity 100,000 on one CPU thread).
    """

    _prio: Priorities

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
        num_envs: int = 1,
        n_step: int = 1,
        gamma: float = 0.99,
        frame_stack: int = 1,
        stack_pad: str = "zero",
        next_fields: Sequence[str] = (),
        finals_per_env: int | None = None,
        device: Any = "cpu",
        seed: int | None = None,
        rate_limiter: RateLimiter | None = None,
        transforms: Sequence[DeviceTransform] = (),
    ) -> None:
        config = make_config(
            capacity, fields, num_envs=num_envs, n_step=n_step, gamma=gamma,
            frame_stack=frame_stack, stack_pad=stack_pad, next_fields=next_fields,
            finals_per_env=finals_per_env, prioritized=True, alpha=alpha, beta=beta,
            beta_final=beta_final, beta_steps=beta_steps, eps=eps, variant=variant,
            initial_priority=initial_priority, priority_clip=priority_clip,
            stratified=stratified, sort_interval=sort_interval,
        )  # fmt: skip
        self._setup(config, device, seed, rate_limiter, transforms)

    alpha = property(lambda self: self.config.alpha, doc="Prioritization exponent.")
    eps = property(lambda self: self.config.eps, doc="Added to every updated priority.")
    variant = property(
        lambda self: "rank_based" if self.config.rank_based else "proportional",
        doc='``"proportional"`` or ``"rank_based"``.',
    )

    @property
    def beta(self) -> float:
        """The importance exponent of the next :meth:`sample`."""
        return self._prio.beta()

    @property
    def beta_step(self) -> int:
        """Samples drawn so far: the ``beta`` schedule's step."""
        return self._prio.beta_step

    @property
    def max_priority(self) -> Tensor:
        """The largest priority :meth:`update_priorities` applied (a 0-d float64 tensor)."""
        return self._prio.max_priority

    def sample(
        self,
        batch_size: int,
        *,
        recent_ratio: float | None = None,
        recent_steps: int | None = None,
        replacement: bool | None = None,
        check: bool = False,
        beta: float | None = None,
        timeout: float | None = None,
        transform: DeviceTransform | None = None,
    ) -> DeviceBatch:
        """Draw ``batch_size`` transitions by priority.

        Args:
            batch_size: Transitions to draw.
            recent_ratio, recent_steps, replacement: Refused when they ask for recency or no
                replacement (as the core refuses them).
            check: As :meth:`DeviceReplayBuffer.sample`.
            beta: The importance exponent of this draw (default: the schedule's, which then
                advances one step).
            timeout: As :meth:`DeviceReplayBuffer.sample` (a ``rate_limiter`` that refuses
                the batch raises at once).
            transform: As :meth:`DeviceReplayBuffer.sample` (a raising transform also puts
                ``beta``'s step back).

        Returns:
            A :class:`DeviceBatch` with ``weights`` (float32) and ``probabilities``
            (float64); where nothing is drawable, both 0.
        """
        from rlreplay.sampling.uniform import draw_options

        batch_size = positive_int("batch_size", batch_size)
        self._budget.check("batch_size", batch_size, batch_size, "sample")
        options = draw_options(
            0.0 if recent_ratio is None else recent_ratio,
            1 if recent_steps is None else recent_steps,
            True if replacement is None else replacement,
        )
        _check_uniform_only(options)
        if beta is not None:
            beta = _real("beta", beta)

        def draw() -> DeviceBatch:
            self._reads.check_nonempty(check)
            env, t, probabilities, weights = self._prio.draw(batch_size, self._gen, beta)
            out = self._assembler.transitions(env, t)
            out["weights"] = weights
            out["probabilities"] = probabilities
            return DeviceBatch(out)

        fns = self._reads.transforms_of(transform, True)
        return self._reads.paced(batch_size, timeout, "sample", draw, fns)

    def update_priorities(self, ids: Any, priorities: Any) -> Tensor:
        """Set the priorities of transitions, typically ``abs(td_error)`` of a sampled batch.

        Each priority is clipped to ``priority_clip`` (if set), then ``eps`` is added. Ids of
        transitions overwritten (or cleared) since they were issued are ignored, and so are
        those an abandoned episode left never sampleable (:meth:`abandon_episode`); with
        duplicate ids the last one wins (only priorities that take effect count towards
        :attr:`max_priority`). A transition stored but not sampleable yet keeps the priority
        for when it becomes sampleable.

        Args:
            ids: Transition ids (``batch.ids``), any shape: a tensor or host values.
            priorities: One per id (same shape): a tensor or host values.

        Returns:
            A 0-d int64 tensor: how many ids were ignored (overwritten or in an abandoned
            episode's hole; with tensor inputs also never issued or with an invalid value).

        Raises:
            ShapeError: ``priorities`` and ``ids`` differ in shape.
            DTypeError: Non-integer ids.
            InvalidIdError: Host ids never issued by this buffer (tensor ids: ignored).
            PriorityError: A host priority NaN, infinite, negative or too large (tensor
                values: ignored).

        Nothing is changed when an error is raised.
        """
        import torch

        id_shape = tuple(ids.shape) if isinstance(ids, torch.Tensor) else np.shape(ids)
        p_shape = (
            tuple(priorities.shape)
            if isinstance(priorities, torch.Tensor)
            else np.shape(priorities)
        )
        if id_shape != p_shape:
            raise ShapeError(
                f"update_priorities: priorities must have the shape of ids {id_shape}, got "
                f"{p_shape}"
            )
        if not isinstance(ids, torch.Tensor):
            host = np.asarray(ids)
            if host.dtype.kind in "iu" and host.size:
                self._check_issued(host)
        idx = self._ids(ids)
        if isinstance(priorities, torch.Tensor):
            if priorities.dtype.is_complex or priorities.dtype == torch.bool:
                raise PriorityError(f"priorities: expected real numbers, got {priorities.dtype}")
            p = priorities.to(self.device, torch.float64).reshape(-1)
        else:
            try:
                kind = np.asarray(priorities).dtype.kind
            except (TypeError, ValueError):  # ragged nests: refused below
                kind = "O"
            if kind not in "iufO":  # (bools, complex, dates: no priorities, as in the core)
                raise PriorityError(f"priorities: expected real numbers, got {priorities!r:.80}")
            try:
                host_p = np.asarray(priorities, dtype=np.float64).reshape(-1)
            except (TypeError, ValueError, OverflowError):  # (an int beyond float64's range)
                raise PriorityError(
                    f"update_priorities: expected real numbers (float64), got {priorities!r}"
                ) from None
            bad = ~(np.isfinite(host_p) & (host_p >= 0))
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise PriorityError(
                    f"priorities: expected finite values >= 0, got {host_p[i]!r} at position {i} "
                    "(pass abs(td_error); NaN usually means the loss diverged)"
                )
            limit = self._prio.limit
            if host_p.size and host_p.max() > limit:
                raise PriorityError(
                    f"priorities: {float(host_p.max())!r} is above {limit:.3g}, the largest "
                    f"whose mass ** alpha={self.config.alpha} {self.config.num_slots} slots can "
                    "sum without overflow; scale the priorities down"
                )
            p = torch.from_numpy(host_p.copy()).to(self.device, non_blocking=True)
        return self._prio.update(idx, p)

    def _check_issued(self, host: np.ndarray[Any, Any]) -> None:
        """Raise for host ids never issued (per env when envs are counted per env: with the
        host copy of the counts, or, when unknown, only negative ids)."""
        ring, E = self._ring, self.config.num_envs
        flat = host.reshape(-1).astype(np.int64)
        if not ring.per_env:
            issued = ring.count * E
            bad = (flat < 0) | (flat >= issued)
            what = f"ids issued so far: 0 .. {issued - 1}"
        elif ring.host_counts is not None:
            bad = (flat < 0) | (flat // E >= ring.host_counts[flat % E])
            what = f"steps added per env: {ring.host_counts.tolist()}"
        else:
            bad = flat < 0
            what = "ids are >= 0"
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InvalidIdError(
                f"update_priorities: id {int(flat[i])} at position {i} was never issued ({what})"
            )

    def get_priorities(self, ids: Any) -> Tensor:
        """The stored priority (float64) of each id's slot (meaningful for stored ids)."""
        import torch

        idx = self._ids(ids)
        c = self.config
        env = torch.remainder(idx, c.num_envs)
        t = torch.div(idx, c.num_envs, rounding_mode="floor")
        return self._prio.prio.index_select(0, self._ring.rows_of(t, env))
