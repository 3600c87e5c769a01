"""Abandoned episodes on a device buffer: the steps ``abandon_episode`` leaves stored but never
sampleable ("holes"), as the NumPy core's (:mod:`rlreplay.episodes.cuts`).

``abandon_episode(e)`` (:meth:`rlreplay.torch.writing.Writes.abandon`) ends env ``e``'s
running episode at its newest step ``a`` with no final observation: the step's ``final_fid``
becomes :data:`ABANDONED` (the core's mark, so sequences stop there with ``next_known``
False, the next step starts a new episode and conversions carry it), ``last_end`` becomes
``a``, and ``hi`` moves to ``a + 1``. The
episode's steps ``t`` with ``t + n_step <= a`` keep their complete windows; its steps
``[max(a - n_step + 1, episode start), a]`` (the hole) would need steps that never come and
are never sampleable, so an env's sampleable steps are ``[lo, hi)`` less its holes.

Whether a step lies in a hole is a per-row mark (:attr:`Holes.step`, the hole step a row
holds, ``-1`` for none: a row whose step was overwritten no longer matches it), read by every
membership test (``sampleable``, priorities' leaves, draws without replacement). Uniform
draws stay exact as the core's: a draw is a position in the *compressed* range ``[lo, lo +
size)`` (``size`` without the holes), mapped past the holes before it (:meth:`Holes.unhole`),
a bijection onto the sampleable steps, so the recency mix keeps its meaning (the
``recent_steps`` newest sampleable steps). The holes themselves are host values: an abandon
reads the env's newest step and episode start on the host (one wait for the device, where
whether an episode runs is decided), so the host keeps each env's list of holes and hands
the device a ``(E, H)`` table of them, ``H`` the most holes an env may still store; holes
below ``lo`` (overwritten, cleared, dequeued) are clipped to nothing on the device and pruned
from the host lists when the host knows they are gone.

A ring without holes (none abandoned since it was made, or since its last ``clear``) has
``holes = None``, and every path is then the plain one, op for op.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from rlreplay.torch.config import DeviceConfig

__all__ = ["ABANDONED", "Holes", "holes_from_index"]

#: ``final_fid`` of a step that ends an abandoned episode (the core's mark).
ABANDONED = -2
_NONE = 1 << 62  # start of a padding hole: never reached


class Holes:
    """The holes of one ring: host lists per env and their device table.

    Attributes:
        lists: Per env, ``(start, end)`` (inclusive) of each hole, ascending.
        step: ``(E * C,)`` int64 on the device: per row, the hole step it holds (``-1``).
        start, end: ``(E, H)`` int64 on the device: the holes, ascending per env, padded
            with empty ones.
    """

    def __init__(self, num_envs: int, env_capacity: int, device: torch.device) -> None:
        import torch

        self.lists: list[list[tuple[int, int]]] = [[] for _ in range(num_envs)]
        self.env_capacity = env_capacity
        self.step = torch.full((num_envs * env_capacity,), -1, dtype=torch.int64, device=device)
        self.device = device
        self.start, self.end = self._table()

    def _table(self) -> tuple[Tensor, Tensor]:
        import torch

        H = max(1, *(len(holes) for holes in self.lists))
        start = np.full((len(self.lists), H), _NONE, np.int64)
        end = np.full((len(self.lists), H), _NONE - 1, np.int64)
        for e, holes in enumerate(self.lists):
            for j, (s, a) in enumerate(holes):
                start[e, j], end[e, j] = s, a
        return (
            torch.from_numpy(start).to(self.device, non_blocking=True),
            torch.from_numpy(end).to(self.device, non_blocking=True),
        )

    def add(self, e: int, start: int, end: int) -> None:
        """Env ``e``'s steps ``start .. end`` (its newest) are a new hole."""
        import torch

        self.lists[e].append((start, end))
        t = torch.arange(start, end + 1, dtype=torch.int64, device=self.device)
        C = self.env_capacity
        self.step.index_copy_(0, torch.remainder(t, C) + e * C, t)  # rows e * C + t % C
        self.start, self.end = self._table()

    def prune(self, heads: np.ndarray[Any, Any]) -> None:
        """Forget the holes wholly below ``heads`` (host lower bounds of each env's oldest
        stored step)."""
        kept = [[h for h in holes if h[1] >= heads[e]] for e, holes in enumerate(self.lists)]
        if kept != self.lists:
            self.lists = kept
            self.start, self.end = self._table()

    @property
    def empty(self) -> bool:
        """Whether no env has a hole left."""
        return not any(self.lists)

    # ------------------------------------------------------------------ device queries
    def clipped(self, lo: Tensor, hi: Tensor) -> tuple[Tensor, Tensor]:
        """``(start, length)`` ``(E, H)`` of each hole's part in ``[lo, hi)``."""
        import torch

        start = torch.maximum(self.start, lo[:, None])
        end = torch.minimum(self.end, hi[:, None] - 1)
        return start, (end - start + 1).clamp_min(0)

    @staticmethod
    def unhole(env: Tensor, t: Tensor, start: Tensor, length: Tensor) -> Tensor:
        """Steps ``t = lo + p`` of compressed positions ``p`` mapped past the holes before
        them (``start, length``: :meth:`clipped` for the ranges ``[lo, hi)``): ``O(H)`` ops
        over the batch."""
        s, n = start.index_select(0, env), length.index_select(0, env)
        for j in range(s.shape[1]):  # ascending: a step past hole j moves past it
            t = t + n[:, j] * (t >= s[:, j])
        return t

    def in_hole(self, rows: Tensor, t: Tensor) -> Tensor:
        """Whether steps ``t`` (in rows ``rows``) lie in holes."""
        return self.step.index_select(0, rows.reshape(-1)).view(t.shape) == t


def holes_from_index(
    config: DeviceConfig, device: torch.device, head: Any, count: Any, final_fid: Any,
    ep_start: Any,
) -> Holes | None:  # fmt: skip
    """The holes of an index's host arrays (its ``ABANDONED`` marks among the stored steps),
    as a conversion or checkpoint load brings them; ``None`` when there are none."""
    E, C, n = config.num_envs, config.env_capacity, config.n_step
    holes: Holes | None = None
    for e in range(E):
        for a in range(int(head[e]), int(count[e])):
            row = e * C + a % C
            if int(final_fid[row]) == ABANDONED:
                if holes is None:
                    holes = Holes(E, C, device)
                holes.add(e, max(a - n + 1, int(ep_start[row])), a)
    return holes
