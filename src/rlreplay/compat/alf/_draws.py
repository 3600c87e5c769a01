"""Where :meth:`ReplayBuffer.get_batch` sequences start, and ALF's returns from the core's.

ALF's law of starts, over env ``e``'s possible starts ``[lo_e, hi_e)`` (the first
``num_earliest_frames_ignored`` stored steps are never starts; ``hi_e = current_pos - L + 1``
keeps every step of a sequence stored):

* uniform: env ``e`` gets ``n // E`` starts and ``n % E`` distinct random envs one more (the
  recent part and the rest are split separately); within an env the core's
  :func:`~rlreplay.sampling.draw_mixed` draws them, recent ones among the env's newest
  ``recent_steps`` starts, without duplicates unless ``replacement``;
* prioritized: the core's :meth:`~rlreplay.PrioritizedReplayBuffer.sample_starts` draws
  starts with ``P(i) = p_i / sum p`` over the possible starts (from its sum tree, redrawing
  the ones out of bounds), the newest step of a running episode (which the core draws only
  once its successor is stored) gets its share here (:func:`priority_starts`);
  ``importance_weight_i = N * P(i) = p_i / mean(non-zero p)`` for every row, the recent ones
  included (:func:`priority_weights`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from rlreplay import PrioritizedReplayBuffer
from rlreplay.compat.alf._odd import (
    OddPriorities,
    ReplayAssertionError,
    odd_priorities,
    odd_starts,
)
from rlreplay.sampling import draw_mixed

__all__ = [
    "ReplayAssertionError",
    "StartRanges",
    "alf_returns",
    "draw_starts",
    "gathered_returns",
    "priority_starts",
    "priority_weights",
    "start_masses",
    "sequence_returns",
    "uniform_starts",
]

Array = np.ndarray[Any, Any]


class StartRanges(NamedTuple):
    """Per env: possible starts ``[lo, hi)`` and stored steps; sequence length, ignored steps."""

    lo: Array
    hi: Array
    sizes: Array
    length: int
    ignored: int


def balanced(n: int, num_envs: int, rng: np.random.Generator) -> Array:
    """ALF's split of ``n`` draws over envs: ``n // E`` each, the rest to distinct random envs."""
    counts = np.full(num_envs, n // num_envs, np.int64)
    counts[rng.permutation(num_envs)[: n % num_envs]] += 1
    return counts


def uniform_starts(
    rng: np.random.Generator,
    ranges: StartRanges,
    n: int,
    n_recent: int,
    recent_steps: int,
    replacement: bool,
) -> tuple[Array, Array]:
    """``n`` env-balanced uniform starts ``(env, pos)``, ``n_recent`` of them recent, by env.

    Raises:
        ReplayAssertionError: An env has no possible start (ALF's message).
    """
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    lo, hi = ranges.lo, ranges.hi
    if (hi - lo).min() < 1:
        raise ReplayAssertionError(
            f"Not all environments has enough data. The smallest data size is: "
            f"{int(ranges.sizes.min())}; get_batch needs batch_length + "
            f"num_earliest_frames_ignored = {ranges.length + ranges.ignored} steps in every env. "
            "Try storing more data "
            "before calling get_batch"
        )
    recent = balanced(n_recent, lo.shape[0], rng)
    total = recent + balanced(n - n_recent, lo.shape[0], rng)
    envs, starts = [], []
    for e in np.flatnonzero(total).tolist():
        k = int(total[e])
        # The core's kernel on this env's range alone: ratio k_recent / k gives exactly
        # k_recent recent draws (it rounds ratio * k to 9 digits before its ceil).
        _, t = draw_mixed(
            lo[e : e + 1], hi[e : e + 1], k, rng,
            recent_ratio=float(recent[e]) / k, recent_steps=recent_steps,
            replacement=replacement,
        )  # fmt: skip
        envs.append(np.full(k, e, np.int64))
        starts.append(t)
    return np.concatenate(envs), np.concatenate(starts)


def expand(lo: Array, hi: Array) -> tuple[Array, Array]:
    """``(env, pos)`` of every position in the per-env ranges ``[lo, hi)`` (empty if hi <= lo)."""
    sizes = np.maximum(hi - lo, 0)
    env = np.repeat(np.arange(lo.shape[0], dtype=np.int64), sizes)
    offset = np.arange(env.shape[0], dtype=np.int64) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    return env, np.repeat(lo, sizes) + offset


class StartMasses(NamedTuple):
    """The priorities of a get_batch's possible starts, as ALF's sum tree holds them.

    Attributes:
        total: Sum of the priorities of the possible starts (ALF's ``summary()``).
        nonzero: How many have a priority > 0 (ALF's ``nnz``).
        open_env: Env of each possible start the core does not draw: the newest step of a
            running episode (its successor is not stored yet), possible when ``L == 1``.
        open_pos: Its position.
        open_p: Its priority.
    """

    total: float
    nonzero: int
    open_env: Array
    open_pos: Array
    open_p: Array


def start_masses(core: PrioritizedReplayBuffer, ranges: StartRanges) -> StartMasses:
    """The priorities over the possible starts ``[ranges.lo, ranges.hi)`` (``O(starts)``).

    ALF keeps a priority in its sum tree for every possible start, the newest step of a
    running episode included (with ``batch_length=1``); the core draws a step only once its
    successor is stored, so those newest steps are listed apart, to be drawn here.
    """
    E = ranges.lo.shape[0]
    env, pos = expand(ranges.lo, ranges.hi)
    p = core.get_priorities(pos * E + env)
    counts = ranges.hi + ranges.length - 1  # one past each env's newest step
    newest = np.flatnonzero((ranges.hi == counts) & (ranges.hi > ranges.lo))
    o_env, o_pos = newest, counts[newest] - 1
    running = core.steps_to_episode_end(o_pos * E + o_env) < 0
    o_env, o_pos = o_env[running], o_pos[running]
    return StartMasses(
        float(p.sum()),
        int(np.count_nonzero(p)),
        o_env,
        o_pos,
        core.get_priorities(o_pos * E + o_env),
    )


def priority_weights(
    core: PrioritizedReplayBuffer, masses: StartMasses, env: Array, pos: Array
) -> Array:
    """ALF's importance weights ``p_i * nnz / summary()`` (float32) of starts ``(env, pos)``.

    Seed: "importance_weights: priority divided by the average of all non-zero priorities in
    the buffer", for every row of the batch, the recent ones included.
    """
    p = core.get_priorities(pos * core.num_envs + env)
    with np.errstate(divide="ignore", invalid="ignore"):  # ALF's 0 / 0 when all are 0
        out: Array = (p * (masses.nonzero / np.float64(masses.total))).astype(np.float32)
    return out


def priority_starts(
    core: PrioritizedReplayBuffer,
    rng: np.random.Generator,
    ranges: StartRanges,
    masses: StartMasses,
    n: int,
) -> tuple[Array, Array]:
    """``n`` starts drawn with ``P(i) = p_i / sum p`` over the possible starts, with replacement.

    The core's :meth:`~rlreplay.PrioritizedReplayBuffer.sample_starts` draws among the steps
    it can draw (the core's ``alpha`` is 1, so its masses are the priorities); the newest steps
    of running episodes (``masses.open_*``) get their share: each draw is one of them with
    probability ``sum p_open / sum p``, then by ``p_open``. Rows come in random order.

    Raises:
        ReplayAssertionError: No possible start has a priority > 0 (ALF's message).
    """
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if not masses.total > 0.0:
        raise ReplayAssertionError(
            "There is no data in the buffer or the data has not been assigned valid priority "
            f"(no start of {ranges.length} stored steps has a priority > 0)"
        )
    m_open = float(masses.open_p.sum())
    k = int(rng.binomial(n, min(1.0, m_open / masses.total))) if m_open > 0 else 0
    env, pos = np.zeros(0, np.int64), np.zeros(0, np.int64)
    if k < n:
        s = core.sample_starts(n - k, ranges.lo, ranges.hi)
        env, pos = s.env_ids, s.steps
    if k:
        pick = rng.choice(masses.open_env.shape[0], size=k, p=masses.open_p / m_open)
        env = np.concatenate([env, masses.open_env[pick]])
        pos = np.concatenate([pos, masses.open_pos[pick]])
    order = rng.permutation(n)
    return env[order], pos[order]


def draw_starts(
    rng: np.random.Generator,
    pcore: PrioritizedReplayBuffer | None,
    heads: Array,
    counts: Array,
    B: int,
    L: int,
    *,
    ignored: int,
    recent_ratio: float,
    recent_steps: int,
    replacement: bool,
    odd: OddPriorities | None = None,
) -> tuple[Array, Array, Array | None]:
    """Starts ``(env, pos)`` of ``B`` sequences, and importance weights if prioritized.

    ``heads`` and ``counts`` are each env's oldest stored position and ``current_pos``;
    ``pcore`` is the prioritized core (``None``: uniform starts drawn with ``rng``); ``odd``
    the negative, NaN or infinite priorities, drawn by ALF's algorithm (:mod:`._odd`).
    """
    n_recent = 0
    if recent_ratio > 0:
        avg = (counts - heads).sum() / heads.shape[0] - (L - 1 + ignored)
        if avg * recent_ratio > recent_steps:
            n_recent = min(B, math.ceil(round(B * recent_ratio, 9)))
    ranges = StartRanges(heads + ignored, counts - L + 1, counts - heads, L, ignored)
    if pcore is None:
        env, t = uniform_starts(rng, ranges, B, n_recent, recent_steps, replacement)
        return env, t, None
    if odd is not None and odd.mask.any():
        all_env, all_pos = expand(ranges.lo, ranges.hi)
        got = odd_starts(pcore, rng, odd, all_env, all_pos, B - n_recent)
        if got is not None:
            env_r, t_r = uniform_starts(rng, ranges, n_recent, n_recent, recent_steps, replacement)
            env, t = np.concatenate([got[0], env_r]), np.concatenate([got[1], t_r])
            p = odd_priorities(pcore, odd, env, t)
            with np.errstate(invalid="ignore"):  # inf * 0, as in ALF's arithmetic
                out: Array = (p * got[2]).astype(np.float32)  # every row, the recent ones too
            return env, t, out
    masses = start_masses(pcore, ranges)
    env_p, t_p = priority_starts(pcore, rng, ranges, masses, B - n_recent)
    env_r, t_r = uniform_starts(rng, ranges, n_recent, n_recent, recent_steps, replacement)
    env, t = np.concatenate([env_p, env_r]), np.concatenate([t_p, t_r])
    return env, t, priority_weights(pcore, masses, env, t)


def alf_returns(
    g: Array, mask: Array, ends: Array, cut: Array, length: int, default: float
) -> Array:
    """ALF's discounted returns of the first ``length`` steps of runs from the core's ``g``.

    ``g``, ``mask``, ``ends`` (the step ends its episode) and ``cut`` (its episode was cut by a
    ``FIRST`` before any ``LAST``, see :class:`~rlreplay.compat.alf._episodic.CutEpisodes`)
    are ``(B, length + 1)``: a step's return is ``default`` in a cut episode, else 0 at its
    episode's end, else the core's return of the next step (the rewards after it),
    ``default`` where that step is not stored yet.
    """
    after = np.where(mask[:, 1 : length + 1], g[:, 1 : length + 1], default)
    done = np.where(ends[:, :length], 0.0, after)
    out: Array = np.where(cut[:, :length], default, done).astype(np.float32)
    return out


def sequence_returns(seq: Mapping[str, Array], cut: Array, length: int, default: float) -> Array:
    """:func:`alf_returns` of the first ``length`` steps of runs of ``length + 1`` steps."""
    ends = seq["terminated"] | seq["truncated"]
    return alf_returns(seq["discounted_return"], seq["mask"], ends, cut, length, default)


def gathered_returns(data: Mapping[str, Array], cut: Array, num_envs: int, default: float) -> Array:
    """:func:`alf_returns` of every step of ``gather_all`` data (``(E, T)``; none stored after)."""
    E = num_envs
    g = np.concatenate([data["discounted_return"], np.zeros((E, 1), np.float32)], 1)
    mask = np.concatenate([data["mask"], np.zeros((E, 1), np.bool_)], 1)
    ends = data["terminated"] | data["truncated"]
    return alf_returns(g, mask, ends, cut, ends.shape[1], default)
