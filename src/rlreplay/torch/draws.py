"""Uniform draws over per-env ranges of steps, the recency mix, and draws without replacement,
on the device.

As in the NumPy core (:mod:`rlreplay.sampling.uniform`), env ``e``'s candidates are the steps
``[lo_e, hi_e)``; enumerating the ranges env after env gives each candidate a *global
position* in ``[0, total)``, and a draw is a position mapped back to ``(env, t)`` through the
cumulative sizes (:func:`to_steps`). An integer uniform in ``[0, n)`` is ``floor(u * n)`` of a
float64 uniform ``u``, as the core draws it (:func:`below`). The recency mix draws ``k =
ceil(recent_ratio * B)`` positions among the ``recent_steps`` newest candidates of each env
and the other ``B - k`` among all of them, recent draws first, as the core's ``draw_mixed``.

Draws without replacement (:func:`distinct`) give every row of the buffer an independent
uniform key (``-1`` for a row that is no candidate) and take the ``B`` largest
(:func:`torch.topk`): a uniformly random ordered ``B``-subset of the candidates, the core's
law, with shapes that depend on ``B`` and the capacity only (``O(E * C)`` per draw).

Everything takes the random bits from a :class:`torch.Generator` on the device and reads no
device value on the host: totals stay 0-d tensors.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from rlreplay.torch.ring import Candidates, Ring

__all__ = [
    "balanced",
    "below",
    "distinct",
    "mixed",
    "recent_count",
    "spread",
    "to_steps",
    "uniform",
]


#: Up to this many envs, :func:`to_steps` maps positions to envs by comparing each with every
#: env's end (``B * E`` compares, one fused kernel) rather than by :func:`torch.searchsorted`.
_COMPARE_ENVS = 64


def recent_count(recent_ratio: float, batch_size: int) -> int:
    """``ceil(recent_ratio * B)``, rounded as the core rounds it (``0.55 * 100`` is 55)."""
    return math.ceil(round(recent_ratio * batch_size, 9)) if recent_ratio > 0 else 0


def below(n: Tensor, count: int, gen: torch.Generator) -> Tensor:
    """``count`` int64 integers uniform in ``[0, n)`` (``n`` a 0-d tensor; 0 where ``n`` is 0):
    ``floor(u * n)`` of float64 uniforms (see :func:`spread`: never ``n``)."""
    import torch

    u = torch.rand(count, dtype=torch.float64, device=n.device, generator=gen)
    return (u * n).long()


def to_steps(lo: Tensor, sizes: Tensor, pos: Tensor) -> tuple[Tensor, Tensor]:
    """Global positions -> ``(env, t)`` over the ranges ``[lo_e, lo_e + sizes_e)``."""
    import torch

    ends = torch.cumsum(sizes, 0)
    if sizes.shape[0] <= _COMPARE_ENVS:  # a (B, E) compare: one fused kernel, no search
        env = (pos[:, None] >= ends).sum(1).clamp_max(sizes.shape[0] - 1)
    else:
        env = torch.searchsorted(ends, pos, right=True).clamp_max(sizes.shape[0] - 1)
    # Position p of env e is step lo_e + p - start_e, start_e = ends_e - sizes_e.
    shift = lo - (ends - sizes)
    return env, shift.index_select(0, env) + pos


def uniform(
    ring: Ring, cands: Candidates, batch_size: int, gen: torch.Generator
) -> tuple[Tensor, Tensor, Tensor]:
    """``batch_size`` steps drawn uniformly, with replacement, from the sampleable steps
    ``cands`` (``ring.candidates()``; with no candidate at all: arbitrary steps). Returns
    ``(env, t, total)``, ``total`` the number of candidates (0-d)."""
    return spread(ring, cands, torch_rand(batch_size, ring.device, gen), search=True)


def spread(
    ring: Ring, cands: Candidates, u: Tensor, search: bool = False
) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`uniform` from its float64 uniforms ``u``: position ``floor(u * total)`` among
    the candidates, mapped to ``(env, t)`` as :func:`to_steps` maps it (``search``: with
    :func:`torch.searchsorted`, one kernel, else with an ``(E - 1, B)`` compare summed over
    envs; the same envs). Returns ``(env, t, total)``.

    The position is below ``total`` with no clip: a float64 ``u < 1`` is at most ``1 -
    2**-53``, so for an integer ``0 < n < 2**53`` the exact ``u * n`` is below ``n`` by more
    than half the spacing of float64 just below ``n`` and rounds to a float below ``n``.
    """
    import torch

    sizes = cands.sizes
    ends = torch.cumsum(sizes, 0)
    total = ends[-1]
    pos = (u * total).long()
    if search:  # (no env past the last: ends[:-1])
        env = torch.searchsorted(ends[:-1], pos, right=True)
    else:
        env = (ends[:-1, None] <= pos).sum(0)
    if cands.spans is None:  # hi - ends: lo - (ends - sizes) wherever sizes > 0, as drawn
        t = (ring.hi - ends).index_select(0, env).add_(pos)
        return env, t, total
    t = (ring.lo + sizes - ends).index_select(0, env).add_(pos)
    return env, ring.unhole(env, t, cands), total


def balanced(sizes: Tensor, batch_size: int, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """Per draw, an env uniform among those with ``sizes > 0``, then a position uniform in
    ``[0, sizes_e)`` (the core's ``draw_balanced``, ALF ``get_batch``): ``(env, pos)``."""
    import torch

    has = (sizes > 0).long()
    env, _ = to_steps(sizes.new_zeros(sizes.shape), has, below(has.sum(), batch_size, gen))
    u = torch_rand(batch_size, sizes.device, gen)
    pos = (u * sizes.index_select(0, env)).long()
    return env, torch.minimum(pos, (sizes.index_select(0, env) - 1).clamp_min(0))


def torch_rand(count: int, device: torch.device, gen: torch.Generator) -> Tensor:
    """``count`` float64 uniforms in ``[0, 1)``."""
    import torch

    return torch.rand(count, dtype=torch.float64, device=device, generator=gen)


def mixed(
    ring: Ring, cands: Candidates, batch_size: int, recent: int, recent_steps: int,
    gen: torch.Generator,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    """``recent`` draws uniform over the ``recent_steps`` newest candidates of each env, then
    ``batch_size - recent`` uniform over all candidates (``cands``); each with replacement."""
    import torch

    sizes = cands.sizes
    newest = sizes.clamp_max(recent_steps)
    if cands.spans is None:
        env_r, t_r = to_steps(ring.hi - newest, newest, below(newest.sum(), recent, gen))
        env_a, t_a = to_steps(ring.lo, sizes, below(sizes.sum(), batch_size - recent, gen))
        return torch.cat([env_r, env_a]), torch.cat([t_r, t_a])
    # Positions among the sampleable steps (less the holes), then mapped past the holes.
    base = ring.lo + sizes - newest
    env_r, t_r = to_steps(base, newest, below(newest.sum(), recent, gen))
    env_a, t_a = to_steps(ring.lo, sizes, below(sizes.sum(), batch_size - recent, gen))
    env = torch.cat([env_r, env_a])
    return env, ring.unhole(env, torch.cat([t_r, t_a]), cands)


def _keys(ring: Ring, candidate: Tensor, gen: torch.Generator) -> Tensor:
    """An independent float64 uniform per row where ``candidate``, ``-1`` elsewhere."""
    import torch

    u = torch.rand(candidate.shape[0], dtype=torch.float64, device=candidate.device, generator=gen)
    return torch.where(candidate, u, -1.0)


def distinct(
    ring: Ring, cands: Candidates, batch_size: int, recent: int, recent_steps: int,
    gen: torch.Generator,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    """Draws without replacement, as the core's ``draw_mixed`` with ``replacement=False`` and
    ``batch_size <= #candidates`` (the caller picks these rows only then, and needs
    ``batch_size <= E * C``): the first ``k = min(recent, #recent candidates)`` are distinct
    recent candidates, the others distinct among the candidates not drawn yet, each part a
    uniformly random ordered subset (``cands``: ``ring.candidates()``). ``O(E * C)``: a key
    per row and a top-k."""
    import torch

    n = ring.config.num_slots
    rows = torch.arange(n, dtype=torch.int64, device=ring.device)
    env, t = ring.step_in_row(rows)
    candidate = ring.sampleable(env, t)
    keys = _keys(ring, candidate, gen)
    if recent == 0:
        picked = torch.topk(keys, batch_size, sorted=True).indices
        return ring.step_in_row(picked)
    sizes = cands.sizes
    newest = sizes.clamp_max(recent_steps)
    if cands.spans is None:
        oldest_recent = ring.hi - newest
    else:  # the step at position size - newest among the sampleable ones
        oldest_recent = ring.unhole(ring.envs, ring.lo + sizes - newest, cands)
    is_recent = candidate & (t >= oldest_recent.index_select(0, env))
    recent_keys = _keys(ring, is_recent, gen)
    top_r = torch.topk(recent_keys, min(recent, n), sorted=True)
    valid = top_r.values >= 0  # a prefix: the k picks that are recent candidates
    k = valid.sum()
    # The rest: distinct among the candidates the recent part did not take.
    keys = keys.index_put((top_r.indices,), torch.where(valid, -1.0, keys[top_r.indices]))
    rest = torch.topk(keys, batch_size, sorted=True).indices
    i = torch.arange(batch_size, dtype=torch.int64, device=ring.device)
    from_recent = top_r.indices.index_select(0, i.clamp_max(top_r.indices.shape[0] - 1))
    from_rest = rest.index_select(0, (i - k).clamp_min(0))
    return ring.step_in_row(torch.where(i < k, from_recent, from_rest))
