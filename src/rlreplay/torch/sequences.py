"""Sequences of consecutive stored steps on the device (R2D2, ALF ``get_batch``): starts and
gathers, as :meth:`rlreplay.ReplayBuffer.sample_sequences` draws and builds them.

A run of length ``L`` starts at a stored step ``t0`` and has ``n_real`` real steps, up to the
newest stored step of its env and, ``within_episode``, up to the last step of ``t0``'s
episode; ``mask`` marks them (a prefix). Per-step fields are the raw stored ones, zero where
masked, and ``next_<obs>`` is the next step's observation, the final observation where a step
ends its episode, and zero where neither is known (``next_known``).

Starts, as the core draws them: uniform over the stored steps, or env-balanced (an env
uniform among those with a start, then a start uniform within it; rows ordered by env); a
prioritized buffer: by priority over the sampleable ones. With ``pad=False`` only starts whose
``L`` steps are all real. A start ``t`` is *whole* when ``t + L <= count`` and,
``within_episode``, the episode of step ``t + L - 1`` began at or before ``t``.

Where the core redraws starts that are not whole (a loop whose length depends on values), the
device buffer draws exactly among all whole starts: a cumulative count over the ``E * C``
slots and a binary search per draw (``O(E * C)``, the same law, no host synchronisation).
Prioritized starts with ``pad=False`` are drawn by their masses renormalised among whole
starts, as the core's ``draw_among`` (``O(E * C)``); rank-based, by the exact rank masses
among all drawable slots (:meth:`~rlreplay.torch.prioritized.Priorities.rank_masses`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlreplay.torch import draws
from rlreplay.torch.assemble import select, zero_where
from rlreplay.torch.prioritized import draw_by_masses

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from rlreplay.storage.torch import TorchStorage
    from rlreplay.torch.prioritized import Priorities
    from rlreplay.torch.ring import Ring

__all__ = ["gather", "prioritized_starts", "uniform_starts", "whole"]


def whole(ring: Ring, env: Tensor, t: Tensor, length: int, within_episode: bool) -> Tensor:
    """Whether the runs of ``length`` from stored steps ``t`` of envs ``env`` are all real."""
    ok = (t >= ring.head.index_select(0, env)) & (t + length <= ring.now_of(env))
    if within_episode:
        ok = ok & (ring.ep_start.index_select(0, ring.rows_of(t + length - 1, env)) <= t)
    return ok


def _all_starts(ring: Ring, length: int, within_episode: bool) -> tuple[Tensor, Tensor, Tensor]:
    """``(env, t, whole)`` of every slot's step in ``[head, head + C)``, env-major (slot
    ``e * C + j`` is env ``e``'s ``j``-th step from its head)."""
    import torch

    C = ring.config.env_capacity
    idx = torch.arange(ring.config.num_slots, dtype=torch.int64, device=ring.device)
    env = torch.div(idx, C, rounding_mode="floor")
    t = ring.head.index_select(0, env) + idx - env * C
    return env, t, whole(ring, env, t, length, within_episode)


def uniform_starts(
    ring: Ring, gen: torch.Generator, batch_size: int, length: int, within_episode: bool,
    pad: bool, balance_envs: bool,
) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """``(env, t0, any)``: uniform (or env-balanced) starts, and whether any start exists."""
    import torch

    E, C = ring.config.num_envs, ring.config.env_capacity
    if not pad and within_episode:  # exactly among the whole runs
        all_env, all_t, ok = _all_starts(ring, length, True)
        if balance_envs:
            counts = ok.reshape(E, C).sum(1)
            env, pos = draws.balanced(counts, batch_size, gen)
            target = (torch.cumsum(counts, 0) - counts).index_select(0, env) + pos
        else:
            target = draws.below(ok.sum(), batch_size, gen)
        cum = torch.cumsum(ok.long(), 0)
        row = torch.searchsorted(cum, target, right=True).clamp_max(E * C - 1)
        env, t, exists = all_env.index_select(0, row), all_t.index_select(0, row), cum[-1] > 0
    else:
        head = ring.head
        now = ring.now
        last = now - (0 if pad else length - 1)
        end = torch.maximum(
            head, last if not isinstance(last, int) else torch.full_like(head, last)
        )
        sizes = end - head
        exists = sizes.sum() > 0
        if balance_envs:
            env, pos = draws.balanced(sizes, batch_size, gen)
            t = head.index_select(0, env) + pos
        else:
            env, t = draws.to_steps(head, sizes, draws.below(sizes.sum(), batch_size, gen))
    if balance_envs:  # rows ordered by env, as the core's
        order = torch.argsort(env, stable=True)
        env, t = env.index_select(0, order), t.index_select(0, order)
    return env, t, exists


def prioritized_starts(
    prio: Priorities, gen: torch.Generator, batch_size: int, length: int, within_episode: bool,
    beta: float,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
    """``(env, t0, probabilities, weights)`` of starts of whole runs, by their masses
    renormalised among them (the core's ``draw_among``): ``O(E * C)``."""
    import torch

    ring, c = prio.ring, prio.config
    rows = torch.arange(c.num_slots, dtype=torch.int64, device=ring.device)
    env, t = ring.step_in_row(rows)
    ok = whole(ring, env, t, length, within_episode)
    # Rank-based: the exact ranks among all drawable slots, renormalised among whole starts.
    slot_masses = prio.rank_masses() if c.rank_based else prio.sums.get(rows)
    masses = torch.where(ok, slot_masses, 0.0)
    row, probabilities, weights = draw_by_masses(masses, rows, batch_size, gen, c.stratified, beta)
    return env.index_select(0, row), t.index_select(0, row), probabilities, weights


def gather(
    ring: Ring, storage: TorchStorage, env: Tensor, t0: Tensor, length: int,
    within_episode: bool,
) -> dict[str, Tensor]:  # fmt: skip
    """The runs of ``length`` from steps ``t0`` of envs ``env`` (stored, or the rows are
    arbitrary): the keys of :meth:`rlreplay.ReplayBuffer.get_sequences`."""
    import torch

    c = ring.config
    E, F = c.num_envs, c.finals_per_env
    lanes = torch.arange(length, dtype=torch.int64, device=ring.device)
    pos = t0[:, None] + lanes
    envs = env[:, None].expand_as(pos)
    rows = ring.rows_of(pos, envs)
    now = ring.now_of(env)
    count = now if isinstance(now, int) else now[:, None]
    fid = ring.final_fid[rows]
    # Real steps: before the cursor and, within episodes, up to the first end from t0.
    stored = pos < count
    n_real = (now - t0).clamp_max(length)
    if within_episode:
        ends = (stored & (fid != -1)).long()
        first = torch.where(ends.amax(1) > 0, torch.argmax(ends, 1), length)
        n_real = torch.minimum(n_real, first + 1)
    mask = lanes < n_real[:, None]
    ends_b = mask & (fid >= 0)
    follows = mask & (fid == -1) & (pos + 1 < count)
    next_rows = ring.rows_of(pos + 1, envs)
    final_pos = envs * F + torch.remainder(fid.clamp_min(0), F)

    out: dict[str, Tensor] = {}
    nexts: dict[str, Tensor] = {}
    for name, f in c.schema.fields.items():
        vals = storage.take(name, rows)
        out[name] = zero_where(~mask, vals)
        if f.observation:
            nxt = zero_where(~follows, storage.take(name, next_rows))
            final = storage.take_finals(name, final_pos)
            nexts["next_" + name] = select(ends_b, final, nxt)
    out.update(nexts)
    out["mask"] = mask
    out["next_known"] = ends_b | follows
    out["ids"] = t0 * E + env
    out["env_ids"] = env
    return out
