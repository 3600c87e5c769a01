"""The episode bookkeeping of a device buffer: per-env counters and per-row arrays, as tensors
on the device updated in place.

Layout (``E`` envs, ``C = capacity // E`` slots per env, ``F`` final records per env), that of
:class:`rlreplay.storage.TorchStorage` and of the NumPy core:

* Step ``t`` of env ``e`` has the id ``t * E + e`` and lives in row ``e * C + t % C`` of every
  column (env ``e``'s ring is rows ``e * C .. e * C + C - 1``).
* Steps counted per env: ``head`` (oldest stored step), ``last_end`` and the sampleable range
  ``[lo, hi)`` are per env, as in :class:`rlreplay.episodes.EpisodeIndex`, and so is the
  count of steps added, in one of two modes:

  - *Lockstep* (every :meth:`advance` so far wrote one step of every env): one counter
    ``count``, a host int, serves all envs. Which rows an add writes is then known on the
    host, and the bookkeeping is the fewest ops (``add`` without ``env_ids``).
  - *Per env* (from the first :meth:`advance_envs`, an add of a subset of the envs, on):
    ``counts``, an ``(E,)`` int64 tensor on the device. An add of envs given as a device
    tensor cannot update a host counter without reading the device, so the counters live
    where the env ids live; the ids and rows of env ``e`` are ``t_e * E + e`` and ``e * C +
    t_e % C`` with its own ``t_e``. The ring also keeps a host copy of the counts
    (``host_counts``) while every subset came from the host (NumPy arrays, lists), and
    forgets it (``None``) at the first subset given as a device tensor.

  :attr:`now` is the count in either mode (a host int, or the ``(E,)`` tensor), for code that
  broadcasts it against per-env tensors; :meth:`env_counts` reads it on the host.
* Final observations of ended episodes live in a ring of ``F`` records per env (row
  ``e * F + fid % F`` of each finals column), owned by the step that ended the episode
  (``final_owner``); ``final_fid`` names a step's record (``-1``: the step does not end its
  episode). Records ``[f_head, f_count)`` are live.
* The counters are kept in the form an add updates with the fewest ops: ``next_start =
  last_end + 1`` and ``final_end = final_owner + 1`` (read back by :attr:`Ring.last_end` and
  :attr:`Ring.final_owner`), ``f_count`` next to ``f_count - F``.
* ``next_joint`` is each step's next observation as a row of the storage's joint observation
  tensors (:meth:`rlreplay.storage.TorchStorage.joint`): its final record's row
  (``E * C + e * F + fid % F``) where it ends its episode, else the row of the env's next
  step, so that a transition's ``next_<obs>`` is one gather with no select. A step's
  ``ep_start``, ``final_fid``, ``next_joint`` and ``fid_end = final_fid + 1`` (what an add
  reads of the step it overwrites) are the columns of one ``(E * C, 4)`` tensor
  (``row_info``), which an add writes with one ``index_copy_``.

The rules are the NumPy core's (:mod:`rlreplay.episodes.index`), per env:

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

from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from rlreplay.torch.config import DeviceConfig
from rlreplay.torch.holes import Holes

if TYPE_CHECKING:
    import torch
    from torch import Tensor

__all__ = ["Candidates", "Ring"]


class Candidates(NamedTuple):
    """What a draw reads of the sampleable steps (:meth:`Ring.candidates`)."""

    #: ``(E,)`` sampleable steps per env.
    sizes: Tensor
    #: ``(start, length)``, each ``(E, H)``, of the holes' parts in ``[lo, hi)``; ``None``
    #: while no env has a hole.
    spans: tuple[Tensor, Tensor] | None


class Ring:
    """The index of a device buffer (see the module docstring).

    Attributes:
        count: Steps each env has added, a host int (lockstep mode only; setting it puts the
            ring in lockstep mode).
        counts: Per-env mode: ``(E,)`` int64, steps each env has added; ``None`` in lockstep.
        host_counts: Per-env mode: the same on the host while known, else ``None``.
        head, lo, hi, f_count, f_head: ``(E,)`` int64 tensors (with ``frame_stack = 1``,
            ``lo`` is ``head``: the same tensor).
        next_start: ``(E,)`` int64, ``last_end + 1`` (the ring keeps this; :attr:`last_end`
            reads it).
        row_info: ``(E * C, 4)`` per row: the columns ``ep_start`` (the first step of the
            row's episode), ``final_fid`` (the step's final record, -1 if it does not end its
            episode), ``next_joint`` (see the module docstring) and ``fid_end`` (``final_fid +
            1``, which an abandoned episode's mark leaves as it was), each also an attribute
            (a view).
        final_end: ``(E * F + E,)`` per record, the step after the one that owns it (``owner
            + 1``; 0: none), then a spare entry per env that adds write where no episode
            ends (:attr:`final_owner` reads it).
        spare: ``(E,)`` the joint observation tensors' spare rows (``E * C + E * F + e``),
            where an add writes the next observation of a step that ends no episode.
        envs: ``arange(E)``; ``env_base``: ``envs * C``; ``final_base``: ``envs * F``;
        final_joint: ``final_base + E * C``, the joint rows of each env's records.
    """

    def __init__(self, config: DeviceConfig, device: torch.device) -> None:
        import torch

        E, C, F = config.num_envs, config.env_capacity, config.finals_per_env
        self.config = config
        self.device = device

        def zeros(n: int, fill: int = 0) -> Tensor:
            return torch.full((n,), fill, dtype=torch.int64, device=device)

        self._count = 0
        self.counts: Tensor | None = None
        self.host_counts: np.ndarray[Any, Any] | None = None
        self.head, self.hi = zeros(E), zeros(E)
        # With k = 1, lo is head (the same tensor); with k > 1 settle sets it.
        self.lo = self.head if config.frame_stack == 1 else zeros(E)
        self.f_head = zeros(E)
        self.envs = torch.arange(E, dtype=torch.int64, device=device)
        self.env_base = self.envs * C
        self.final_base = self.envs * F
        self.final_joint = self.final_base + E * C
        # Per row: ep_start, final_fid, next_joint, fid_end, as the columns of one tensor, so
        # that an add writes a step's four with one index_copy_.
        self.row_info = torch.zeros((E * C, 4), dtype=torch.int64, device=device)
        self.ep_start, self.final_fid, self.next_joint, self.fid_end = self.row_info.unbind(1)
        self.final_fid.fill_(-1)
        self.next_joint.copy_(self.successors())
        # Per record (row e * F + fid % F), then one spare entry per env: the step after the
        # record's owner (owner + 1; 0: no owner), so that an add reads the owner of the
        # slot it reuses and writes the new one with no select (a step that ends no episode
        # writes its env's spare entry).
        self.final_end = zeros(E * F + E)
        # Per env, the columns of one tensor (E, 13): 0 next_start (the step after the env's
        # last end: last_end + 1), 1 f_count, 3 f_count + 1, 5 f_count - F (counters, kept
        # here); 4 holds -1 and 12 holds 0; 2, 6 and 8 are scratch an add fills: the new
        # record's joint row and its entry of final_end, and the env's next row. Columns 0:4
        # are what an add writes to row_info where the step ends its episode, columns 0, 4,
        # 8, 12 where not, so one where picks a step's four values.
        info = torch.zeros((E, 13), dtype=torch.int64, device=device)
        info[:, 3], info[:, 4], info[:, 5] = 1, -1, -F
        self.next_start, self.f_count = info[:, 0], info[:, 1]
        self._counters, self._f_low = info[:, 1:6:2], info[:, 5]  # f_count, + 1, - F
        self.spare = self.envs + (E * C + E * F)  # the joint tensors' spare rows
        # Views and constants advance uses, made once.
        self._views = (
            info[:, 0:4], info[:, 0:13:4], info[:, 2:7:4].t(), info[:, 8],
            torch.stack([self.final_joint, self.final_base]),
            torch.stack([self.spare, self.envs + E * F]),
        )  # fmt: skip
        self.holes: Holes | None = None  # abandoned episodes' holes (rlreplay.torch.holes)

    # ------------------------------------------------------------------ counts
    @property
    def last_end(self) -> Tensor:
        """``(E,)``: each env's last step that ended an episode (-1: none), a fresh tensor
        (``next_start - 1``; the ring keeps ``next_start``, which is what to write)."""
        return self.next_start - 1

    @property
    def count(self) -> int:
        """Steps every env has added (lockstep mode; per-env mode raises ``RuntimeError``:
        read :meth:`env_counts`)."""
        if self.counts is not None:
            raise RuntimeError(
                "Ring.count: the envs are counted per env (an add gave env_ids); read "
                "env_counts() or now"
            )
        return self._count

    @count.setter
    def count(self, value: int) -> None:
        self._count = int(value)
        self.counts = None
        self.host_counts = None

    @property
    def per_env(self) -> bool:
        """Whether the ring counts steps per env (see the module docstring)."""
        return self.counts is not None

    @property
    def now(self) -> int | Tensor:
        """Steps added: the host int ``count`` in lockstep mode, else the ``(E,)`` tensor."""
        return self._count if self.counts is None else self.counts

    def now_of(self, env: Tensor) -> int | Tensor:
        """Steps added by envs ``env``: the host int in lockstep mode, else a tensor like
        ``env``."""
        return self._count if self.counts is None else self.counts.index_select(0, env)

    def env_counts(self) -> np.ndarray[Any, Any]:
        """``(E,)`` int64 on the host: steps each env has added (waits for the device in
        per-env mode unless the host copy is known)."""
        E = self.config.num_envs
        if self.counts is None:
            return np.full(E, self._count, np.int64)
        if self.host_counts is not None:
            return self.host_counts.copy()
        return np.array(self.counts.cpu().numpy(), np.int64)  # (a copy, not a view on a CPU)

    def set_counts(self, counts: Any) -> None:
        """Set the steps each env has added (``(E,)`` ints on the host): lockstep mode when
        they are all equal, else per-env mode."""
        import torch

        a = np.asarray(counts, np.int64).reshape(-1)
        if a.shape != (self.config.num_envs,):
            raise ValueError(f"counts: expected shape ({self.config.num_envs},), got {a.shape}")
        if (a == a[0]).all():
            self.count = int(a[0])
            return
        self.counts = torch.from_numpy(a.copy()).to(self.device)
        self.host_counts = a.copy()

    def to_per_env(self) -> Tensor:
        """Switch to per-env mode (if not already) and return ``counts``."""
        import torch

        if self.counts is None:
            E = self.config.num_envs
            self.counts = torch.full((E,), self._count, dtype=torch.int64, device=self.device)
            self.host_counts = np.full(E, self._count, np.int64)
        return self.counts

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
        ok = (t >= self.lo.index_select(0, env)) & (t < self.hi.index_select(0, env))
        if self.holes is not None:
            ok &= ~self.holes.in_hole(self.rows_of(t, env), t)
        return ok

    def candidates(self) -> Candidates:
        """The sampleable steps now: per env their count and the holes' parts in ``[lo,
        hi)``, computed once for a draw's every use."""
        sizes = (self.hi - self.lo).clamp_min(0)
        if self.holes is None:
            return Candidates(sizes, None)
        spans = self.holes.clipped(self.lo, self.hi)
        return Candidates(sizes - spans[1].sum(1), spans)

    def sizes(self) -> Tensor:
        """``(E,)`` sampleable steps per env."""
        return self.candidates().sizes

    def unhole(self, env: Tensor, t: Tensor, cands: Candidates) -> Tensor:
        """Steps ``lo + p`` of positions ``p`` among the sampleable steps of envs ``env``
        (``[lo, hi)`` less the holes of ``cands``, from :meth:`candidates`): ``t`` itself
        when no env has a hole."""
        if cands.spans is None:
            return t
        return Holes.unhole(env, t, *cands.spans)

    def prune_holes(self, heads: np.ndarray[Any, Any]) -> None:
        """Forget holes wholly below ``heads`` (host lower bounds of each env's ``head``)."""
        if self.holes is not None:
            self.holes.prune(heads)
            if self.holes.empty:
                self.holes = None

    # ------------------------------------------------------------------ updates
    def successors(self) -> Tensor:
        """``(E * C,)``: the row of the step after each row's (the next row of its env's
        ring), which is a step's ``next_joint`` unless it ends its episode."""
        import torch

        C = self.config.env_capacity
        rows = torch.arange(self.row_info.shape[0], dtype=torch.int64, device=self.device)
        return rows - torch.remainder(rows, C) + torch.remainder(rows + 1, C)

    def relink(self) -> None:
        """Recompute ``next_joint`` from ``final_fid`` (after ``final_fid`` was loaded): the
        joint row of the step's final record where it ends its episode, else the next row."""
        import torch

        c = self.config
        C, F = c.env_capacity, c.finals_per_env
        fid = self.final_fid
        env = torch.div(torch.arange(fid.shape[0], device=self.device), C, rounding_mode="floor")
        final = self.final_joint.index_select(0, env) + torch.remainder(fid, F)
        self.next_joint.copy_(torch.where(fid >= 0, final, self.successors()))
        torch.add(fid, 1, out=self.fid_end)
        self.refresh_counters()

    @property
    def final_owner(self) -> Tensor:
        """``(E * F,)`` per record: the step that owns it (-1: none), a fresh tensor (from
        ``final_end``, which is what to write)."""
        return self.final_end[: self.config.num_envs * self.config.finals_per_env] - 1

    def advance(self, done: Tensor) -> tuple[Tensor, Tensor]:
        """Account for one new step of every env (``done``: ``(E,)`` bool, which of them end
        their episode) before its values are stored.

        Returns:
            ``(rows, next_rows)``: the ``E`` rows the step goes to, and the rows of the
            joint observation tensors (:meth:`rlreplay.storage.TorchStorage.joint`) its next
            observations go to: the env's new final record where ``done``, else its spare
            row.
        """
        import torch

        c = self.config
        E, C, F, n = c.num_envs, c.env_capacity, c.finals_per_env, c.n_step
        if self.counts is not None:
            all_envs = np.arange(E)
            return self.advance_envs(self.envs, done, all_envs)[:2]
        t = self._count
        done_info, other_info, new_rows, after, bases, spares = self._views
        rows = self.env_base + t % C
        # The step this one overwrites (t - C) frees its final record if it has a live one:
        # the oldest live record, since live records belong to stored steps.
        torch.maximum(self.f_head, self.fid_end.index_select(0, rows), out=self.f_head)
        # The new record's joint row and final_end entry; where the step ends no episode,
        # the env's spare ones.
        torch.add(torch.remainder(self.f_count, F), bases, out=new_rows)
        next_rows, entries = torch.where(done, new_rows, spares)
        d = done[:, None]
        if c.can_evict:
            # A new record with F live: the oldest (fid - F, in the same slot) goes, and with
            # it the episode that owns it. A slot's dead record belongs to a step before head
            # (its owner was overwritten, dropped or cleared), so moving head past the owner
            # of the slot's record wherever an episode ends changes head only where F were
            # live. (With F >= C records never run out: an env stores at most C steps.)
            evict = self.final_end.index_select(0, entries).mul_(done)  # (spare entries: 0)
            torch.maximum(self.head, evict, out=self.head)
        self.head.clamp_(min=t + 1 - C)
        torch.add(self.env_base, (t + 1) % C, out=after)
        self.row_info.index_copy_(0, rows, torch.where(d, done_info, other_info))
        self.next_start.masked_fill_(done, t + 1)
        self.final_end.index_copy_(0, entries, self.next_start)  # (t + 1 where done)
        self._count = t + 1
        torch.clamp(self.next_start, min=t + 1 - n, out=self.hi)
        self._counters.add_(d)  # f_count, f_count + 1, f_count - F
        if c.can_evict:  # at most F live records
            torch.maximum(self.f_head, self._f_low, out=self.f_head)
        return rows, next_rows

    def advance_envs(
        self, env: Tensor, done: Tensor, host_env: np.ndarray[Any, Any] | None = None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Account for one new step of each of the envs ``env`` (``(K,)`` int64, distinct;
        ``done``: ``(K,)`` bool) before its values are stored, in per-env mode (switching to it
        if needed). ``host_env``: the same envs on the host, if known (keeps ``host_counts``).

        The same rules as :meth:`advance`, for the envs in ``env``; the others' counters and
        rows are left as they are. ``O(E + K)`` ops of fixed shapes, no host synchronisation.

        Returns:
            ``(rows, next_rows, t, stepping)``: the ``K`` rows the steps go to, the joint rows
            their next observations go to (as :meth:`advance`'s), each one's step ``t``, and
            the ``(E,)`` bool mask of the envs that stepped.
        """
        import torch

        c = self.config
        E, C, F, n = c.num_envs, c.env_capacity, c.finals_per_env, c.n_step
        counts = self.to_per_env()
        if host_env is None:
            self.host_counts = None
        elif self.host_counts is not None:
            self.host_counts[host_env] += 1
        s = torch.zeros(E, dtype=torch.bool, device=self.device).index_fill_(0, env, True)
        d = torch.zeros(E, dtype=torch.bool, device=self.device).index_copy_(0, env, done)
        t_env = counts.index_select(0, env)
        oldest = self.final_end.index_select(0, self.final_base + torch.remainder(self.f_head, F))
        self.f_head.add_(s & (self.f_head < self.f_count) & (oldest == counts + 1 - C))
        fid = self.f_count
        slot = torch.remainder(fid, F)
        pos = self.final_base + slot
        old_end = self.final_end.index_select(0, pos)
        torch.maximum(self.head, counts + s.long() - C, out=self.head)
        if c.can_evict:
            full = d & (fid - self.f_head >= F)
            self.head.copy_(torch.where(full, torch.maximum(self.head, old_end), self.head))
            self.f_head.add_(full)
        tc = torch.remainder(t_env, C)
        base = self.env_base.index_select(0, env)
        rows = tc + base
        final_rows = (slot + self.final_joint).index_select(0, env)
        after = torch.remainder(tc + 1, C).add_(base)
        fid_env = torch.where(done, fid.index_select(0, env), -1)
        info = torch.stack(
            [
                self.next_start.index_select(0, env),
                fid_env,
                torch.where(done, final_rows, after),
                fid_env + 1,
            ],
            1,
        )
        self.row_info.index_copy_(0, rows, info)
        counts.add_(s)
        self.final_end.index_copy_(0, pos, torch.where(d, counts, old_end))
        self.next_start.copy_(torch.where(d, counts, self.next_start))
        self.hi.copy_(torch.where(s, torch.maximum(self.next_start, counts - n), self.hi))
        self._counters.add_(d[:, None])  # f_count, f_count + 1, f_count - F
        next_rows = torch.where(done, final_rows, self.spare.index_select(0, env))
        return rows, next_rows, t_env, s

    def refresh_counters(self) -> None:
        """Recompute what the ring keeps from ``f_count`` (after it was set from outside)."""
        import torch

        offsets = torch.tensor([0, 1, -self.config.finals_per_env], device=self.device)
        torch.add(self.f_count.clone()[:, None], offsets, out=self._counters)

    def settle(self, terminated: Tensor, truncated: Tensor) -> None:
        """Set ``lo`` from the new ``head`` and ``count``, once the step's columns are stored
        (``terminated`` / ``truncated``: the stored columns)."""
        import torch

        k = self.config.frame_stack
        head, count = self.head, self.now
        if k == 1:  # lo is head
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
            if self.holes is not None:  # an abandoned episode ends at its mark too
                end |= self.final_fid.index_select(0, row) == -2
            lo_cut = torch.where((j < count) & end, j + 1, lo_cut)
        self.lo.copy_(torch.where(cut, lo_cut, head))

    def dequeue(self, env: Tensor, n: int) -> None:
        """Drop the oldest ``n`` stored steps of the envs ``env`` (distinct, each holding at
        least ``n``), as the core's ``EpisodeIndex.dequeue``: ``head`` moves ``n`` on, the
        final records owned by dropped steps are freed, ``hi`` is recomputed (call
        :meth:`settle` for ``lo``). ``O(E * F)`` ops of fixed shapes."""
        import torch

        c = self.config
        E, F = c.num_envs, c.finals_per_env
        s = torch.zeros(E, dtype=torch.bool, device=self.device).index_fill_(0, env, True)
        self.head.add_(s.long() * n)
        # Live records are ordered by owner: those owned by dropped steps are a prefix.
        fid = self.f_head[:, None] + torch.arange(F, dtype=torch.int64, device=self.device)
        end = self.final_end[self.final_base[:, None] + torch.remainder(fid, F)]
        dead = (fid < self.f_count[:, None]) & (end <= self.head[:, None])  # owner < head
        self.f_head.add_(dead.sum(1))
        floor = self.now - c.n_step  # (the core's bound)
        if isinstance(floor, int):
            hi = self.next_start.clamp_min(floor)
        else:
            hi = torch.maximum(self.next_start, floor)
        self.hi.copy_(torch.where(s, hi, self.hi))

    def clear(self) -> None:
        """Nothing stored: ``head = lo = hi = count`` and no live final record, as the core's
        ``EpisodeIndex.clear``; ``last_end`` and the per-row arrays stay (a running episode
        goes on, its start now before ``head``)."""
        import torch

        counts = self.counts
        for t in (self.head, self.lo, self.hi):
            if counts is None:
                t.clamp_(min=self._count)
            else:
                torch.maximum(t, counts, out=t)
        self.f_head.copy_(self.f_count)
        self.holes = None  # every hole is below the new head
