"""The episode bookkeeping of a device buffer: per-env counters and per-row arrays, as tensors
on the device updated in place.

Layout (``E`` envs, ``C = capacity // E`` slots per env, ``F`` final records per env), that of
:class:`rlreplay.storage.TorchStorage` and of the NumPy core:

* Step ``t`` of env ``e`` has the id ``t * E + e`` and lives in row ``e * C + t % C`` of every
  column (env ``e``'s ring is rows ``e * C .. e * C + C - 1``).
* Envs advance in lockstep (every :meth:`add` writes one step of each), so one counter
  ``count`` serves them all, and it is a host int: which rows an add writes is known without
  reading the device. ``head`` (oldest stored step), ``last_end`` and the sampleable range
  ``[lo, hi)`` are per env, as in :class:`rlreplay.episodes.EpisodeIndex`.
* Final observations of ended episodes live in a ring of ``F`` records per env (row
  ``e * F + fid % F`` of each finals column), owned by the step that ended the episode
  (``final_owner``); ``final_fid`` names a step's record (``-1``: the step does not end its
  episode). Records ``[f_head, f_count)`` are live.

The rules are the NumPy core's (:mod:`rlreplay.episodes.index`) for envs in lockstep:

* ``hi = max(last_end + 1, count - n_step)``: a step of a finished episode knows its whole
  window; a step ``t`` of a running episode needs its ``n_step`` successors.
* ``lo = head``, unless the oldest stored episode lost its start to overwriting and
  ``frame_stack = k > 1``: then its first ``k - 1`` stored steps (up to its end) would need
  overwritten frames and are skipped.
* A step that overwrites step ``t - C`` frees that step's final record, if it had one.

One rule is the device buffer's own (the JAX buffer's, :mod:`rlreplay.jax.ring`): an env keeps
at most ``F`` final records, since growing the finals ring would mean reading on the host how
many episodes ended. When an episode ends while ``F`` are live, the env's oldest stored
episode (the one that owns the oldest record) is dropped whole: ``head`` moves to the step
after its end, as the NumPy core's ``dequeue`` would move it. With ``F >= C`` this never
happens.

Every update here is a fixed sequence of torch ops on ``(E,)`` tensors and ``E`` rows of the
per-row arrays: no host synchronisation, no data-dependent shape.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlreplay.torch.config import DeviceConfig

if TYPE_CHECKING:
    import torch
    from torch import Tensor

__all__ = ["Ring"]


class Ring:
    """The index of a device buffer (see the module docstring).

    Attributes:
        count: Steps each env has added (a host int).
        head, lo, hi, last_end, f_count, f_head: ``(E,)`` int64 tensors.
        ep_start: ``(E * C,)`` per row: the first step of the row's episode.
        final_fid: ``(E * C,)`` per row: the step's final record, -1 if it does not end its
            episode.
        final_owner: ``(E * F,)`` per record: the step that owns it.
        envs: ``arange(E)``; ``env_base``: ``envs * C``; ``final_base``: ``envs * F``.
    """

    def __init__(self, config: DeviceConfig, device: torch.device) -> None:
        import torch

        E, C, F = config.num_envs, config.env_capacity, config.finals_per_env
        self.config = config
        self.device = device

        def zeros(n: int, fill: int = 0) -> Tensor:
            return torch.full((n,), fill, dtype=torch.int64, device=device)

        self.count = 0
        self.head, self.lo, self.hi = zeros(E), zeros(E), zeros(E)
        self.last_end = zeros(E, -1)
        self.f_count, self.f_head = zeros(E), zeros(E)
        self.ep_start = zeros(E * C)
        self.final_fid = zeros(E * C, -1)
        self.final_owner = zeros(E * F, -1)
        self.envs = torch.arange(E, dtype=torch.int64, device=device)
        self.env_base = self.envs * C
        self.final_base = self.envs * F

    # ------------------------------------------------------------------ rows
    def rows_of(self, t: Tensor, env: Tensor) -> Tensor:
        """Rows of steps ``t`` of envs ``env`` (any sign: a negative step maps to a row)."""
        import torch

        C = self.config.env_capacity
        return env * C + torch.remainder(t, C)

    def step_in_row(self, rows: Tensor) -> tuple[Tensor, Tensor]:
        """``(env, t)`` of the step in each row that could be sampleable: the one step of the
        row's residue in ``[lo, lo + C)`` (``hi - lo <= C``, so that is one-to-one)."""
        import torch

        C = self.config.env_capacity
        env = torch.div(rows, C, rounding_mode="floor")
        lo = self.lo.index_select(0, env)
        return env, lo + torch.remainder(rows - lo, C)  # rows = t (mod C)

    def sampleable(self, env: Tensor, t: Tensor) -> Tensor:
        """Whether steps ``t`` of envs ``env`` are sampleable now."""
        return (t >= self.lo.index_select(0, env)) & (t < self.hi.index_select(0, env))

    def sizes(self) -> Tensor:
        """``(E,)`` sampleable steps per env."""
        return (self.hi - self.lo).clamp_min(0)

    # ------------------------------------------------------------------ updates
    def advance(self, done: Tensor) -> tuple[Tensor, Tensor]:
        """Account for one new step of every env (``done``: ``(E,)`` bool, which of them end
        their episode) before its values are stored.

        Returns:
            ``(rows, final_pos)``: the ``E`` rows the step goes to, and the row of each env's
            new final record (meaningful where ``done``).
        """
        import torch

        c = self.config
        C, F, n = c.env_capacity, c.finals_per_env, c.n_step
        t = self.count
        # The step this one overwrites (t - C) gives up its final record if it owns the oldest
        # live one (live records belong to stored steps, and t - C is the oldest stored step).
        oldest = self.final_owner.index_select(0, self.final_base + torch.remainder(self.f_head, F))
        self.f_head.add_((self.f_head < self.f_count) & (oldest == t - C))
        fid = self.f_count  # the new record's number (f_count moves last)
        pos = self.final_base + torch.remainder(fid, F)
        old_owner = self.final_owner.index_select(0, pos)
        self.head.clamp_(min=t + 1 - C)
        if c.can_evict:
            # A new record with F live: the oldest (fid - F, at the same position) goes, and
            # with it the episode that owns it. (With F >= C records never run out: an env
            # stores at most C steps, so at most C ended episodes.)
            full = done & (fid - self.f_head >= F)
            self.head.copy_(torch.where(full, torch.maximum(self.head, old_owner + 1), self.head))
            self.f_head.add_(full)
        rows = self.env_base + t % C
        self.ep_start.index_copy_(0, rows, self.last_end + 1)
        self.final_fid.index_copy_(0, rows, torch.where(done, fid, -1))
        self.final_owner.index_copy_(0, pos, torch.where(done, t, old_owner))
        self.last_end.masked_fill_(done, t)
        self.count = t + 1
        torch.add(self.last_end, 1, out=self.hi).clamp_(min=t + 1 - n)
        self.f_count.add_(done)
        return rows, pos

    def settle(self, terminated: Tensor, truncated: Tensor) -> None:
        """Set ``lo`` from the new ``head`` and ``count``, once the step's columns are stored
        (``terminated`` / ``truncated``: the stored columns)."""
        import torch

        k = self.config.frame_stack
        head, count = self.head, self.count
        if k == 1:
            self.lo.copy_(head)
            return
        first = self.ep_start.index_select(0, self.rows_of(head, self.envs))
        cut = (head < count) & (first < head)
        lo_cut = head + (count - head).clamp_max(k - 1)
        # The cut episode's steps head .. head+k-2 are skipped up to and including its end:
        # the first end among them decides (the loop runs backwards so that the first wins).
        for i in range(k - 2, -1, -1):
            j = head + i
            row = self.rows_of(j, self.envs)
            end = terminated.index_select(0, row) | truncated.index_select(0, row)
            lo_cut = torch.where((j < count) & end, j + 1, lo_cut)
        self.lo.copy_(torch.where(cut, lo_cut, head))

    def clear(self) -> None:
        """Nothing stored: ``head = lo = hi = count`` and no live final record, as the core's
        ``EpisodeIndex.clear``; ``last_end`` and the per-row arrays stay (a running episode
        goes on, its start now before ``head``)."""
        for t in (self.head, self.lo, self.hi):
            t.clamp_(min=self.count)
        self.f_head.copy_(self.f_count)
