"""Proportional priorities of a device buffer over float64 sum and min trees on the device
(:class:`rlreplay.sampling.torch_trees.TorchSumTree` / ``TorchMinTree``, the NumPy trees'
layout and arithmetic).

The law is :class:`rlreplay.PrioritizedReplayBuffer`'s (``variant="proportional"``): over the
sampleable transitions, ``P(i) = p_i ** alpha / sum_k p_k ** alpha``; a transition of priority
0 is never drawn; importance weights are ``(P_min / P(i)) ** beta`` with ``P_min`` the smallest
probability over the whole buffer (the min tree's root); a new transition gets
``max(initial_priority, largest priority applied so far)`` when it is written; updates are
clipped to ``priority_clip``, ``eps`` is added, ids whose transition was overwritten are
ignored, and of an id given several times the last value wins. Slots are the core's (row
``e * C + t % C``), so leaves, masses (``p ** alpha`` in float64) and nodes are the core's.

A leaf holds a slot's mass only while the slot's step is sampleable. One :meth:`add` changes
the sampleable set of each env in two bounded places (see :mod:`rlreplay.torch.ring`): the
newest ``n_step + 1`` steps (``hi`` moves) and the ``frame_stack - 1`` steps at the head
(``lo`` moves past a cut episode's start); their leaves are recomputed, ``E * (n_step +
frame_stack)`` in all. Only an eviction (an env dropping its oldest episode for a final
record, possible when ``finals_per_env < C``) moves ``lo`` further; since whether one happened
is a device value, a buffer that can evict recomputes every leaf at every add (``O(E * C)``;
the default ``finals_per_env = C`` of a prioritized buffer never evicts).

Rank-based (``variant="rank_based"``): the core's law with exact ranks at every draw (its
``sort_interval=1``, as :mod:`rlreplay.jax.rank`): over the drawable slots (sampleable,
priority ``> 0``), ``rank = 1 + #{drawable priorities > p}`` (competition ranking: equal
priorities share a rank), mass ``rank ** -alpha`` (float64), ``P(i)`` the mass over the total
and weights ``(smallest mass / mass) ** beta``. One new priority can move every rank, so the
trees hold a mass of 1 per drawable slot (writes and updates cost what they cost a
proportional buffer; the sum tree's root counts the drawable slots) and each draw ranks every
slot with one :func:`torch.sort` (:meth:`Priorities.rank_masses`, ``O(N log N)``) and draws by
the cumulative masses (:func:`draw_by_masses`, a binary search per draw): static shapes, no
host synchronisation.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from rlreplay.sampling.torch_trees import TorchMinTree, TorchSumTree
from rlreplay.torch.config import DeviceConfig

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from rlreplay.torch.ring import Ring

__all__ = ["Priorities", "draw_by_masses", "priority_limit"]


def priority_limit(config: DeviceConfig) -> float:
    """The largest priority whose mass ``p ** alpha`` keeps every sum over the slots finite
    (the core's ``Priorities._priority_limit``; rank-based masses are at most 1)."""
    if config.rank_based or config.alpha <= 0.0:
        return math.inf
    mass_limit = float(np.finfo(np.float64).max) / (2 * config.num_slots)
    with np.errstate(over="ignore"):
        return float(np.power(mass_limit, 1.0 / config.alpha))


class Priorities:
    """Per-slot float64 priorities, the sum and min trees of their masses, the largest
    priority applied (a 0-d tensor) and ``beta``'s step (a host int: samples drawn)."""

    def __init__(self, config: DeviceConfig, ring: Ring) -> None:
        import torch

        dev = ring.device
        N = config.num_slots
        self.config, self.ring = config, ring
        self.prio = torch.zeros(N, dtype=torch.float64, device=dev)
        self.sums = TorchSumTree(N, dev)
        self.mins = TorchMinTree(N, dev)
        self.max_priority = torch.zeros((), dtype=torch.float64, device=dev)
        self.beta_step = 0
        self.limit = priority_limit(config)
        self._winner = torch.full((N,), -1, dtype=torch.int64, device=dev)
        self._all = torch.arange(N, dtype=torch.int64, device=dev)
        self._positions: dict[int, Tensor] = {}
        n, k = config.n_step, config.frame_stack
        self._back = torch.arange(n + 1, dtype=torch.int64, device=dev)[:, None]
        self._front = torch.arange(k - 1, dtype=torch.int64, device=dev)[:, None]

    # ------------------------------------------------------------------ leaves
    def mass(self, p: Tensor) -> Tensor:
        """The tree's mass of priorities ``p`` (0 stays 0, even with ``alpha = 0``); rank-based:
        1 for ``p > 0`` (the rank masses are computed at each draw, :meth:`rank_masses`)."""
        import torch

        if self.config.rank_based:
            return (p > 0).to(torch.float64)
        return torch.where(p > 0, torch.pow(p, self.config.alpha), 0.0)

    def _set(self, rows: Tensor, prio: Tensor | None, mass: Tensor) -> None:
        """Leaves ``rows`` (duplicates carry equal values) get ``prio`` (``None``: they keep
        theirs) and ``mass``."""
        import torch

        if prio is not None:
            self.prio.index_copy_(0, rows, prio)
        path = self.sums.path(rows)  # the same nodes in both trees
        self.sums.set_tensors(rows, mass, path)
        self.mins.set_tensors(rows, torch.where(mass > 0, mass, math.inf), path)

    def new_priority(self) -> Tensor:
        """``max(initial_priority, largest priority applied)``: a 0-d tensor."""
        return self.max_priority.clamp_min(self.config.initial_priority)

    def after_write(self, stepping: Tensor | None = None) -> None:
        """The new steps get the new-transition priority, and the leaves of every step whose
        sampleability the write may have changed are recomputed (``stepping``: per-env mode,
        the ``(E,)`` mask of the envs that added a step; the others' leaves are recomputed
        to what they hold)."""
        import torch

        ring = self.ring
        C = self.config.env_capacity
        E = ring.envs.shape[0]
        now = ring.now
        if isinstance(now, int):
            t: int | Tensor = now - 1  # the step just written
            back = (now - 1 - self._back).expand(-1, E)
        else:
            t = now - 1
            back = t[None, :] - self._back
        # (n_step + frame_stack, E): one row of steps per offset, one column per env.
        steps = torch.cat([back, ring.head[None, :] + self._front])
        rows = torch.remainder(steps, C).add_(ring.env_base).view(-1)
        live = ((steps >= ring.lo) & (steps < ring.hi)).view(-1)
        if ring.holes is not None:  # abandoned episodes' holes are never sampleable
            live &= ~ring.holes.in_hole(rows, steps.view(-1))
        new = steps == t
        if stepping is not None:
            new &= stepping
        prio = torch.where(new.view(-1), self.new_priority(), self.prio.index_select(0, rows))
        mass = torch.where(live, self.mass(prio), 0.0)
        # (A step before the first, or past the newest, maps to a row no stored step holds:
        # its leaf keeps its priority and gets mass 0, which it has.)
        self._set(rows, prio, mass)
        if self.config.can_evict:
            self.rebuild()

    def rebuild(self) -> None:
        """Every leaf's mass from the priorities and the sampleable ranges: ``O(E * C)``."""
        env, t = self.ring.step_in_row(self._all)
        live = self.ring.sampleable(env, t)
        mass = self.mass(self.prio) * live
        self._set(self._all, None, mass)

    def clear(self) -> None:
        """No slot drawable (priorities, the largest one and ``beta``'s step stay)."""
        self._set(self._all, None, self.prio.new_zeros(self.prio.shape))

    # ------------------------------------------------------------------ updates
    def update(self, ids: Tensor, p: Tensor) -> Tensor:
        """Apply priorities ``p`` (float64) to ``ids`` (int64), both flat on the device.

        Ignored: ids overwritten or never issued, ids of an abandoned episode's hole (never
        sampleable), values negative, NaN, infinite or above :func:`priority_limit`. Of an id
        given several times the last applied value wins.

        Returns:
            A 0-d int64 tensor: how many ids were ignored.
        """
        import torch

        c, ring = self.config, self.ring
        E, C = c.num_envs, c.env_capacity
        env = torch.remainder(ids, E)
        t = torch.div(ids, E, rounding_mode="floor")
        # (t >= head >= 0 also refuses negative ids: their t is negative.)
        ok = (t >= ring.head.index_select(0, env)) & (t < ring.now_of(env))
        if ring.holes is not None:  # abandoned episodes' holes: ignored, as stale ids
            ok &= ~ring.holes.in_hole(ring.rows_of(t, env), t)
        ok &= (p >= 0) & (p <= self.limit)
        if math.isinf(self.limit):  # (inf <= inf: refuse infinite values too)
            ok &= p < math.inf
        if c.priority_clip is not None:
            p = p.clamp(c.priority_clip[0], c.priority_clip[1])
        p = p + c.eps
        rows = torch.add(torch.remainder(t, C), env, alpha=C)  # env * C + t % C
        # The last valid entry of each row wins; every entry of the row writes its value.
        pos = self._positions.get(ids.shape[0])
        if pos is None:  # kept per batch size
            pos = torch.arange(ids.shape[0], dtype=torch.int64, device=ids.device)
            self._positions[ids.shape[0]] = pos
        self._winner.index_fill_(0, rows, -1)
        self._winner.scatter_reduce_(0, rows, torch.where(ok, pos, -1), "amax")
        win = self._winner.index_select(0, rows)
        has = win >= 0
        w = win.clamp_min(0)
        t_w = t.index_select(0, w)
        new = torch.where(has, p.index_select(0, w), self.prio.index_select(0, rows))
        live = ring.sampleable(env, t_w)
        mass = torch.where(has, self.mass(new) * live, self.sums.get(rows))
        self._set(rows, new, mass)
        top = torch.where(win == pos, p, 0.0).amax(0) if ids.shape[0] else p.new_zeros(())
        torch.maximum(self.max_priority, top, out=self.max_priority)
        return (~ok).sum()

    # ------------------------------------------------------------------ draws
    def beta(self) -> float:
        """The importance exponent of the next draw (the core's schedule: linear from
        ``beta`` to ``beta_final`` over ``beta_steps`` samples)."""
        c = self.config
        if c.beta_steps == 0:
            return c.beta
        frac = min(1.0, self.beta_step / c.beta_steps)
        return c.beta + (c.beta_final - c.beta) * frac

    def rank_masses(self) -> Tensor:
        """``(N,)`` float64: each slot's exact rank mass ``rank ** -alpha``, 0 where the slot
        is not drawable (its leaf is 0). One descending :func:`torch.sort` of the priorities
        with the undrawable slots last: ``O(N log N)``, static shapes."""
        import torch

        drawable = self.sums.get(self._all) > 0
        # Priorities of drawable slots are finite and > 0, so their float64 bits order them as
        # int64 values do (equal bits: equal priorities), and integers sort faster; the
        # undrawable (-1) sort last.
        key = torch.where(drawable, self.prio.view(torch.int64), -1)
        ordered, order = torch.sort(key, descending=True)
        # Competition ranks: the sorted position of the first of each run of equal priorities.
        first = torch.ones_like(ordered, dtype=torch.bool)
        first[1:] = ordered[1:] != ordered[:-1]
        rank = torch.cummax(torch.where(first, self._all, 0), 0).values + 1
        mass = torch.where(ordered >= 0, torch.pow(rank.to(torch.float64), -self.config.alpha), 0.0)
        return torch.zeros_like(mass).index_copy_(0, order, mass)

    def draw(
        self, batch_size: int, gen: torch.Generator, beta: float | None = None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``batch_size`` draws by mass: ``(env, t, probabilities, weights)`` (with nothing
        drawable: arbitrary steps with probability and weight 0). Advances ``beta``'s step
        unless ``beta`` is given. Rank-based: by the exact rank masses (:meth:`rank_masses`)."""
        import torch

        if beta is None:
            beta = self.beta()
            self.beta_step += 1
        if self.config.rank_based:
            leaf, probabilities, weights = draw_by_masses(
                self.rank_masses(), self._all, batch_size, gen, self.config.stratified, beta
            )
            env, t = self.ring.step_in_row(leaf)
            return env, t, probabilities, weights
        u = torch.rand(batch_size, dtype=torch.float64, device=self.prio.device, generator=gen)
        return self.draw_proportional(u, beta)

    def draw_proportional(
        self, u: Tensor, beta: float | Tensor
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """:meth:`draw` of a proportional buffer from its float64 uniforms ``u`` (``(B,)`` in
        ``[0, 1)``), with ``beta`` given (a float, or a 0-d float64 tensor: the same
        weights)."""
        import torch

        leaf = self.sums.sample(u, stratified=self.config.stratified)
        m = self.sums.get(leaf)
        positive = m > 0
        safe = torch.where(positive, m, 1.0)
        probabilities = torch.where(positive, m / self.sums.total, 0.0)
        weights = torch.where(positive, torch.pow(self.mins.min / safe, beta), 0.0)
        env, t = self.ring.step_in_row(leaf)
        return env, t, probabilities, weights.to(torch.float32)


def draw_by_masses(
    masses: Tensor, rows: Tensor, batch_size: int, gen: torch.Generator, stratified: bool,
    beta: float,
) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """``(row, probabilities, weights)`` of ``batch_size`` draws of rows with probability
    ``masses / masses.sum()`` (the core's ``draw_among``): a cumulative sum and a binary search
    per draw, ``O(N)``; stratified or independent uniforms; weights (float32) normalised by the
    smallest positive mass. ``rows`` is ``arange(N)`` on the device. With every mass 0: row 0,
    probability and weight 0."""
    import torch

    cum = torch.cumsum(masses, 0)
    total = cum[-1]
    u = torch.rand(batch_size, dtype=torch.float64, device=masses.device, generator=gen)
    if stratified:
        i = torch.arange(batch_size, dtype=torch.float64, device=masses.device)
        target = (i + u) * (total / batch_size)
    else:
        target = u * total
    # The first row whose running sum exceeds the target skips zero-mass rows; a target rounded
    # up to the total falls back to the last positive row.
    positive = masses > 0
    last = torch.where(positive, rows, 0).amax()
    row = torch.minimum(torch.searchsorted(cum, target, right=True), last)
    m = masses.index_select(0, row)
    smallest = torch.where(positive, masses, torch.inf).amin()
    good = m > 0
    probabilities = torch.where(good, m / total, 0.0)
    weights = torch.where(good, torch.pow(smallest / torch.where(good, m, 1.0), beta), 0.0)
    return row, probabilities, weights.float()
